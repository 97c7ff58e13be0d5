package podconn

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// trackedBody is a request body that records how much was read of it and
// whether it was closed.
type trackedBody struct {
	r      io.Reader
	read   int
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

// TestSendsBodyFirst: a request the transport carries itself has had its
// body read whole and closed once RoundTrip has returned, even when the pod
// answers without reading it, so SendsBodyFirst says so; a request it hands
// to Fallback is not one it can say that of.
func TestSendsBodyFirst(t *testing.T) {
	pod := newCountedPod(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "early") // before reading the body
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	text := strings.Repeat("x", 64<<10)
	body := &trackedBody{r: strings.NewReader(text)}
	req, err := http.NewRequest(http.MethodPost, pod.URL+"/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(text))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if !tr.SendsBodyFirst(req) || body.read != len(text) || !body.closed {
		t.Errorf("SendsBodyFirst %v; once RoundTrip returned, %d of %d bytes read, closed %v",
			tr.SendsBodyFirst(req), body.read, len(text), body.closed)
	}
	for _, tt := range []struct {
		name, url string
		header    http.Header
	}{
		{name: "https", url: "https://pod/v1/completions"},
		{name: "an upgrade", url: "http://pod/v1/completions", header: http.Header{"Upgrade": {"websocket"}}},
		{name: "Expect", url: "http://pod/v1/completions", header: http.Header{"Expect": {"100-continue"}}},
	} {
		req, _ := http.NewRequest(http.MethodPost, tt.url, strings.NewReader("{}"))
		for k, v := range tt.header {
			req.Header[k] = v
		}
		if tr.SendsBodyFirst(req) {
			t.Errorf("%s: SendsBodyFirst true for a request Fallback carries", tt.name)
		}
	}
}
