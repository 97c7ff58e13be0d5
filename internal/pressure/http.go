package pressure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Body limits of the HTTP sources: a full vLLM or DCGM scrape is tens of KiB;
// the allocator answer a few hundred bytes per GPU.
const (
	maxMetricsBytes = 8 << 20
	maxJSONBytes    = 1 << 20
)

// ErrBodyTooLarge reports a source answer over its size limit.
var ErrBodyTooLarge = errors.New("pressure: response body too large")

// newHTTPClient returns the client HTTP sources use when Settings.HTTPClient
// is nil: our own transport with connect and header timeouts, no proxy from
// the environment (sources are pod or node local), never http.DefaultClient.
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			ResponseHeaderTimeout: 5 * time.Second,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		},
	}
}

// httpSource is a Source that fetches one URL and parses its body.
type httpSource struct {
	name  string
	get   httpGetter
	parse func([]byte) (Reading, error)
}

func (s *httpSource) Name() string { return s.name }

func (s *httpSource) Read(ctx context.Context) (Reading, error) {
	body, err := s.get.get(ctx)
	if err != nil {
		return Reading{}, err
	}
	return s.parse(body)
}

// The Accept headers HTTP sources send.
const (
	acceptMetrics = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
	acceptJSON    = "application/json"
	// acceptAny is for an answer whose kind is not known yet (HTTPFormat
	// of ""): either of the two, JSON first.
	acceptAny = "application/json;q=0.9,text/plain;version=0.0.4;q=0.8,*/*;q=0.1"
)

// HTTPFormat returns the Accept header and body limit gatekeeper uses for
// an HTTP source of kind (vllm, dcgm, memory_blocks; "" for one whose kind
// is not known yet: any of them, within the larger limit), and false for
// a kind that is not read over HTTP. What reads a source outside the
// monitor (gatekeeper probe) asks here, so it reads as the monitor does.
func HTTPFormat(kind Kind) (accept string, limit int64, ok bool) {
	switch kind {
	case KindVLLM, KindDCGM:
		return acceptMetrics, maxMetricsBytes, true
	case KindMemoryBlocks:
		return acceptJSON, maxJSONBytes, true
	case "":
		return acceptAny, maxMetricsBytes, true
	}
	return "", 0, false
}

// Parse parses an HTTP source's answer of kind with that kind's parser.
func Parse(kind Kind, body []byte) (Reading, error) {
	switch kind {
	case KindVLLM:
		return ParseVLLMMetrics(body)
	case KindDCGM:
		return ParseDCGMMetrics(body)
	case KindMemoryBlocks:
		return ParseMemoryBlocks(body)
	}
	return Reading{}, fmt.Errorf("pressure: %q is not an HTTP source kind", kind)
}

// getter fetches url as an HTTP source of kind.
func getter(c *http.Client, url string, kind Kind) httpGetter {
	accept, limit, _ := HTTPFormat(kind)
	return httpGetter{client: c, url: url, limit: limit, accept: accept}
}

// httpGetter fetches one URL with a bounded body.
type httpGetter struct {
	client *http.Client
	url    string
	accept string
	limit  int64
}

// get fetches the URL and returns its body, at most g.limit bytes. A non-2xx
// status or a larger body is an error.
func (g httpGetter) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	if err != nil {
		return nil, fmt.Errorf("pressure: GET %s: %w", g.url, err)
	}
	if g.accept != "" {
		req.Header.Set("Accept", g.accept)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pressure: %w", err) // *url.Error names method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // let the connection be reused
		return nil, fmt.Errorf("pressure: GET %s: status %d", g.url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, g.limit+1))
	if err != nil {
		return nil, fmt.Errorf("pressure: GET %s: reading body: %w", g.url, err)
	}
	if int64(len(body)) > g.limit {
		return nil, fmt.Errorf("pressure: GET %s: over %d bytes: %w", g.url, g.limit, ErrBodyTooLarge)
	}
	return body, nil
}
