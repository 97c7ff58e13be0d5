package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pw := write("pw", " s3cret\n")
	empty := write("empty", "\n")
	notPEM := write("ca.pem", "not a certificate")
	tests := []struct {
		name string
		s    Settings
		// wantErr lists the fields the error must name; nil: no error
		wantErr []string
	}{
		{name: "minimal", s: Settings{URL: "redis://127.0.0.1:6379/0"}},
		{name: "tls and password file", s: Settings{URL: "rediss://redis:6380/1", PasswordFile: pw}},
		{name: "no URL", s: Settings{}, wantErr: []string{"URL"}},
		{name: "bad scheme", s: Settings{URL: "http://redis:6379"}, wantErr: []string{"URL"}},
		{name: "negative and out of range", s: Settings{URL: "redis://r:1/0", Timeout: 2 * time.Second,
			DialTimeout: -1, LeaseTTL: -1, HeartbeatInterval: -1, Replicas: -1, DownAfter: -1},
			wantErr: []string{"Timeout", "DialTimeout", "LeaseTTL", "HeartbeatInterval", "Replicas", "DownAfter"}},
		{name: "lease shorter than three beats", s: Settings{URL: "redis://r:1/0", LeaseTTL: time.Second, HeartbeatInterval: time.Second},
			wantErr: []string{"LeaseTTL"}},
		{name: "password file missing", s: Settings{URL: "redis://r:1/0", PasswordFile: filepath.Join(dir, "nope")}, wantErr: []string{"PasswordFile"}},
		{name: "password file empty", s: Settings{URL: "redis://r:1/0", PasswordFile: empty}, wantErr: []string{"PasswordFile"}},
		{name: "CA without TLS", s: Settings{URL: "redis://r:1/0", CAFile: notPEM}, wantErr: []string{"CAFile"}},
		{name: "CA not PEM", s: Settings{URL: "rediss://r:1/0", CAFile: notPEM}, wantErr: []string{"CAFile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.s)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("New() = nil, want an error naming %v", tt.wantErr)
			}
			for _, f := range tt.wantErr {
				if !strings.Contains(err.Error(), "Settings."+f) {
					t.Errorf("New() = %v, want it to name Settings.%s", err, f)
				}
			}
		})
	}
}

func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, opt, err := Settings{URL: "rediss://:inurl@redis:6380/2", PasswordFile: pw}.normalized()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if s.KeyPrefix != defaultKeyPrefix || s.Timeout != defaultTimeout || s.LeaseTTL != defaultLeaseTTL ||
		s.HeartbeatInterval != defaultHeartbeatInterval || s.Replicas != 1 || s.DownAfter != defaultDownAfter ||
		!strings.HasPrefix(s.ReplicaID, host+"-") {
		t.Errorf("normalized() = %+v, want the defaults", s)
	}
	if opt.Password != "s3cret" || opt.DB != 2 || opt.TLSConfig == nil || opt.ReadTimeout != defaultTimeout ||
		opt.MaxRetries != -1 || !opt.ContextTimeoutEnabled {
		t.Errorf("redis options = password %q, db %d, tls %v, read timeout %v, retries %d, context timeouts %v",
			opt.Password, opt.DB, opt.TLSConfig != nil, opt.ReadTimeout, opt.MaxRetries, opt.ContextTimeoutEnabled)
	}
	s, _, err = Settings{URL: "redis://r:1/0", LeaseTTL: 300 * time.Millisecond}.normalized()
	if err != nil || s.HeartbeatInterval != 100*time.Millisecond {
		t.Errorf("HeartbeatInterval for LeaseTTL 300ms = %v, %v, want 100ms", s.HeartbeatInterval, err)
	}
}
