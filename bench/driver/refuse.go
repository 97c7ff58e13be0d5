package main

import (
	"net/http"
	"sync"
	"time"
)

// refusal is the refusal-path result.
type refusal struct {
	perClientQPS, floodRate, goodRate int
	baseline, admitted                *sample // the good client alone, then during the flood
	flood, sat                        *sample // 429s at the fixed flood rate, then at saturation
	peakRSSKB                         int64
}

// refuse floods a gatekeeper whose per-client limit is perClientQPS (keyed
// by X-Bench-Client) at 20× that rate from one client while another client
// sends goodRate req/s, then floods it with closed-loop workers to find the
// most refusals per second.
func refuse(url string, pid, perClientQPS, goodRate int, dur time.Duration, satWorkers uint64) *refusal {
	res := &refusal{perClientQPS: perClientQPS, floodRate: 20 * perClientQPS, goodRate: goodRate,
		baseline: newSample(), admitted: newSample(), flood: newSample(), sat: newSample()}
	good := newAttacker("good", url, 1)
	bad := newAttacker("flood", url, satWorkers)
	goodT := targeter(url, body(false), http.Header{"X-Bench-Client": {"good"}})
	badT := targeter(url, body(false), http.Header{"X-Bench-Client": {"flood"}})
	good.run(goodT, goodRate, time.Second, nil) // warm-up
	good.run(goodT, goodRate, dur, res.baseline)
	var wg sync.WaitGroup
	wg.Go(func() { good.run(goodT, goodRate, dur, res.admitted) })
	bad.runCode(badT, res.floodRate, dur, http.StatusTooManyRequests, res.flood)
	wg.Wait()
	bad.runCode(badT, 0, dur, http.StatusTooManyRequests, res.sat)
	res.peakRSSKB, _ = procKB(pid, "VmHWM")
	return res
}
