package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAdminToken(t *testing.T) {
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	podURL := newPodServer(t, pod)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nserver: {drain_delay: 0s, admin_token_file: '"+tokenFile+"'}\nscaling: {}\n", nil)
	for _, tt := range []struct {
		auth string
		want int
	}{
		{"", 401},
		{"Bearer wrong", 401},
		{"Basic czNjcmV0", 401},
		{"Bearer s3cret", 200},
	} {
		for _, path := range []string{"/metrics", "/admin/state", "/admin/scale"} {
			req, _ := http.NewRequest(http.MethodGet, r.admin+path, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Errorf("GET %s with %q = %d, want %d", path, tt.auth, res.StatusCode, tt.want)
			}
		}
	}
	// The traffic port's health endpoints never need the token.
	if code := status(t, http.MethodGet, r.traffic+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 with serial n.
func writeCert(t *testing.T, certFile, keyFile string, n int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "gatekeeper-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func TestTLSWithHTTP2(t *testing.T) {
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{}`)
	})
	podURL := newPodServer(t, pod)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeCert(t, certFile, keyFile, 1)
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+podURL+"'}]\nserver: {drain_delay: 0s, max_concurrent_streams: 16, tls: {cert_file: '"+
		certFile+"', key_file: '"+keyFile+"'}}\n", nil)
	url := strings.Replace(r.traffic, "http://", "https://", 1)

	call := func(trust *x509.Certificate) (*http.Response, error) {
		pool := x509.NewCertPool()
		pool.AddCert(trust)
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr}).Post(url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"x"}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	res, err := call(first)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Proto != "HTTP/2.0" {
		t.Errorf("TLS request = %d over %s, want 200 over HTTP/2.0", res.StatusCode, res.Proto)
	}
}

// TestAmbiguousFramingRefusedOnTheListener checks the wiring: on the
// traffic listener, a clean request is served and the ambiguous one after it
// on the same connection (Content-Length with Transfer-Encoding) is refused
// with 400 and the connection closed, and the pod sees only the clean one.
func TestAmbiguousFramingRefusedOnTheListener(t *testing.T) {
	hits := make(chan string, 4)
	pod := http.NewServeMux()
	pod.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	pod.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hits <- string(b)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	})
	r := startLifecycle(t, "upstreams: [{name: p, url: '"+newPodServer(t, pod)+"'}]\nserver: {drain_delay: 0s}\n", nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(r.traffic, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	body := `{"model":"m","prompt":"x"}` // no trailing newline: the next request line follows it directly
	for i, raw := range []string{
		"POST /v1/completions HTTP/1.1\r\nHost: gk\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body,
		"POST /v1/completions HTTP/1.1\r\nHost: gk\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" +
			strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n",
	} {
		_, _ = io.WriteString(c, raw)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if want := []int{200, 400}[i]; res.StatusCode != want || res.Close != (want == 400) {
			t.Errorf("request %d = %d (close %v), want %d (close %v)", i+1, res.StatusCode, res.Close, want, want == 400)
		}
	}
	if len(hits) != 1 || <-hits != body {
		t.Error("the pod did not see exactly the clean request")
	}
}
