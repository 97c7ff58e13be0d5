package main

import (
	"context"
	"log"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// holdScenario is what -epp streams reports, as JSON.
type holdScenario struct {
	Date      string       `json:"date"`
	Streams   int          `json:"streams"`
	RampS     float64      `json:"ramp_s"`
	Conns     int          `json:"conns"`
	BodyBytes int          `json:"body_bytes"`
	Targets   []holdResult `json:"targets"`
}

// holdResult is one target holding the streams. Memory is the picker
// process's; heap, stacks and goroutines from its /metrics.
type holdResult struct {
	Name    string         `json:"name"`
	Held    int            `json:"held"` // streams that got their pick and echo
	Lost    int            `json:"lost"` // errored anywhere, or never got a pick
	LostWhy map[string]int `json:"lost_why,omitempty"`
	Example string         `json:"lost_example,omitempty"`
	Ended   int            `json:"ended"` // got the response's answer and the stream's end
	OpenS   float64        `json:"open_s"`
	// PickP50US and PickP99US are the decision latency (body sent to
	// pick) of the streams while they opened, the held ones piling up.
	PickP50US float64    `json:"pick_p50_us"`
	PickP99US float64    `json:"pick_p99_us"`
	EndS      float64    `json:"end_s"`
	Inflight  int        `json:"inflight"` // the picker's own count with every stream held
	After     int        `json:"inflight_after"`
	AfterOK   bool       `json:"inflight_after_ok"` // in flight back to 0
	RSSKB     [2]int64   `json:"rss_kb"`            // before, held
	Heap      [2]float64 `json:"heap"`              // bytes in use
	Stack     [2]float64 `json:"stack"`
	Gor       [2]float64 `json:"goroutines"`
}

// kibPerStream is the RSS the held streams added, per stream.
func (r *holdResult) kibPerStream() float64 {
	if r.Held == 0 || r.RSSKB[1] <= 0 {
		return -1
	}
	return float64(r.RSSKB[1]-r.RSSKB[0]) / float64(r.Held)
}

// runHold has each target hold o.streams streams, one target after the other.
func runHold(ctx context.Context, o eppOptions) (*holdScenario, error) {
	sc := &holdScenario{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Streams: o.streams,
		RampS: o.ramp.Seconds(), Conns: o.conns, BodyBytes: o.bodyBytes}
	envoys, err := dialTargets(ctx, o)
	if err != nil {
		return nil, err
	}
	for i, t := range o.targets {
		sc.Targets = append(sc.Targets, holdStreams(ctx, envoys[i], t, o.streams, o.ramp))
		envoys[i].close()
		log.Printf("epp streams: %s done", t.name)
	}
	return sc, nil
}

// holdStreams opens n streams over ramp, each taking its pick and then
// holding it (no response yet); once every one holds (or failed) it reads
// the picker's in-flight count and memory, then ends them all and waits for
// the in-flight count to return to 0.
func holdStreams(ctx context.Context, e *envoy, t eppTarget, n int, ramp time.Duration) holdResult {
	res := holdResult{Name: t.name, LostWhy: map[string]int{}}
	admin := &http.Client{Timeout: 5 * time.Second}
	mem := func(i int) {
		res.RSSKB[i], _ = procKB(t.pid, "VmRSS")
		res.Heap[i], _ = goMem(admin, t.admin+"/metrics", "go_memstats_heap_inuse_bytes")
		res.Stack[i], _ = goMem(admin, t.admin+"/metrics", "go_memstats_stack_inuse_bytes")
		res.Gor[i], _ = goMem(admin, t.admin+"/metrics", "go_goroutines")
	}
	mem(0)
	var (
		mu       sync.Mutex // guards res.LostWhy and res.Example
		held     atomic.Int64
		ended    atomic.Int64
		lastPick atomic.Int64 // unix ns
		picks    sync.WaitGroup
		wg       sync.WaitGroup
	)
	release := make(chan struct{})
	lat := make([]time.Duration, n) // slot i is written by stream i alone; 0: no pick
	lose := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		res.LostWhy[whyOf(err)]++
		if res.Example == "" {
			res.Example = err.Error()
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	step := ramp / time.Duration(max(n, 1))
	picks.Add(n)
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * step)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			xctx, xcancel := context.WithCancel(sctx)
			defer xcancel()
			s, l, err := e.request(xctx)
			if err == nil {
				err = e.readEcho(s)
			}
			if err != nil {
				picks.Done()
				lose(err)
				return
			}
			lat[i] = l
			held.Add(1)
			lastPick.Store(time.Now().UnixNano())
			picks.Done()
			<-release
			if err := e.finish(s); err != nil {
				lose(err)
				return
			}
			ended.Add(1)
		})
	}
	picks.Wait()
	res.Held = int(held.Load())
	lat = slices.DeleteFunc(lat, func(d time.Duration) bool { return d == 0 })
	slices.Sort(lat)
	res.PickP50US, res.PickP99US = float64(traffic.Quantile(lat, 0.5))/1e3, float64(traffic.Quantile(lat, 0.99))/1e3
	if lp := lastPick.Load(); lp > 0 {
		res.OpenS = time.Unix(0, lp).Sub(start).Seconds()
	}
	st, err := waitQueue(admin, t.admin, func(s adminState) bool { return s.inflight() == res.Held }, 20*time.Second)
	if err != nil {
		log.Printf("epp streams: %s: in flight %d, %d held: %v", t.name, st.inflight(), res.Held, err)
	}
	res.Inflight = st.inflight()
	mem(1)
	endStart := time.Now()
	close(release)
	wg.Wait()
	res.EndS = time.Since(endStart).Seconds()
	res.Ended = int(ended.Load())
	st, err = waitQueue(admin, t.admin, func(s adminState) bool { return s.inflight() == 0 }, 20*time.Second)
	res.After, res.AfterOK = st.inflight(), err == nil
	for _, v := range res.LostWhy {
		res.Lost += v
	}
	if res.Lost == 0 {
		res.LostWhy = nil
	}
	return res
}
