package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// ttfb measures time to first byte of a stream's first SSE event (from
// sending the request to reading its first "data:" line), open loop at rate
// req/s for dur, adding to s.
func ttfb(ctx context.Context, client *http.Client, url string, rate int, dur time.Duration, s *sample) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(dur)
	start := time.Now()
	for now := range tick.C {
		if now.After(end) {
			break
		}
		wg.Go(func() {
			d, code := firstEvent(ctx, client, url)
			mu.Lock()
			defer mu.Unlock()
			s.sent++
			s.codes[code]++
			if code == http.StatusOK && d > 0 {
				s.lat = append(s.lat, d)
			}
		})
	}
	wg.Wait()
	s.dur += time.Since(start)
}

func firstEvent(ctx context.Context, client *http.Client, url string) (time.Duration, int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body(true)))
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var d time.Duration
	for {
		line, err := br.ReadSlice('\n')
		if d == 0 && bytes.HasPrefix(line, []byte("data:")) {
			d = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	_, _ = io.Copy(io.Discard, br)
	return d, resp.StatusCode
}
