package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// urlRole says what a URL is for, which decides what it may contain.
type urlRole int

const (
	urlUpstream urlRole = iota // base URL: no query, fragment or credentials
	urlSource                  // scraped with GET: a query is fine
	urlHook                    // called by a hook: a query is fine
)

// url checks raw as an absolute http(s) URL for role and reports whether
// it is valid.
func (k *checker) url(path, raw string, role urlRole) bool {
	if raw == "" {
		k.add(path, "required")
		return false
	}
	msg := urlProblem(raw, role)
	if msg != "" {
		k.add(path, "%s, got %q", msg, raw)
	}
	return msg == ""
}

func urlProblem(raw string, role urlRole) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "scheme must be http or https"
	case u.Hostname() == "":
		return "host is missing"
	case u.Port() != "" && !validPort(u.Port()):
		return "port must be 1-65535"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not have a #fragment"
	case role == urlUpstream && (u.RawQuery != "" || u.ForceQuery):
		return "must not have a ?query"
	case role == urlUpstream && u.User != nil:
		return "must not carry credentials"
	}
	return ""
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// listen checks a listen address (host:port; the host may be empty, the
// port 0 for any free port).
func (k *checker) listen(path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		k.add(path, "must be host:port such as \":8080\" or \"127.0.0.1:9090\", got %q", addr)
		return
	}
	if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
		k.add(path, "port must be 0-65535, got %q", addr)
	}
}

func (k *checker) hooks(path string, hs []Hook) {
	for i, h := range hs {
		p := fmt.Sprintf("%s[%d]", path, i)
		k.oneOf(p+".method", h.Method, "GET", "POST", "PUT", "PATCH", "DELETE")
		if strings.HasPrefix(h.URL, "/") && !strings.HasPrefix(h.URL, "//") {
			if _, err := url.Parse(h.URL); err != nil || strings.Contains(h.URL, "#") {
				k.add(p+".url", "must be a path without #fragment, or an absolute http(s) URL, got %q", h.URL)
			}
		} else {
			k.url(p+".url", h.URL, urlHook)
		}
		for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
			v := h.Headers[name]
			if !isToken(name) {
				k.add(p+".headers", "%q is not a valid header name", name)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				k.add(p+".headers."+name, "value must not contain CR, LF or NUL")
			}
		}
		k.duration(p+".timeout", h.Timeout)
	}
}

// isToken reports whether s is a valid HTTP header name (RFC 9110 token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
