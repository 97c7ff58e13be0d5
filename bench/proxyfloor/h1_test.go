package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
)

// TestH1RelaysOnOneConnection checks the h1 core as the cores bench drives
// it: keep-alive requests on one connection, a response with a
// Content-Length and a chunked stream relayed whole, each in order.
func TestH1RelaysOnOneConnection(t *testing.T) {
	u := testPod(t, "text/event-stream")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h1Conn(c, reverse(u, &podconn.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}))
		}
	}()
	checkRelays(t, ln.Addr().String())
}

// checkRelays drives a core on addr as the cores bench does: keep-alive
// requests on one connection, a response with a Content-Length and a
// chunked stream relayed whole, each in order, then Connection: close.
func checkRelays(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; never reached when it works
	br := bufio.NewReader(c)
	for i := range 3 {
		body := fmt.Sprintf("prompt %d", i)
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		if want := fmt.Sprintf(`{"echo":%q}`, body); res.StatusCode != 200 || string(got) != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, res.StatusCode, got, want)
		}
	}
	fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	if want := "data: 0\n\ndata: 1\n\ndata: 2\n\n"; len(res.TransferEncoding) != 1 || string(got) != want {
		t.Fatalf("stream: %v %q, want chunked %q", res.TransferEncoding, got, want)
	}
	fmt.Fprint(c, "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if res, err = http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after Connection: close: %q, %v; want the connection closed", rest, err)
	}
}

// testPod is a pod for the cores' tests: /stream answers three SSE events,
// each flushed, with the given Content-Type; anything else echoes the
// request's body as JSON with a Content-Length.
func testPod(t *testing.T, streamType string) *url.URL {
	t.Helper()
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", streamType)
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo":%q}`, b)
	}))
	t.Cleanup(pod.Close)
	u, _ := url.Parse(pod.URL)
	return u
}
