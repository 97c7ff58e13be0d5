package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// loadAdminToken reads server.admin_token_file. An empty path means no
// token; an empty file is an error, so a missing Secret never opens the door.
func loadAdminToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("gatekeeper: server.admin_token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("gatekeeper: server.admin_token_file: %s is empty", path)
	}
	return tok, nil
}

// adminAuth requires "Authorization: Bearer TOKEN" on every admin request
// while a token is configured. The comparison takes constant time.
func (a *app) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := a.adminToken.Load()
		if want == nil || *want == "" {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(*want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gatekeeper-admin"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// certLoader serves the traffic listener's certificate and re-reads the
// files when they change (checked at most once a second, at handshakes), so
// a rotated certificate needs no restart. A pair that fails to load is
// logged and the previous one stays. Safe for concurrent use.
type certLoader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	// mu guards the fields below.
	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // modification times and sizes of both files
	checked time.Time
}

func newCertLoader(certFile, keyFile string, log *slog.Logger) (*certLoader, error) {
	l := &certLoader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	stamp, err := l.fileStamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: server.tls: %w", err)
	}
	l.cert, l.stamp, l.checked = &cert, stamp, l.now()
	return l, nil
}

func (l *certLoader) fileStamp() (string, error) {
	var b strings.Builder
	for _, f := range []string{l.certFile, l.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("gatekeeper: server.tls: %w", err)
		}
		fmt.Fprintf(&b, "%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return b.String(), nil
}

// get is tls.Config.GetCertificate.
func (l *certLoader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.checked) < time.Second {
		return l.cert, nil
	}
	l.checked = now
	stamp, err := l.fileStamp()
	if err != nil || stamp == l.stamp {
		return l.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil { // a half-written rotation: keep serving the old pair
		l.log.LogAttrs(context.Background(), slog.LevelWarn, "tls certificate reload failed; keeping the previous one",
			slog.String("err", err.Error()))
		return l.cert, nil
	}
	l.cert, l.stamp = &cert, stamp
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "tls certificate reloaded", slog.String("state", "reloaded"))
	return l.cert, nil
}

// configureTLS makes ts serve TLS with HTTP/2 and HTTP/1.1 when the policy
// asks for it, with a cap on concurrent HTTP/2 streams per connection.
func (a *app) configureTLS(ts *http.Server) (bool, error) {
	s := a.cfg().Server
	if s.TLS == nil {
		return false, nil
	}
	l, err := newCertLoader(s.TLS.CertFile, s.TLS.KeyFile, a.log)
	if err != nil {
		return false, err
	}
	ts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: l.get}
	ts.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: s.MaxConcurrentStreams}
	return true, nil
}
