package breaker

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewLimiterRejectsInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     LimiterSettings
		field string
	}{
		{"negative qps", LimiterSettings{QPS: -1}, "LimiterSettings.QPS"},
		{"nan qps", LimiterSettings{QPS: nan()}, "LimiterSettings.QPS"},
		{"inf qps", LimiterSettings{QPS: inf()}, "LimiterSettings.QPS"},
		{"negative burst", LimiterSettings{QPS: 1, Burst: -1}, "LimiterSettings.Burst"},
		{"negative client qps", LimiterSettings{ClientQPS: -2}, "LimiterSettings.ClientQPS"},
		{"negative client burst", LimiterSettings{ClientBurst: -1}, "LimiterSettings.ClientBurst"},
		{"negative max clients", LimiterSettings{MaxClients: -1}, "LimiterSettings.MaxClients"},
		{"negative idle", LimiterSettings{IdleAfter: -time.Second}, "LimiterSettings.IdleAfter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLimiter(tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.field) || !strings.HasPrefix(err.Error(), "breaker: ") {
				t.Fatalf("NewLimiter(%+v) = %v, want an error naming %s", tt.s, err, tt.field)
			}
		})
	}
	_, err := NewLimiter(LimiterSettings{QPS: -1, MaxClients: -1})
	if err == nil || !strings.Contains(err.Error(), "QPS") || !strings.Contains(err.Error(), "MaxClients") {
		t.Fatalf("NewLimiter(two bad fields) = %v, want both named", err)
	}
}

// limiterStep advances the fake clock, calls Allow, and states the result:
// want is "ok", or the refusing scope and the Retry-After it must carry.
type limiterStep struct {
	advance    time.Duration
	key        string
	want       string // "ok", "global" or "client"
	retryAfter time.Duration
	clients    int // if > 0, Clients() after the call
}

