package config

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Classes are the traffic classes (optional): every request gets exactly
// one, which orders the admission queue (a higher priority never waits
// behind a lower one) and decides what is shed first under pressure.
type Classes struct {
	// Header, if set, is a request header that names the request's class
	// (one of List; any other value is ignored). gatekeeper trusts it:
	// strip it at your edge if clients must not choose their class.
	Header string `yaml:"header"`
	// Default is the class of a request nothing else places; it must be
	// listed.
	Default string `yaml:"default"`
	// List holds the classes; names are unique.
	List []Class `yaml:"list"`
}

// Class is one traffic class. A request is placed by, in order: Header,
// ClientKeys, Routes, then Classes.Default.
type Class struct {
	Name string `yaml:"name"` // unique; what the header and metrics call it
	// Priority ranks the class: higher goes first. Below 0 the class is
	// sheddable: refused with 503 shed_priority while every pod that could
	// serve it is degraded or worse.
	Priority int `yaml:"priority"`
	// Routes are request paths ("/v1/embeddings") that place a request here.
	Routes []string `yaml:"routes"`
	// ClientKeys place the requests of these clients here: "sha256:" and the
	// hex SHA-256 of the value of fast_breaker.per_client.header, so no key
	// is written in the policy.
	ClientKeys []string `yaml:"client_keys"`
	// QPS, above 0, is the class's own token bucket (besides the global and
	// per-client ones); Burst its size (0: qps rounded up).
	QPS   float64 `yaml:"qps"`
	Burst int     `yaml:"burst"` // the class's bucket size; 0: qps rounded up
	// TTFTDeadline, above 0, is the time-to-first-token deadline of the
	// class's requests (queue.ttft_deadline for them); 0: the queue's.
	TTFTDeadline time.Duration `yaml:"ttft_deadline"`
}

// Sheddable reports whether the class is refused first under pressure.
func (c Class) Sheddable() bool { return c.Priority < 0 }

func (c *Classes) fillDerived() {
	for i := range c.List {
		if cl := &c.List[i]; cl.Burst == 0 {
			cl.Burst = secondsWorth(cl.QPS)
		}
	}
}

func (k *checker) classes(c *Classes, perClient *PerClient) {
	if c == nil {
		return
	}
	if c.Header != "" && !isToken(c.Header) {
		k.add("classes.header", "must be a valid header name, got %q", c.Header)
	}
	if len(c.List) == 0 {
		k.add("classes.list", "must list at least one class")
	}
	names := map[string]bool{}
	for i, cl := range c.List {
		p := fmt.Sprintf("classes.list[%d]", i)
		switch {
		case cl.Name == "":
			k.add(p+".name", "must not be empty")
		case names[cl.Name]:
			k.add(p+".name", "%q is listed twice", cl.Name)
		}
		names[cl.Name] = true
		for j, r := range cl.Routes {
			if !strings.HasPrefix(r, "/") {
				k.add(fmt.Sprintf("%s.routes[%d]", p, j), "must be a path starting with /, got %q", r)
			}
		}
		for j, key := range cl.ClientKeys {
			if !validKeyHash(key) {
				k.add(fmt.Sprintf("%s.client_keys[%d]", p, j), "must be \"sha256:\" and 64 hex digits, got %q", key)
			}
		}
		if len(cl.ClientKeys) > 0 && perClient == nil {
			k.add(p+".client_keys", "needs fast_breaker.per_client.header, the header whose value is hashed")
		}
		if !(cl.QPS >= 0) {
			k.add(p+".qps", "must be a number ≥ 0 (0: no limit of its own), got %v", cl.QPS)
		}
		if cl.QPS > 0 {
			k.atLeast(p+".burst", int64(cl.Burst), 1)
		}
		k.notNegative(p+".ttft_deadline", cl.TTFTDeadline, "0: queue.ttft_deadline")
	}
	if !names[c.Default] {
		k.add("classes.default", "must name a listed class, got %q", c.Default)
	}
}

func validKeyHash(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}
