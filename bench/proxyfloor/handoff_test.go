package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/proxy/podconn"
)

// TestHandoffRelaysStreamsWhole checks the handoff core as the stream bench
// drives it: a JSON answer keeps its connection, and a token stream is
// relayed whole in chunks of the core's own framing, ended, and its
// connection closed as the answer announced.
func TestHandoffRelaysStreamsWhole(t *testing.T) {
	u := testPod(t, "text/event-stream; charset=utf-8")
	gw := httptest.NewServer(newHandoff(u, &podconn.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}))
	defer gw.Close()
	c, err := net.Dial("tcp", gw.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; never reached when it works
	br := bufio.NewReader(c)
	for i := range 2 {
		body := fmt.Sprintf("prompt %d", i)
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		if want := fmt.Sprintf(`{"echo":%q}`, body); res.StatusCode != 200 || string(got) != want || res.Close {
			t.Fatalf("request %d: %d %q close=%v, want 200 %q on a kept connection", i, res.StatusCode, got, res.Close, want)
		}
	}
	fmt.Fprint(c, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body) // fails if the chunked body is not ended
	if want := "data: 0\n\ndata: 1\n\ndata: 2\n\n"; err != nil || len(res.TransferEncoding) != 1 || string(got) != want {
		t.Fatalf("stream: %v %q %v, want chunked %q", res.TransferEncoding, got, err, want)
	}
	if !res.Close {
		t.Fatal("stream: the answer does not say Connection: close")
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the stream: %q, %v; want the connection closed", rest, err)
	}
}
