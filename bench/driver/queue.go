package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// queueResult is the memory a waiting request costs gatekeeper.
type queueResult struct {
	waiters     int
	reached     int
	rssKB       [2]int64   // before, with every waiter queued
	heap, stack [2]float64 // Go heap in use, goroutine stacks in use; bytes
	goroutines  [2]float64
	// afterGC: RSS (kB), heap and stacks in use with the waiters still
	// queued, after the heap profile's forced GC; zero without a profile.
	afterGC        [3]float64
	drained        bool
	waitedToFill   time.Duration
	clientFailures int
}

// queueMemory parks one request on a one-slot upstream window (the
// upstream holds model "hold"), then opens n more requests, one connection
// each, which all wait in gatekeeper's queue; it reads RSS and the Go heap
// before and once the queue holds them, then lets the clients go. With
// profDir set it saves gatekeeper's heap and goroutine profiles there while
// the waiters are queued (queue-heap.pprof, queue-goroutine.pprof).
func queueMemory(url, adminURL string, pid, n int, profDir string) (*queueResult, error) {
	res := &queueResult{waiters: n}
	tr := &http.Transport{MaxIdleConnsPerHost: n + 1, MaxConnsPerHost: 0, DisableCompression: true}
	client := &http.Client{Transport: tr}
	admin := &http.Client{Timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	send := func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions",
			bytes.NewReader([]byte(`{"model":"hold","prompt":"wait","max_tokens":16}`)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		} else if ctx.Err() == nil {
			mu.Lock()
			res.clientFailures++
			mu.Unlock()
		}
	}
	wg.Go(send) // takes the only slot
	if _, err := waitQueue(admin, adminURL, func(s adminState) bool { return s.inflight() == 1 }, 10*time.Second); err != nil {
		return nil, err
	}
	res.rssKB[0], _ = procKB(pid, "VmRSS")
	res.heap[0], _ = goMem(admin, adminURL+"/metrics", "go_memstats_heap_inuse_bytes")
	res.stack[0], _ = goMem(admin, adminURL+"/metrics", "go_memstats_stack_inuse_bytes")
	res.goroutines[0], _ = goMem(admin, adminURL+"/metrics", "go_goroutines")
	start := time.Now()
	for i := range n {
		wg.Go(send)
		if i%500 == 499 {
			time.Sleep(20 * time.Millisecond) // let the listener's backlog drain
		}
	}
	st, err := waitQueue(admin, adminURL, func(s adminState) bool { return s.Queue.Length >= n }, 60*time.Second)
	res.waitedToFill = time.Since(start)
	res.reached = st.Queue.Length
	res.rssKB[1], _ = procKB(pid, "VmRSS")
	res.heap[1], _ = goMem(admin, adminURL+"/metrics", "go_memstats_heap_inuse_bytes")
	res.stack[1], _ = goMem(admin, adminURL+"/metrics", "go_memstats_stack_inuse_bytes")
	res.goroutines[1], _ = goMem(admin, adminURL+"/metrics", "go_goroutines")
	if profDir != "" {
		for _, p := range []string{"heap?gc=1", "goroutine"} { // gc=1: the heap profile of live objects
			name := "queue-" + strings.TrimSuffix(p, "?gc=1") + ".pprof"
			if err := fetch(adminURL+"/debug/pprof/"+p, filepath.Join(profDir, name)); err != nil {
				log.Printf("queue profile: %v", err)
			}
		}
		rss, _ := procKB(pid, "VmRSS")
		res.afterGC[0] = float64(rss)
		res.afterGC[1], _ = goMem(admin, adminURL+"/metrics", "go_memstats_heap_inuse_bytes")
		res.afterGC[2], _ = goMem(admin, adminURL+"/metrics", "go_memstats_stack_inuse_bytes")
	}
	cancel()
	wg.Wait()
	st, _ = waitQueue(admin, adminURL, func(s adminState) bool { return s.Queue.Length == 0 }, 20*time.Second)
	res.drained = st.Queue.Length == 0
	if err != nil {
		return res, fmt.Errorf("driver: queue reached %d of %d waiters: %w", res.reached, n, err)
	}
	return res, nil
}

// check returns err, or an error when the scenario did not run as planned:
// a waiter never queued, a client failed, or the queue kept waiters after
// the clients left. err is queueMemory's; q is its result, not nil when
// err is nil.
func (q *queueResult) check(err error) error {
	switch {
	case err != nil:
		return err
	case q.reached < q.waiters:
		return fmt.Errorf("driver: queue: %d of %d waiters queued", q.reached, q.waiters)
	case q.clientFailures > 0:
		return fmt.Errorf("driver: queue: %d clients failed", q.clientFailures)
	case !q.drained:
		return fmt.Errorf("driver: queue: waiters left in the queue after the clients went")
	}
	return nil
}

type adminState struct {
	Queue     struct{ Length int } `json:"queue"`
	Upstreams []struct {
		InFlight int `json:"inflight"`
	} `json:"upstreams"`
}

func (s adminState) inflight() int {
	n := 0
	for _, u := range s.Upstreams {
		n += u.InFlight
	}
	return n
}

func waitQueue(c *http.Client, adminURL string, done func(adminState) bool, limit time.Duration) (adminState, error) {
	end := time.Now().Add(limit)
	var st adminState
	for {
		resp, err := c.Get(adminURL + "/admin/state")
		if err == nil {
			st = adminState{}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && done(st) {
			return st, nil
		}
		if time.Now().After(end) {
			return st, fmt.Errorf("driver: admin state not reached within %v (last error %v)", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
