// Package relief makes gatekeeper's relief hooks (DESIGN §4): HTTP calls made
// when an upstream enters a level, e.g. an allocator endpoint that runs
// torch.cuda.empty_cache() or vLLM's /reset_prefix_cache. They run in the
// background, each with its own timeout, at most one in flight per hook, and
// never block traffic. cmd/gatekeeper fires them from the slow path.
package relief

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	// defaultHookTimeout bounds a hook call whose Timeout is not positive.
	defaultHookTimeout = 5 * time.Second
	// hookBodyLimit is how much of a hook's response body is read (and
	// discarded) before the body is closed.
	hookBodyLimit = 64 << 10
	// hookUserAgent is sent unless the hook sets its own User-Agent.
	hookUserAgent = "gatekeeper-hook"
)

// ErrStatus is wrapped by Result.Err when a hook answered a status outside
// 2xx (redirects included: the built-in client does not follow them).
var ErrStatus = errors.New("relief: hook answered a non-2xx status")

// Hook is one relief call. The caller resolves its URL first (config's
// Hook.ResolveURL): Fire takes absolute URLs only.
type Hook struct {
	// Method is the HTTP method. "" means POST.
	Method string
	// URL is the absolute http(s) URL to call.
	URL string
	// Headers are set on the request; "Host" sets the request's host.
	Headers map[string]string
	// Body is sent as is; "" sends none. Set Content-Type in Headers.
	Body string
	// Timeout bounds the whole call, response body included. Zero or
	// negative means 5s.
	Timeout time.Duration
}

// Result is what one Fire of one hook came to.
type Result struct {
	// Level and Upstream are as passed to Fire; Method and URL are the
	// hook's (Method "" reported as POST).
	Level, Upstream, Method, URL string
	// Status is the response status, 0 when none arrived.
	Status int
	// Err is nil on a 2xx answer. Otherwise it wraps ErrStatus,
	// context.DeadlineExceeded (the hook's Timeout), context.Canceled
	// (Run's ctx ended) or the transport's error.
	Err error
	// Duration is how long the call took; 0 when skipped.
	Duration time.Duration
	// Skipped says the call was not made because the same hook (level,
	// upstream, method, URL) was still in flight.
	Skipped bool
}

// Outcomes lists every value Outcome returns, for series that exist
// before the first call.
var Outcomes = []string{"ok", "error", "timeout", "skipped", "canceled"}

