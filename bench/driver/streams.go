package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// streamShape is an open-stream scenario: how many SSE streams are open at
// once and what each one carries (the upstream paces them, paced.go).
type streamShape struct {
	Streams     int     `json:"streams"`
	Chunks      int     `json:"chunks"`      // content chunks per stream
	IntervalMS  float64 `json:"interval_ms"` // between two chunks
	ChunkBytes  int     `json:"chunk_bytes"` // one content event
	PromptBytes int     `json:"prompt_bytes"`
	RampS       float64 `json:"ramp_s"` // the streams open evenly over this
}

// streamScenario is what one run of the driver's stream mode reports.
type streamScenario struct {
	streamShape
	Date    string         `json:"date"`
	FDLimit uint64         `json:"fd_limit"` // the driver's own open-file limit
	Notes   []string       `json:"notes,omitempty"`
	Targets []streamTarget `json:"targets"`
}

// streamTarget is one target's result. CPU and memory are the proxy's own
// (nginx: its workers summed); direct has none (-1).
type streamTarget struct {
	Name        string         `json:"name"`
	Opened      int            `json:"opened"`    // answered 200
	PeakOpen    int            `json:"peak_open"` // most open at once
	Lost        int            `json:"lost"`      // errored, not 200, or no [DONE] after every chunk
	LostWhy     map[string]int `json:"lost_why,omitempty"`
	LostExample string         `json:"lost_example,omitempty"`
	Chunks      int64          `json:"chunks"` // data events relayed, [DONE] aside
	GapP50MS    float64        `json:"gap_p50_ms"`
	GapP99MS    float64        `json:"gap_p99_ms"`
	GapP999MS   float64        `json:"gap_p999_ms"`
	GapMaxMS    float64        `json:"gap_max_ms"`
	CPUS        float64        `json:"cpu_s"`
	RSSBeforeKB int64          `json:"rss_before_kb"`
	RSSPeakKB   int64          `json:"rss_peak_kb"`
	Procs       int            `json:"procs"`    // processes measured
	FDLimit     int64          `json:"fd_limit"` // the proxy's soft open-file limit, -1 unknown
	WallS       float64        `json:"wall_s"`
}

// cpuPerMillion is the proxy's CPU seconds per million relayed chunks.
func (t *streamTarget) cpuPerMillion() float64 {
	if t.CPUS < 0 || t.Chunks == 0 {
		return -1
	}
	return t.CPUS / float64(t.Chunks) * 1e6
}

// kibPerStream is the RSS the open streams added, per stream.
func (t *streamTarget) kibPerStream() float64 {
	if t.RSSPeakKB < 0 || t.PeakOpen == 0 {
		return -1
	}
	return float64(t.RSSPeakKB-t.RSSBeforeKB) / float64(t.PeakOpen)
}

// streamSite is a target of the stream mode: a base URL and the process id
// of the proxy behind it (0: none, direct).
type streamSite struct {
	name, url string
	pid       int
}

// runStreams measures every site in turn (rotated by first) at shape sh and
// writes the scenario as JSON to w.
func runStreams(w io.Writer, sites []streamSite, first int, sh streamShape) error {
	sc := streamScenario{streamShape: sh, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		sc.FDLimit = lim.Cur
		if lim.Cur < uint64(sh.Streams+100) {
			sc.Notes = append(sc.Notes, fmt.Sprintf("the driver's open-file limit %d is below %d streams + 100: streams beyond it fail to open and count as lost", lim.Cur, sh.Streams))
		}
	}
	body, err := json.Marshal(traffic.Chat("m", traffic.Filler(sh.PromptBytes/traffic.CharsPerToken), sh.Chunks, true))
	if err != nil {
		return err
	}
	results := make([]streamTarget, len(sites))
	for i := range sites {
		k := (i + first) % len(sites)
		s := sites[k]
		results[k] = measureStreams(s, sh, body)
		if l := results[k].FDLimit; l >= 0 && l < int64(2*sh.Streams+100) {
			sc.Notes = append(sc.Notes, fmt.Sprintf("%s's open-file limit %d is below 2 × %d streams + 100", s.name, l, sh.Streams))
		}
		time.Sleep(time.Second) // let the closed connections settle
	}
	sc.Targets = results
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(sc)
}

// streamRun collects one site's streams as they end; safe for concurrent use.
type streamRun struct {
	open, peak atomic.Int64
	chunks     atomic.Int64
	mu         sync.Mutex // guards the fields below
	opened     int
	lostWhy    map[string]int
	example    string
	gaps       []time.Duration
}

func (r *streamRun) lose(why string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lostWhy[why]++
	if r.example == "" && err != nil {
		r.example = err.Error()
	}
}

