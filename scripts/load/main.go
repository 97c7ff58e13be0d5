// Command load is the driver of scripts/load/burst.sh: a fake vLLM pod with a
// fixed service time, and an open- or closed-loop load generator that checks
// every answer and reports one JSON line.
//
//	load pod  -listen 127.0.0.1:18100 -service 100ms
//	load run  -url http://127.0.0.1:18080 -admin http://127.0.0.1:18081 \
//	          -rate 1600 -duration 60s -stream 0.3 -pid 1234
//	load run  -url ... -concurrency 16 -duration 10s   # closed loop: calibration
//
// run's checks: every request gets a status line, and a 200 stream its
// terminal "data: [DONE]" event; every 429 and 503 carries Retry-After and
// X-Gatekeeper-Reason; the gatekeeper_requests_total counters on -admin grow
// by exactly the number sent. It exits 1 when a check fails.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: load pod|run [flags]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "pod":
		err = pod(ctx, os.Args[2:])
	case "run":
		err = run(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("load: unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// pod serves completions after -service, as JSON or an SSE stream of four
// events and [DONE].
func pod(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pod", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18100", "address")
	service := fs.Duration("service", 100*time.Millisecond, "time each request takes")
	_ = fs.Parse(args)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /v1/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		t := time.NewTimer(*service)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"text_completion","choices":[{"index":0,"text":" ok","finish_reason":"length"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range 4 {
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"text":" tok"}]}`+"\n\n")
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// report is run's one JSON line.
type report struct {
	Mode           string         `json:"mode"`
	Sent           int64          `json:"sent"`
	Seconds        float64        `json:"seconds"`
	Statuses       map[string]int `json:"statuses"`
	AdmittedPerSec float64        `json:"admitted_per_s"`
	P50ms          float64        `json:"served_p50_ms"`
	P99ms          float64        `json:"served_p99_ms"`
	RefusalP99ms   float64        `json:"refused_p99_ms"`
	Outcomes       map[string]int `json:"outcomes_delta,omitempty"`
	MaxRSSMiB      float64        `json:"max_rss_mib,omitempty"`
	Problems       []string       `json:"problems"`
	ProblemCount   int            `json:"problem_count"`
}

type tally struct {
	mu       sync.Mutex
	statuses map[string]int
	served   []time.Duration
	refused  []time.Duration
	problems []string
	nProb    int
}

func (t *tally) add(status int, d time.Duration, problem string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.statuses[strconv.Itoa(status)]++
	switch {
	case status == 200:
		t.served = append(t.served, d)
	case status == 429 || status == 503:
		t.refused = append(t.refused, d)
	}
	if problem != "" {
		t.nProb++
		if len(t.problems) < 20 {
			t.problems = append(t.problems, problem)
		}
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	target := fs.String("url", "http://127.0.0.1:18080", "gatekeeper traffic URL")
	admin := fs.String("admin", "", "gatekeeper admin URL; when set, the outcome counters are checked")
	rate := fs.Float64("rate", 0, "open loop: requests per second (0: closed loop)")
	conc := fs.Int("concurrency", 16, "closed loop: workers; open loop: unused")
	dur := fs.Duration("duration", 10*time.Second, "how long to send")
	streamShare := fs.Float64("stream", 0.3, "share of streaming requests")
	pid := fs.Int("pid", 0, "process whose VmRSS is sampled each second")
	_ = fs.Parse(args)

	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}}
	before, err := outcomes(*admin)
	if err != nil {
		return err
	}
	t := &tally{statuses: map[string]int{}}
	var sent atomic.Int64
	one := func() {
		n := sent.Add(1)
		stream := float64(n%100) < *streamShare*100
		// A struct of strings, ints and bools: Marshal cannot fail.
		body, _ := json.Marshal(traffic.CompletionRequest{Model: "m", Prompt: fmt.Sprintf("request %d", n), MaxTokens: 16, Stream: stream})
		start := time.Now()
		status, problem := send(client, *target, body, stream)
		t.add(status, time.Since(start), problem)
	}

	var rssMax atomic.Int64
	rssCtx, rssStop := context.WithCancel(ctx)
	var rssWG sync.WaitGroup
	if *pid > 0 {
		rssWG.Go(func() { sampleRSS(rssCtx, *pid, &rssMax) })
	}
	sendCtx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	mode := "closed"
	if *rate > 0 {
		mode = "open"
		// Every 5 ms, start whatever the schedule says is due, so the rate
		// holds even when one tick per request would be too fine for the timer.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		started := int64(0)
	loop:
		for {
			select {
			case <-sendCtx.Done():
				break loop
			case now := <-tick.C:
				due := int64(now.Sub(began).Seconds() * *rate)
				for ; started < due; started++ {
					wg.Go(one)
				}
			}
		}
	} else {
		for range *conc {
			wg.Go(func() {
				for sendCtx.Err() == nil {
					one()
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(began)
	rssStop()
	rssWG.Wait()

	r := report{Mode: mode, Sent: sent.Load(), Seconds: elapsed.Seconds(), Statuses: t.statuses,
		AdmittedPerSec: float64(len(t.served)) / elapsed.Seconds(),
		P50ms:          pct(t.served, 0.50), P99ms: pct(t.served, 0.99), RefusalP99ms: pct(t.refused, 0.99),
		MaxRSSMiB: float64(rssMax.Load()) / 1024, Problems: t.problems, ProblemCount: t.nProb}
	if *admin != "" {
		client.CloseIdleConnections()
		after, err := outcomes(*admin)
		if err != nil {
			return err
		}
		r.Outcomes = map[string]int{}
		total := 0
		for k, v := range after {
			r.Outcomes[k] = v - before[k]
			total += v - before[k]
		}
		if int64(total) != r.Sent {
			r.ProblemCount++
			r.Problems = append(r.Problems, fmt.Sprintf("outcome counters grew by %d, sent %d", total, r.Sent))
		}
	}
	if r.Problems == nil {
		r.Problems = []string{}
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	if r.ProblemCount > 0 {
		os.Exit(1)
	}
	return nil
}

// send posts one completion and checks its answer.
func send(c *http.Client, target string, body []byte, stream bool) (int, string) {
	res, err := c.Post(target+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "no status line: " + err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	switch {
	case err != nil:
		return res.StatusCode, fmt.Sprintf("%d: body cut: %v", res.StatusCode, err)
	case res.StatusCode == 429 || res.StatusCode == 503:
		if res.Header.Get("Retry-After") == "" || res.Header.Get("X-Gatekeeper-Reason") == "" {
			return res.StatusCode, fmt.Sprintf("%d without Retry-After or reason", res.StatusCode)
		}
	case res.StatusCode != 200:
		return res.StatusCode, fmt.Sprintf("unexpected %d: %.200s", res.StatusCode, b)
	case stream && !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")):
		return res.StatusCode, fmt.Sprintf("stream without its terminal event: %.200q", b)
	}
	return res.StatusCode, ""
}

// outcomes reads gatekeeper_requests_total by outcome ("" admin: none).
func outcomes(admin string) (map[string]int, error) {
	out := map[string]int{}
	if admin == "" {
		return out, nil
	}
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("load: scraping %s: %w", admin, err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `gatekeeper_requests_total{outcome="`)
		if !ok {
			continue
		}
		name, val, _ := strings.Cut(rest, `"} `)
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("load: metrics line %q: %w", sc.Text(), err)
		}
		out[name] = int(f)
	}
	return out, sc.Err()
}

// sampleRSS records the largest VmRSS (KiB) of pid until ctx ends.
func sampleRSS(ctx context.Context, pid int, maxKiB *atomic.Int64) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kib, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
					if kib > maxKiB.Load() {
						maxKiB.Store(kib)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pct is the p-quantile of ds in milliseconds (ds is sorted in place).
func pct(ds []time.Duration, p float64) float64 {
	return float64(traffic.Quantile(ds, p).Microseconds()) / 1000
}
