package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// TestLeanCoresRelay checks the forwarder of lean.go behind each server
// the cores bench runs it with, as TestH1RelaysOnOneConnection checks h1.
func TestLeanCoresRelay(t *testing.T) {
	u := testPod(t, "text/event-stream")
	for _, core := range []string{"lean", "leanwatch", "netlean", "rplean"} {
		t.Run(core, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			switch core {
			case "lean", "leanwatch":
				go func() { _ = leanServe(ln, u.Host, core == "leanwatch") }()
			case "netlean":
				srv := netLeanServer("", u.Host)
				go func() { _ = srv.Serve(ln) }()
				defer srv.Close()
			case "rplean":
				srv := &http.Server{Handler: reverse(u, leanTransport{&leanPods{addr: u.Host}})}
				go func() { _ = srv.Serve(ln) }()
				defer srv.Close()
			}
			checkRelays(t, ln.Addr().String())
		})
	}
}

// TestLeanCoreDecidesAndFinishes checks the leancore core: requests the
// decision core admits are relayed, one after another on one connection
// through a window of one slot (so each must have been finished and its
// slot released), and those it refuses get its status on the same
// connection.
func TestLeanCoreDecidesAndFinishes(t *testing.T) {
	u := testPod(t, "text/event-stream")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = leanCoreServe(ln, u.Host, config.Default(), 1) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; never reached when it works
	br := bufio.NewReader(c)
	for i, tt := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/completions", `{"model":"m","prompt":"p0","max_tokens":4}`, 200},
		{"POST", "/v1/completions", `{"model":"m","prompt":"p1","max_tokens":4}`, 200},
		{"GET", "/nope", "", 404},
		{"POST", "/v1/completions", `{"model":`, 400},
		{"GET", "/v1/models", "", 200}, // forwarded to the pod (its models are not known here): its echo
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200},
	} {
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			tt.method, tt.path, len(tt.body), tt.body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, _ := io.ReadAll(res.Body)
		if res.StatusCode != tt.status {
			t.Fatalf("request %d (%s %s): %d %q, want %d", i, tt.method, tt.path, res.StatusCode, got, tt.status)
		}
		if want := fmt.Sprintf(`{"echo":%q}`, tt.body); tt.status == 200 && string(got) != want {
			t.Fatalf("request %d: %q, want %q", i, got, want)
		}
	}
}