// Outcome names the result for logs and the hook_calls_total metric:
// "ok", "skipped", "timeout", "canceled" (shutdown) or "error" (a non-2xx
// status or a transport error).
func (r Result) Outcome() string {
	switch {
	case r.Skipped:
		return "skipped"
	case r.Err == nil:
		return "ok"
	case errors.Is(r.Err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(r.Err, context.Canceled):
		return "canceled"
	default:
		return "error"
	}
}

// Settings configures a Runner.
type Settings struct {
	// Client makes the calls. Nil means a client of the runner's own with
	// bounded dial (2s) and TLS handshake (5s) timeouts that follows no
	// redirects and uses no environment proxy. http.DefaultClient is
	// refused. Each call is bounded by its hook's Timeout either way.
	Client *http.Client
	// OnResult, if set, receives every result, outside any lock: from the
	// call's goroutine when it ends, or from Fire itself for a skip. It must
	// not block; cmd logs and counts here.
	OnResult func(Result)
	// now returns the current time, for Result.Duration. Nil means time.Now.
	now func() time.Time
}

// Runner makes relief calls in the background. Create one with New and run
// Run for the process's life: Run owns the calls' goroutines and ends them
// when its ctx ends. A Runner is safe for concurrent use and must not be
// copied.
type Runner struct {
	client   *http.Client
	own      bool // client was built here; its idle connections are closed when Run ends
	onResult func(Result)
	now      func() time.Time
	wg       sync.WaitGroup

	// mu guards the fields below.
	mu       sync.Mutex
	inflight map[hookKey]context.CancelFunc
	stopped  bool
}

// hookKey identifies one hook for the one-in-flight rule.
type hookKey struct{ level, upstream, method, url string }

// New returns a Runner, or an error when s.Client is http.DefaultClient.
func New(s Settings) (*Runner, error) {
	if s.Client == http.DefaultClient {
		return nil, errors.New("relief: Settings.Client: http.DefaultClient has no bounds; pass a client of your own or nil")
	}
	r := &Runner{client: s.Client, onResult: s.OnResult, now: s.now, inflight: map[hookKey]context.CancelFunc{}}
	if r.client == nil {
		r.client, r.own = newHookClient(), true
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.onResult == nil {
		r.onResult = func(Result) {}
	}
	return r, nil
}

// newHookClient builds the bounded client used when none is given.
func newHookClient() *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil, // hooks go straight to the pod
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     4 * time.Second, // below vLLM's 5 s keep-alive
		},
		// A relief call is not idempotent; a redirect is reported, not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Fire starts each hook's call in the background for upstream entering
// level, and returns at once. A hook whose previous call for the same level
// and upstream is still in flight is skipped and reported as Skipped. Calls
// fired before Run starts are made too; once Run's ctx has ended, Fire does
// nothing.
func (r *Runner) Fire(level, upstream string, hooks []Hook) {
	for _, h := range hooks {
		method := strings.ToUpper(h.Method)
		if method == "" {
			method = http.MethodPost
		}
		key := hookKey{level: level, upstream: upstream, method: method, url: h.URL}
		started, stopped := r.start(key, h)
		if stopped {
			return
		}
		if !started {
			r.onResult(Result{Level: level, Upstream: upstream, Method: method, URL: h.URL, Skipped: true})
		}
	}
}

// start starts h's call unless the runner has stopped or key is in flight.
func (r *Runner) start(key hookKey, h Hook) (started, stopped bool) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = defaultHookTimeout
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false, true
	}
	if _, busy := r.inflight[key]; busy {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	r.inflight[key] = cancel
	r.wg.Go(func() {
		defer cancel()
		r.call(ctx, key, h)
	})
	return true, false
}

// call makes one hook call, frees its key, then reports it.
func (r *Runner) call(ctx context.Context, key hookKey, h Hook) {
	start := r.now()
	status, err := r.do(ctx, key.method, h)
	res := Result{Level: key.level, Upstream: key.upstream, Method: key.method, URL: h.URL,
		Status: status, Err: err, Duration: r.now().Sub(start)}
	r.mu.Lock()
	delete(r.inflight, key)
	r.mu.Unlock()
	r.onResult(res)
}

// do sends the request and reads at most hookBodyLimit of the answer.
func (r *Runner) do(ctx context.Context, method string, h Hook) (int, error) {
	var body io.Reader
	if h.Body != "" {
		body = strings.NewReader(h.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.URL, body)
	if err != nil {
		return 0, fmt.Errorf("relief: hook %s %s: %w", method, h.URL, err)
	}
	req.Header.Set("User-Agent", hookUserAgent)
	for name, v := range h.Headers {
		if strings.EqualFold(name, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(name, v)
	}
	res, err := r.client.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%w)", ctxErr, err) // name the deadline or the shutdown
		}
		return 0, fmt.Errorf("relief: hook %s %s: %w", method, h.URL, err)
	}
	// The body is discarded: a 2xx status is the answer, and an error or an
	// over-long body only ends the read.
	_, _ = io.CopyN(io.Discard, res.Body, hookBodyLimit)
	_ = res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, fmt.Errorf("relief: hook %s %s: status %d: %w", method, h.URL, res.StatusCode, ErrStatus)
	}
	return res.StatusCode, nil
}

// Run blocks until ctx ends, then cancels the calls in flight, waits for
// their goroutines to exit (each reports its result first) and returns nil.
// After that Fire does nothing. Call it once.
func (r *Runner) Run(ctx context.Context) error {
	<-ctx.Done()
	r.mu.Lock()
	r.stopped = true
	cancels := make([]context.CancelFunc, 0, len(r.inflight))
	for _, c := range r.inflight {
		cancels = append(cancels, c)
	}
	r.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	r.wg.Wait()
	if r.own {
		r.client.CloseIdleConnections()
	}
	return nil
}