// measureStreams opens sh.Streams streams to s over sh.RampS seconds, reads
// them to the end, and reads the proxy's CPU time and RSS around them.
func measureStreams(s streamSite, sh streamShape, body []byte) streamTarget {
	res := streamTarget{Name: s.name, CPUS: -1, RSSBeforeKB: -1, RSSPeakKB: -1, FDLimit: -1}
	url := fmt.Sprintf("%s/v1/chat/completions?chunks=%d&interval=%s&bytes=%d", s.url, sh.Chunks,
		time.Duration(sh.IntervalMS*float64(time.Millisecond)), sh.ChunkBytes)
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: sh.Streams, MaxIdleConns: sh.Streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	warm := fmt.Sprintf("%s/v1/chat/completions?chunks=2&interval=1ms&bytes=%d", s.url, sh.ChunkBytes)
	warmRun := &streamRun{lostWhy: map[string]int{}}
	for range 8 {
		readStream(client, warm, body, time.Minute, 2, warmRun)
	}
	var pids []int
	if s.pid > 0 {
		pids = servers(s.pid)
		res.Procs = len(pids)
		res.FDLimit = fdLimit(pids[0])
		res.CPUS, _ = sumCPU(pids)
		res.RSSBeforeKB, _ = sumRSS(pids)
		res.RSSPeakKB = res.RSSBeforeKB
	}
	cpu0 := res.CPUS
	run := &streamRun{lostWhy: map[string]int{}}
	limit := time.Duration(sh.RampS*float64(time.Second)) +
		time.Duration(float64(sh.Chunks)*sh.IntervalMS*3*float64(time.Millisecond)) + 30*time.Second
	done := make(chan struct{})
	var sampler sync.WaitGroup
	if len(pids) > 0 {
		sampler.Go(func() { res.RSSPeakKB = peakRSS(pids, res.RSSPeakKB, done) })
	}
	start := time.Now()
	var wg sync.WaitGroup
	step := time.Duration(sh.RampS*float64(time.Second)) / time.Duration(max(sh.Streams, 1))
	for i := range sh.Streams {
		if d := time.Until(start.Add(time.Duration(i) * step)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() { readStream(client, url, body, limit, sh.Chunks, run) })
	}
	wg.Wait()
	res.WallS = time.Since(start).Seconds()
	close(done)
	sampler.Wait()
	if len(pids) > 0 {
		if c, err := sumCPU(pids); err == nil {
			res.CPUS = c - cpu0
		} else {
			res.CPUS = -1
		}
	}
	res.Opened, res.PeakOpen, res.Chunks = run.opened, int(run.peak.Load()), run.chunks.Load()
	for _, n := range run.lostWhy {
		res.Lost += n
	}
	if res.Lost > 0 {
		res.LostWhy, res.LostExample = run.lostWhy, run.example
	}
	slices.Sort(run.gaps)
	q := func(q float64) float64 { return float64(traffic.Quantile(run.gaps, q)) / 1e6 }
	res.GapP50MS, res.GapP99MS, res.GapP999MS, res.GapMaxMS = q(0.5), q(0.99), q(0.999), q(1)
	return res
}

// peakRSS samples the summed RSS of pids every 100 ms until done and
// returns the largest (at least from).
func peakRSS(pids []int, from int64, done <-chan struct{}) int64 {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return from
		case <-t.C:
			if v, err := sumRSS(pids); err == nil {
				from = max(from, v)
			}
		}
	}
}

// readStream POSTs one streamed chat request and reads its SSE events,
// recording the gaps between consecutive content chunks. A stream is lost
// unless it answers 200, carries its want content chunks and ends with
// [DONE].
func readStream(client *http.Client, url string, body []byte, limit time.Duration, want int, run *streamRun) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		run.lose("request", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		run.lose(errClass(err), err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		run.lose(fmt.Sprintf("status %d", resp.StatusCode), fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg)))
		return
	}
	run.mu.Lock()
	run.opened++
	run.mu.Unlock()
	for n := run.open.Add(1); ; {
		if p := run.peak.Load(); n <= p || run.peak.CompareAndSwap(p, n) {
			break
		}
	}
	defer run.open.Add(-1)
	br := bufio.NewReaderSize(resp.Body, 4096)
	var (
		gaps  = make([]time.Duration, 0, 256)
		last  time.Time
		count int64 // data events
		toks  int   // content chunks among them
		ended bool
	)
	for {
		line, err := br.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			now := time.Now()
			switch {
			case bytes.HasPrefix(data, []byte("[DONE]")):
				ended = true
			case bytes.Contains(data, []byte(`"choices":[]`)): // the usage chunk: relayed, no token
				count++
			default:
				count++
				toks++
				if !last.IsZero() {
					gaps = append(gaps, now.Sub(last))
				}
				last = now
			}
		}
		if err != nil {
			run.chunks.Add(count)
			switch {
			case ended && errors.Is(err, io.EOF) && toks != want:
				run.lose("short", nil)
			case ended && errors.Is(err, io.EOF):
			case ended:
				run.lose("error after [DONE]", err)
			case errors.Is(err, io.EOF):
				run.lose("no [DONE]", nil)
			default:
				run.lose(errClass(err), err)
			}
			break
		}
	}
	run.mu.Lock()
	run.gaps = append(run.gaps, gaps...)
	run.mu.Unlock()
}

// errClass names an error's kind for the lost-stream tally.
func errClass(err error) string {
	switch {
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too many open files"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	}
	return "other error"
}
