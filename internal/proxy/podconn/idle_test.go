package podconn

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleTimeout: each idle connection closes IdleConnTimeout after it
// went idle, the newest idle connection is the one reused (last in, first
// out), and a reuse starts its idle time again.
func TestIdleTimeout(t *testing.T) {
	bubble(t, func(t *testing.T, _ func() int) {
		start := time.Now()
		var mu sync.Mutex
		closed := map[int]time.Duration{} // connection → when its pod saw it close
		dials := 0
		tr := &Transport{IdleConnTimeout: 4 * time.Second, MaxIdleConnsPerHost: 4}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials++
			i := dials
			return pipePod(func(c net.Conn) {
				serveOK(t, c)
				mu.Lock()
				closed[i] = time.Since(start)
				mu.Unlock()
			})(ctx, network, addr)
		}
		send := func() *http.Response {
			req, _ := http.NewRequest("GET", "http://pod:8000/", nil)
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		drain := func(res *http.Response) {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		check := func(when string, idle int, want map[int]time.Duration) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if got := tr.pool.idle("pod:8000"); got != idle || len(closed) != len(want) {
				t.Fatalf("%s: idle %d, closed %v; want %d, %v", when, got, closed, idle, want)
			}
			for i, at := range want {
				if closed[i] != at {
					t.Errorf("%s: connection %d closed at %v, want %v", when, i, closed[i], at)
				}
			}
		}
		a, b := send(), send() // two connections, both in use
		drain(a)               // 1 idle since 0s
		time.Sleep(2 * time.Second)
		drain(b) // 2 idle since 2s
		time.Sleep(time.Second)
		drain(send()) // 3s: takes 2, the newest; idle again since 3s
		check("3s", 2, map[int]time.Duration{})
		time.Sleep(time.Second)
		check("4s", 1, map[int]time.Duration{1: 4 * time.Second})
		time.Sleep(3 * time.Second)
		check("7s", 0, map[int]time.Duration{1: 4 * time.Second, 2: 7 * time.Second})
		if dials != 2 {
			t.Errorf("dials = %d, want 2", dials)
		}
	})
}
