package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// TestDNSDiscovery runs two pods on 127.0.0.1 and 127.0.0.2 (same port) behind
// one name whose addresses change, and checks that pods that come and go
// are picked up without a restart.
func TestDNSDiscovery(t *testing.T) {
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l1.Addr().(*net.TCPAddr).Port)
	l2, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		l1.Close()
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	for _, l := range []net.Listener{l1, l2} {
		addr := l.Addr().(*net.TCPAddr).IP.String()
		mux := http.NewServeMux()
		mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, addr)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	}

	var mu sync.Mutex
	addrs := []string{"127.0.0.1"}
	lookup := func(_ context.Context, host string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if host != "pods.test" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return append([]string(nil), addrs...), nil
	}
	cfg, err := config.Parse([]byte("upstreams: [{name: pods, url: 'http://pods.test:" + port + "', dns_interval: 1h}]\n" +
		"fast_breaker: {qps: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{lookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		var out []string
		for _, u := range a.snapshot().Upstreams {
			out = append(out, u.Name)
		}
		return out
	}
	send := func() string {
		rec := httptest.NewRecorder()
		a.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"x"}`)))
		return rec.Body.String()
	}
	if got := strings.Join(names(), ","); got != "pods/127.0.0.1" {
		t.Fatalf("upstreams at start = %s, want pods/127.0.0.1", got)
	}
	if got := send(); got != "127.0.0.1" {
		t.Errorf("request served by %q, want 127.0.0.1", got)
	}

	mu.Lock()
	addrs = []string{"127.0.0.2", "127.0.0.1"}
	mu.Unlock()
	if err := a.policy.Rediscover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(), ","); got != "pods/127.0.0.1,pods/127.0.0.2" {
		t.Errorf("upstreams after scale-up = %s", got)
	}
	if n := len(a.queue.Stats().Windows); n != 2 {
		t.Errorf("windows = %d, want 2", n)
	}

	mu.Lock()
	addrs = []string{"127.0.0.2"}
	mu.Unlock()
	if err := a.policy.Rediscover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(), ","); got != "pods/127.0.0.2" {
		t.Errorf("upstreams after scale-down = %s", got)
	}
	if got := send(); got != "127.0.0.2" {
		t.Errorf("request served by %q, want the remaining 127.0.0.2", got)
	}

	// A failed lookup keeps the last addresses.
	mu.Lock()
	addrs = nil
	mu.Unlock()
	if err := a.policy.Rediscover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(), ","); got != "pods/127.0.0.2" {
		t.Errorf("upstreams after an empty answer = %s, want the last known", got)
	}
}