func runLimiterSteps(t *testing.T, clk *fakeClock, l *Limiter, steps []limiterStep) {
	t.Helper()
	for i, st := range steps {
		clk.Advance(st.advance)
		err := l.Allow(t.Context(), st.key)
		got := "ok"
		var le *LimitError
		if errors.As(err, &le) {
			got = le.Scope.String()
			if le.RetryAfter() != st.retryAfter {
				t.Errorf("step %d: Allow(%q).RetryAfter() = %v, want %v", i, st.key, le.RetryAfter(), st.retryAfter)
			}
			if !errors.Is(err, errRateLimited) {
				t.Errorf("step %d: errors.Is(%v, ErrRateLimited) = false", i, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: Allow(%q) = %v, want nil or *LimitError", i, st.key, err)
		}
		if got != st.want {
			t.Errorf("step %d: Allow(%q) = %v (%s), want %s", i, st.key, err, got, st.want)
		}
		if st.clients > 0 && l.Clients() != st.clients {
			t.Errorf("step %d: Clients() = %d, want %d", i, l.Clients(), st.clients)
		}
	}
}

func TestLimiterSteps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     LimiterSettings
		steps []limiterStep
	}{
		{
			name: "global burst then refill",
			s:    LimiterSettings{QPS: 1, Burst: 2},
			steps: []limiterStep{
				{want: "ok"}, {want: "ok"},
				{want: "global", retryAfter: time.Second},
				{advance: time.Second, want: "ok"},
				{want: "global", retryAfter: time.Second},
			},
		},
		{
			name: "refusals consume nothing",
			s:    LimiterSettings{QPS: 1, Burst: 1},
			steps: []limiterStep{
				{want: "ok"},
				{advance: 500 * time.Millisecond, want: "global", retryAfter: time.Second},
				{want: "global", retryAfter: time.Second},
				{want: "global", retryAfter: time.Second},
				{advance: 500 * time.Millisecond, want: "ok"},
			},
		},
		{
			name: "retry after rounds up to whole seconds",
			s:    LimiterSettings{QPS: 0.25, Burst: 1},
			steps: []limiterStep{
				{want: "ok"},
				{want: "global", retryAfter: 4 * time.Second},
				{advance: 500 * time.Millisecond, want: "global", retryAfter: 4 * time.Second},
				{advance: 2600 * time.Millisecond, want: "global", retryAfter: time.Second},
				{advance: 900 * time.Millisecond, want: "ok"},
			},
		},
		{
			name: "default burst is one second of qps",
			s:    LimiterSettings{QPS: 2.5},
			steps: []limiterStep{
				{want: "ok"}, {want: "ok"}, {want: "ok"},
				{want: "global", retryAfter: time.Second},
			},
		},
		{
			name: "zero qps is unlimited",
			s:    LimiterSettings{},
			steps: []limiterStep{
				{want: "ok"}, {want: "ok"}, {key: "a", want: "ok"}, {want: "ok"},
			},
		},
		{
			name: "per client buckets are separate",
			s:    LimiterSettings{ClientQPS: 1, ClientBurst: 1},
			steps: []limiterStep{
				{key: "a", want: "ok", clients: 1},
				{key: "a", want: "client", retryAfter: time.Second},
				{key: "b", want: "ok", clients: 2},
				{key: "", want: "ok"}, // no key: global only
				{key: "", want: "ok"},
				{advance: time.Second, key: "a", want: "ok"},
			},
		},
		{
			name: "client refusal spares the global bucket and global refusal refunds the client",
			s:    LimiterSettings{QPS: 10, Burst: 2, ClientQPS: 1, ClientBurst: 1},
			steps: []limiterStep{
				{key: "a", want: "ok"},
				{key: "a", want: "client", retryAfter: time.Second}, // global still holds 1
				{key: "b", want: "ok"},
				{key: "c", want: "global", retryAfter: time.Second}, // c keeps its own token
				{advance: 100 * time.Millisecond, key: "c", want: "ok"},
			},
		},
		{
			name: "least recently used client is evicted when full",
			s:    LimiterSettings{ClientQPS: 1, ClientBurst: 1, MaxClients: 2},
			steps: []limiterStep{
				{key: "a", want: "ok"},
				{key: "b", want: "ok"},
				{key: "a", want: "client", retryAfter: time.Second}, // touches a
				{key: "c", want: "ok", clients: 2},                  // evicts b
				{key: "b", want: "ok", clients: 2},                  // fresh bucket; evicts a
				{key: "c", want: "client", retryAfter: time.Second},
			},
		},
		{
			name: "idle clients are evicted",
			s:    LimiterSettings{ClientQPS: 1, ClientBurst: 1, IdleAfter: time.Minute},
			steps: []limiterStep{
				{key: "a", want: "ok"},
				{advance: 30 * time.Second, key: "b", want: "ok", clients: 2},
				{advance: 30 * time.Second, key: "b", want: "ok", clients: 1}, // a idle for 1m
				{advance: 59 * time.Second, key: "c", want: "ok", clients: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			tt.s.Now = clk.Now
			l, err := NewLimiter(tt.s)
			if err != nil {
				t.Fatalf("NewLimiter(%+v) = %v", tt.s, err)
			}
			runLimiterSteps(t, clk, l, tt.steps)
		})
	}
}

func TestLimiterUpdateKeepsState(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	l, err := NewLimiter(LimiterSettings{QPS: 1, Burst: 5, ClientQPS: 1, ClientBurst: 1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	steps := []limiterStep{{key: "a", want: "ok"}, {want: "ok"}, {want: "ok"}, {want: "ok"}, {want: "ok"}}
	runLimiterSteps(t, clk, l, steps)

	// A larger burst neither refills nor empties the bucket.
	if err := l.Update(LimiterSettings{QPS: 1, Burst: 10, ClientQPS: 1, ClientBurst: 1}); err != nil {
		t.Fatal(err)
	}
	runLimiterSteps(t, clk, l, []limiterStep{
		{want: "global", retryAfter: time.Second},
		{key: "a", want: "client", retryAfter: time.Second}, // client bucket survived
	})

	// A faster rate applies from now.
	if err := l.Update(LimiterSettings{QPS: 10, Burst: 10, ClientQPS: 10, ClientBurst: 1}); err != nil {
		t.Fatal(err)
	}
	runLimiterSteps(t, clk, l, []limiterStep{
		{advance: 100 * time.Millisecond, key: "a", want: "ok"},
		{advance: 100 * time.Millisecond, want: "ok"},
	})

	// An invalid policy changes nothing.
	if err := l.Update(LimiterSettings{QPS: -1}); err == nil || !strings.Contains(err.Error(), "QPS") {
		t.Fatalf("Update(QPS: -1) = %v, want an error naming QPS", err)
	}
	runLimiterSteps(t, clk, l, []limiterStep{
		{want: "global", retryAfter: time.Second},
		{advance: 100 * time.Millisecond, want: "ok"}, // still 10 QPS
	})

	// Turning per-client buckets off forgets them; global off lets all pass.
	if err := l.Update(LimiterSettings{}); err != nil {
		t.Fatal(err)
	}
	if n := l.Clients(); n != 0 {
		t.Fatalf("Clients() after per-client off = %d, want 0", n)
	}
	runLimiterSteps(t, clk, l, []limiterStep{{key: "a", want: "ok"}, {key: "a", want: "ok"}, {want: "ok"}})

	// A smaller MaxClients evicts down to it.
	if err := l.Update(LimiterSettings{ClientQPS: 1, MaxClients: 3}); err != nil {
		t.Fatal(err)
	}
	runLimiterSteps(t, clk, l, []limiterStep{{key: "a", want: "ok"}, {key: "b", want: "ok"}, {key: "c", want: "ok", clients: 3}})
	if err := l.Update(LimiterSettings{ClientQPS: 1, MaxClients: 1}); err != nil {
		t.Fatal(err)
	}
	if n := l.Clients(); n != 1 {
		t.Fatalf("Clients() after MaxClients 1 = %d, want 1", n)
	}
	runLimiterSteps(t, clk, l, []limiterStep{{key: "c", want: "client", retryAfter: time.Second}})
}

func TestLimiterConcurrent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock() // frozen: exactly Burst requests may pass
	l, err := NewLimiter(LimiterSettings{QPS: 1, Burst: 100, ClientQPS: 1, ClientBurst: 3, MaxClients: 8, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := ""
				if i%2 == 0 {
					key = "client-" + strconv.Itoa((g*200+i)%40)
				}
				if err := l.Allow(t.Context(), key); err == nil {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("admitted %d of 1600 on a frozen clock, want exactly Burst = 100", got)
	}
	if n := l.Clients(); n > 8 {
		t.Fatalf("Clients() = %d, want ≤ MaxClients 8", n)
	}
}

func TestWholeSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want time.Duration }{
		{0, time.Second},
		{time.Nanosecond, time.Second},
		{time.Second, time.Second},
		{time.Second + 1, 2 * time.Second},
		{2500 * time.Millisecond, 3 * time.Second},
		{1<<63 - 1, (1<<63 - 1) / time.Second * time.Second},
	}
	for _, tt := range tests {
		if got := wholeSeconds(tt.in); got != tt.want {
			t.Errorf("wholeSeconds(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// The global bucket, the last a request passes, keeps no reservation: a
// request it admits costs no allocation, limited or not.
func TestAllowGlobalAllocatesNothing(t *testing.T) {
	for _, s := range []LimiterSettings{{}, {QPS: 1e12, Burst: 1 << 30}} {
		l, err := NewLimiter(s)
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() {
			if err := l.Allow(t.Context(), ""); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("Allow with QPS %v: %v allocations, want 0", s.QPS, n)
		}
	}
}
