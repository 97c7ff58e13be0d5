// Package server puts a simulated vLLM engine (package sim) behind real HTTP
// in real or scaled time: the OpenAI routes vLLM serves, /health, /metrics
// with vLLM's metric names, the memory_blocks allocator endpoint of DESIGN §3
// and a relief endpoint that flushes the allocator's cache.
//
// A driver (Run) advances the engine's virtual clock to Speed × the real time
// elapsed, every Tick, under the server's mutex; handlers submit requests and
// wait for the driver to report progress. cmd/vllm-sim and gatekeeper -demo
// both use it.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// Settings configures a Server. The zero value selects the defaults.
type Settings struct {
	// ModelName is the name served in /v1/models and checked in requests.
	// Empty means the engine's model name.
	ModelName string
	// GPUID labels the memory_blocks object and the DCGM-style gauges. Empty means "0".
	GPUID string
	// Speed is virtual seconds per real second (2 runs the engine twice as
	// fast as the wall clock). 0 means 1; must be > 0.
	Speed float64
	// Tick is how often, in real time, the driver advances the engine and
	// wakes the handlers. 0 means 5ms.
	Tick time.Duration
	// Seed makes the generated text and output lengths reproducible.
	Seed uint64
	// DefaultMaxTokens is the output budget of a request without max_tokens
	// (vLLM would use the rest of the context). 0 means 256.
	DefaultMaxTokens int
	// CharsPerToken estimates prompt tokens from characters. 0 means 4.
	CharsPerToken int
	// FullOutput makes every request generate max_tokens (like ignore_eos).
	// False means each request stops at a length drawn uniformly from
	// [1, max_tokens] with Seed, as if it met EOS.
	FullOutput bool
	// MaxBodyBytes bounds request bodies. 0 means 10 MiB.
	MaxBodyBytes int64
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Logger receives engine deaths and restarts. Nil discards.
	Logger *slog.Logger
}

// Server is an http.Handler serving one simulated engine. Create one with
// New; run its driver with Run (or Serve). Safe for concurrent use; it must
// not be copied.
type Server struct {
	s    Settings
	mux  *http.ServeMux
	name string
	// blockSize is the engine's KV block size, in tokens (fixed at New).
	blockSize int

	// mu guards everything below and every call into the engine.
	mu      sync.Mutex
	e       *sim.Engine
	start   time.Time
	rng     *rand.Rand
	pending map[*sim.Seq]*waiter
	alive   bool
	nextID  uint64
}

// waiter is a handler waiting on one request; notify is buffered (1).
type waiter struct {
	notify chan struct{}
	seen   int
}

// New wraps e. The server owns e from now on: nothing else may call it.
func New(e *sim.Engine, s Settings) (*Server, error) {
	if e == nil {
		return nil, errors.New("server: nil engine")
	}
	if s.Speed < 0 {
		return nil, fmt.Errorf("server: Settings.Speed = %v, want > 0", s.Speed)
	}
	if s.Tick < 0 || s.DefaultMaxTokens < 0 || s.CharsPerToken < 0 || s.MaxBodyBytes < 0 {
		return nil, errors.New("server: Settings.Tick, DefaultMaxTokens, CharsPerToken and MaxBodyBytes must be >= 0")
	}
	if s.Speed == 0 {
		s.Speed = 1
	}
	if s.Tick == 0 {
		s.Tick = 5 * time.Millisecond
	}
	if s.DefaultMaxTokens == 0 {
		s.DefaultMaxTokens = 256
	}
	if s.CharsPerToken == 0 {
		s.CharsPerToken = 4
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = 10 << 20
	}
	if s.GPUID == "" {
		s.GPUID = "0"
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	srv := &Server{s: s, e: e, name: s.ModelName, blockSize: e.Settings().BlockSize, start: s.Now(), alive: e.Alive(),
		rng: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)), pending: map[*sim.Seq]*waiter{}}
	if srv.name == "" {
		srv.name = e.Settings().Model.Name
	}
	srv.routes()
	return srv, nil
}

func (srv *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/completions", srv.completions)
	m.HandleFunc("POST /v1/chat/completions", srv.chatCompletions)
	m.HandleFunc("GET /v1/models", srv.models)
	m.HandleFunc("GET /health", srv.health)
	m.HandleFunc("GET /metrics", srv.metrics)
	m.HandleFunc("GET /v1/internal/metrics", srv.memoryBlocks)
	m.HandleFunc("POST /v1/internal/empty_cache", srv.emptyCache)
	m.HandleFunc("POST /reset_prefix_cache", srv.resetPrefixCache)
	srv.mux = m
}

// ServeHTTP serves the routes listed in the package comment.
func (srv *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { srv.mux.ServeHTTP(w, r) }

// Run drives the engine every Tick until ctx ends; it returns ctx's error.
func (srv *Server) Run(ctx context.Context) error {
	t := time.NewTicker(srv.s.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			srv.Tick()
		}
	}
}

// Serve runs the driver and an HTTP server on ln until ctx ends, then shuts
// the HTTP server down (in-flight handlers get up to 5 s) and returns after
// both have stopped. It returns nil on a clean stop.
func (srv *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(srv.s.Logger.Handler(), slog.LevelWarn)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- srv.Run(ctx) }()
	go func() {
		err := hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		cancel()
		errc <- err
	}()
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	shutErr := hs.Shutdown(sctx)
	err1, err2 := <-errc, <-errc
	var errs []error
	for _, err := range []error{err1, err2, shutErr} {
		if err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Tick advances the engine to the current virtual time and wakes every
// handler whose request made progress. Run calls it every Settings.Tick;
// tests may call it directly.
func (srv *Server) Tick() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.advance()
}

// virtualNow maps the clock onto the engine's time. Call with mu held.
func (srv *Server) virtualNow() time.Duration {
	return time.Duration(float64(srv.s.Now().Sub(srv.start)) * srv.s.Speed)
}

// advance moves the engine and signals waiters. Call with mu held; the
// signals are non-blocking sends on buffered channels.
func (srv *Server) advance() {
	srv.e.Advance(srv.virtualNow())
	srv.e.TakeFinished() // handlers read their own Seq; the list must not grow
	if alive := srv.e.Alive(); alive != srv.alive {
		srv.alive = alive
		if alive {
			srv.s.Logger.LogAttrs(context.Background(), slog.LevelInfo, "engine restarted", slog.String("state", "serving"))
		} else {
			srv.s.Logger.LogAttrs(context.Background(), slog.LevelWarn, "engine died",
				slog.String("state", "restarting"), slog.String("err", srv.e.LastError().Error()))
		}
	}
	for s, w := range srv.pending {
		if g := s.Generated(); g != w.seen || s.Done() {
			w.seen = g
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
	}
}
