package tlscert_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/tlscert"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with serial n.
func writeCert(certFile, keyFile string, n int64) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "gatekeeper-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// pair writes certificate n into a fresh directory and returns its files.
func pair(t *testing.T, n int64) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := writeCert(certFile, keyFile, n); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// serial returns the serial of the certificate l serves now.
func serial(t *testing.T, l *tlscert.Loader) int64 {
	t.Helper()
	c, err := l.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	certFile, keyFile := pair(t, 1)
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    tlscert.Settings
		want string
	}{
		{"no cert file", tlscert.Settings{KeyFile: keyFile}, "tlscert: Settings.CertFile is empty"},
		{"no key file", tlscert.Settings{CertFile: certFile}, "tlscert: Settings.KeyFile is empty"},
		{"missing file", tlscert.Settings{CertFile: certFile, KeyFile: keyFile + ".missing"}, "no such file"},
		{"not a certificate", tlscert.Settings{CertFile: garbage, KeyFile: keyFile}, "tls: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if l, err := tlscert.New(tt.s); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) = %v, %v; want an error containing %q", tt.s, l, err, tt.want)
			}
		})
	}
}

func TestLoaderRotation(t *testing.T) {
	t.Parallel()
	certFile, keyFile := pair(t, 1)
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	l, err := tlscert.New(tlscert.Settings{CertFile: certFile, KeyFile: keyFile,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCert(certFile, keyFile, 2); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, l); got != 1 {
		t.Errorf("within a second of the last check: serial %d, want 1", got)
	}
	now = now.Add(2 * time.Second)
	if got := serial(t, l); got != 2 {
		t.Errorf("after rotation: serial %d, want 2", got)
	}
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if got := serial(t, l); got != 2 {
		t.Errorf("after a broken rotation: serial %d, want the previous 2", got)
	}
	out := logs.String()
	if !strings.Contains(out, `level=INFO msg="tls certificate reloaded"`) ||
		!strings.Contains(out, `level=WARN msg="tls certificate reload failed; keeping the previous one"`) {
		t.Errorf("logs = %s, want one reloaded and one failed line", out)
	}
}

// TestLoaderConcurrent hammers GetCertificate while the files rotate: every
// handshake gets one of the pairs written, never nil.
func TestLoaderConcurrent(t *testing.T) {
	t.Parallel()
	certFile, keyFile := pair(t, 1)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(100 * time.Millisecond) // a look at the files every tenth call
		return now
	}
	l, err := tlscert.New(tlscert.Settings{CertFile: certFile, KeyFile: keyFile, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if c, err := l.GetCertificate(nil); c == nil || err != nil {
					t.Errorf("GetCertificate() = %v, %v; want a certificate", c, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for n := range int64(5) {
			if err := writeCert(certFile, keyFile, n+2); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
}
