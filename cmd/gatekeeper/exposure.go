package main

import (
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/tlscert"
)

// configureTLS makes ts serve TLS with HTTP/2 and HTTP/1.1 when the policy
// asks for it, with a cap on concurrent HTTP/2 streams per connection. The
// certificate is re-read when its files change (tlscert.Loader).
func (a *app) configureTLS(ts *http.Server) (bool, error) {
	s := a.cfg().Server
	if s.TLS == nil {
		return false, nil
	}
	l, err := tlscert.New(tlscert.Settings{CertFile: s.TLS.CertFile, KeyFile: s.TLS.KeyFile, Logger: a.log})
	if err != nil {
		return false, fmt.Errorf("gatekeeper: server.tls: %w", err)
	}
	ts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: l.GetCertificate}
	ts.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: s.MaxConcurrentStreams}
	return true, nil
}
