package config

import (
	"fmt"
	"net/url"
	"strings"
)

// ResolveURL returns the URL to call for h when upstream (an upstream's
// URL) enters a level. An absolute hook URL is returned as it is; a path
// ("/reset_prefix_cache") is resolved against upstream, keeping upstream's
// own path as a prefix, so one hook serves every pod.
func (h Hook) ResolveURL(upstream string) (string, error) {
	if !strings.HasPrefix(h.URL, "/") || strings.HasPrefix(h.URL, "//") {
		return h.URL, nil
	}
	base, err := url.Parse(upstream)
	if err != nil {
		return "", fmt.Errorf("config: hook url %q: upstream url: %w", h.URL, err)
	}
	ref, err := url.Parse(h.URL)
	if err != nil {
		return "", fmt.Errorf("config: hook url %q: %w", h.URL, err)
	}
	base.Path = strings.TrimSuffix(base.Path, "/") + ref.Path
	base.RawPath = ""
	base.RawQuery = ref.RawQuery
	base.Fragment = ""
	return base.String(), nil
}
