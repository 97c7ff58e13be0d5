package tlscert_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/tlscert"
)

func ExampleLoader() {
	dir, err := os.MkdirTemp("", "tlscert")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := writeCert(certFile, keyFile, 7); err != nil {
		panic(err)
	}
	l, err := tlscert.New(tlscert.Settings{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		panic(err)
	}
	// The server asks at every handshake, so a rotated pair is picked up
	// without a restart.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: l.GetCertificate}
	c, _ := cfg.GetCertificate(&tls.ClientHelloInfo{})
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	fmt.Println("serving serial", leaf.SerialNumber)
	// Output: serving serial 7
}
