// Package probe reads one pressure source once, for `gatekeeper probe`: a
// way to see, before a policy names a source, what gatekeeper will read
// from it. It parses with package pressure's own parsers (nvml through a
// pressure.Monitor), with the Accept header and body limit gatekeeper's
// polling uses, so what it shows is what gatekeeper reads.
package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// errUnknownKind reports an answer whose kind Guess cannot tell.
var errUnknownKind = errors.New("probe: cannot tell the source kind from the answer (no vllm: or DCGM_FI_DEV_ metrics, not JSON); pass -kind vllm, dcgm or memory_blocks")

// Settings says which source to read. The zero value is not useful: set
// URL, or Kind nvml.
type Settings struct {
	// URL is the source's address (http or https); required for every kind
	// but nvml, which takes none.
	URL string
	// Kind is the source's kind. Empty means guess it from the answer (see
	// Guess); nvml is never guessed.
	Kind pressure.Kind
	// client performs the GET. Nil means a client of our own without a
	// proxy from the environment (sources are pod or node local), never
	// http.DefaultClient. The caller's context bounds the whole read.
	client *http.Client
	// nvml is the library an nvml read calls. Nil means the driver's
	// (nvml.New()), loaded at the read. Only a build with the nvml build
	// tag reads NVML; without it an nvml read fails with
	// pressure.ErrNVMLNotCompiled.
	nvml pressure.NVML
}

// Result is what one read yielded.
type Result struct {
	// url is the address read; empty for nvml.
	url string
	// kind is the source's kind, as given or guessed.
	kind pressure.Kind
	// guessed is true when Kind was guessed from the answer.
	guessed bool
	// Rows holds one row per value: the pod-level ones first, then each
	// GPU's (by GPU ID), each group in pressure.Signals order.
	Rows []Row
}

// Row is one value of one signal.
type Row struct {
	Signal pressure.Signal
	// gpu is the GPU's ID as the source names it; empty for a pod-level
	// value. UUID is its UUID where the source knows it.
	gpu, uuid string
	Value     float64
	// counter is true when Value is a cumulative total: gatekeeper turns
	// two readings into the per-second rate that Signal names.
	counter bool
}

// Read reads the source s names once. Errors name the URL and say what
// went wrong: a connection that failed, an HTTP status, an answer over its
// size limit, one that does not parse, or one whose kind cannot be guessed
// (ErrUnknownKind).
func Read(ctx context.Context, s Settings) (Result, error) {
	if s.Kind == pressure.KindNVML {
		if s.URL != "" {
			return Result{}, errors.New("probe: nvml reads the local GPUs and takes no URL")
		}
		if !pressure.NVMLCompiled {
			return Result{}, fmt.Errorf("probe: %w", pressure.ErrNVMLNotCompiled)
		}
		return readNVML(ctx, s.nvml)
	}
	if err := checkURL(s.URL); err != nil {
		return Result{}, err
	}
	accept, limit, ok := pressure.HTTPFormat(s.Kind) // as the monitor reads it
	if !ok {
		return Result{}, fmt.Errorf("probe: unknown kind %q (want vllm, dcgm, memory_blocks or nvml)", s.Kind)
	}
	c := s.client
	if c == nil {
		c = newClient()
		defer c.CloseIdleConnections()
	}
	body, err := get(ctx, c, s.URL, accept, limit)
	if err != nil {
		return Result{}, err
	}
	r := Result{url: s.URL, kind: s.Kind}
	if r.kind == "" {
		kind, ok := guess(body)
		if !ok {
			return Result{}, fmt.Errorf("probe: %s: %w", s.URL, errUnknownKind)
		}
		r.kind, r.guessed = kind, true
		if _, most, _ := pressure.HTTPFormat(kind); int64(len(body)) > most {
			return Result{}, fmt.Errorf("probe: GET %s: over %d bytes: %w", s.URL, most, pressure.ErrBodyTooLarge)
		}
	}
	rd, err := pressure.Parse(r.kind, body)
	if err != nil {
		return Result{}, fmt.Errorf("probe: %s: not a %s answer: %w", s.URL, r.kind, err)
	}
	r.Rows = rows(rd)
	return r, nil
}

// guess returns the kind of source that gave body, and false when it
// cannot tell: JSON is an allocator endpoint's (memory_blocks), Prometheus
// text with DCGM_FI_DEV_ series a DCGM exporter's, and with vllm: series a
// vLLM server's. The families the parsers read do not overlap, so an
// answer of one of the three kinds is never mistaken for another; a body
// that mixes them (a federating Prometheus) is taken for DCGM's.
func guess(body []byte) (pressure.Kind, bool) {
	trimmed := bytes.TrimSpace(body)
	switch {
	case len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '['):
		return pressure.KindMemoryBlocks, true
	case bytes.Contains(body, []byte("DCGM_FI_DEV_")):
		return pressure.KindDCGM, true
	case bytes.Contains(body, []byte("vllm:")):
		return pressure.KindVLLM, true
	}
	return "", false
}

// checkURL rejects what gatekeeper's policy would: a URL that is not
// absolute http(s) with a host.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("probe: a URL is required for every kind but nvml")
	}
	u, err := url.Parse(raw)
	switch {
	case err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		return nil
	case !strings.Contains(raw, "://"):
		return fmt.Errorf("probe: %q is not an http(s) URL (did you mean http://%s?)", raw, raw)
	}
	return fmt.Errorf("probe: %q is not an http(s) URL with a host", raw)
}

// newClient is the client Read uses when Settings.Client is nil.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: 5 * time.Second,
	}}
}

// get fetches rawURL and returns its body, at most limit bytes. A non-2xx
// status, with the start of its body, or a larger body is an error.
func get(ctx context.Context, c *http.Client, rawURL, accept string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("probe: GET %s: %w", rawURL, err)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err) // *url.Error names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		start, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		msg := fmt.Sprintf("probe: GET %s: status %s", rawURL, resp.Status)
		if s := strings.Join(strings.Fields(string(start)), " "); s != "" && s[0] != '<' { // an HTML page says nothing more
			msg += fmt.Sprintf(" (%q)", s)
		}
		return nil, errors.New(msg)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("probe: GET %s: reading body: %w", rawURL, err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("probe: GET %s: over %d bytes: %w", rawURL, limit, pressure.ErrBodyTooLarge)
	}
	return body, nil
}

// rows lists a reading's values: pod-level first, then per GPU.
func rows(rd pressure.Reading) []Row {
	var out []Row
	add := func(gpu, uuid string, values, counters map[pressure.Signal]float64) {
		for _, sig := range pressure.Signals() {
			if v, ok := values[sig]; ok {
				out = append(out, Row{Signal: sig, gpu: gpu, uuid: uuid, Value: v})
			}
			if v, ok := counters[sig]; ok {
				out = append(out, Row{Signal: sig, gpu: gpu, uuid: uuid, Value: v, counter: true})
			}
		}
	}
	add("", "", rd.Values, rd.Counters)
	for _, g := range rd.GPUs {
		add(g.ID, g.UUID, g.Values, g.Counters)
	}
	return out
}
