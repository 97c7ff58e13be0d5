package main

import (
	"net"
	"net/http"
	"testing"
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
