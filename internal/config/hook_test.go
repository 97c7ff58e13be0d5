package config

import "testing"

func TestHookResolveURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		hook, upstream, want string
	}{
		{"http://allocator:7000/empty_cache", "http://10.0.0.5:8000", "http://allocator:7000/empty_cache"},
		{"/reset_prefix_cache", "http://10.0.0.5:8000", "http://10.0.0.5:8000/reset_prefix_cache"},
		{"/reset_prefix_cache", "http://10.0.0.5:8000/", "http://10.0.0.5:8000/reset_prefix_cache"},
		{"/reset_prefix_cache?all=1", "https://gw/pods/a", "https://gw/pods/a/reset_prefix_cache?all=1"},
	}
	for _, tt := range tests {
		got, err := Hook{URL: tt.hook}.ResolveURL(tt.upstream)
		if err != nil || got != tt.want {
			t.Errorf("Hook{URL: %q}.ResolveURL(%q) = %q, %v; want %q", tt.hook, tt.upstream, got, err, tt.want)
		}
	}
	if _, err := (Hook{URL: "/x"}).ResolveURL("http://a b\x7f"); err == nil {
		t.Errorf("ResolveURL(bad upstream) = nil error, want one")
	}
}
