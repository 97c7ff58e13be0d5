package config

import (
	"strings"
	"testing"
)

// TestLoadMaxConnections covers server.max_connections (issue 16): 10000 by
// default, 0 (no limit) accepted, a negative value refused with its key and
// line, a non-integer refused by the decoder.
func TestLoadMaxConnections(t *testing.T) {
	t.Parallel()
	const pod = "upstreams: [{url: 'http://a:1'}]\n"
	tests := []struct {
		name    string
		yaml    string
		want    int
		wantErr string
	}{
		{"default", pod, 10000, ""},
		{"written", pod + "server: {max_connections: 2}\n", 2, ""},
		{"no limit", pod + "server: {max_connections: 0}\n", 0, ""},
		{"negative", pod + "server:\n  listen: ':8080'\n  max_connections: -1\n", 0,
			"config: line 4: server.max_connections: must be at least 0, got -1"},
		{"not an integer", pod + "server: {max_connections: many}\n", 0, "server.max_connections"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := parseCase(t, tt.yaml, tt.wantErr)
			if c == nil {
				return
			}
			if c.Server.MaxConnections != tt.want {
				t.Errorf("Parse(%q).Server.MaxConnections = %d, want %d", tt.yaml, c.Server.MaxConnections, tt.want)
			}
		})
	}
	c := Default()
	c.Server.MaxConnections = -5
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "server.max_connections: must be at least 0, got -5") {
		t.Errorf("Validate(max_connections -5) = %v, want a server.max_connections error", err)
	}
}
