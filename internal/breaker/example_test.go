package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

func ExampleLimiter() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := breaker.NewLimiter(breaker.LimiterSettings{
		QPS: 80, Burst: 40, // global
		ClientQPS: 1, ClientBurst: 2, // per Authorization header
		Now: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		err := l.Allow(context.Background(), "Bearer sk-alice")
		var le *breaker.LimitError
		if errors.As(err, &le) {
			fmt.Println("refused:", le.Scope, "retry after", le.RetryAfter())
			continue
		}
		fmt.Println("admitted")
	}
	fmt.Println("bob:", l.Allow(context.Background(), "Bearer sk-bob"))
	// Output:
	// admitted
	// admitted
	// refused: client retry after 1s
	// bob: <nil>
}

// A heavy tenant capped at half the global rate is refused at its cap, and
// that refusal leaves the global bucket's tokens to a light tenant.
func ExampleLimiter_AllowTenant() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := breaker.NewLimiter(breaker.LimiterSettings{
		QPS: 4, Burst: 4,
		Shares: map[string]breaker.TenantShare{"heavy": {Max: 0.5}, "light": {Min: 0.25}},
		Now:    func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	for _, tenant := range []string{"heavy", "heavy", "heavy", "light", "light", "light"} {
		fmt.Println(tenant+":", l.AllowTenant(context.Background(), "", tenant))
	}
	// Output:
	// heavy: <nil>
	// heavy: <nil>
	// heavy: breaker: rate limited (tenant), retry after 1s
	// light: <nil>
	// light: <nil>
	// light: breaker: rate limited (global), retry after 1s
}

func ExampleErrorBreaker() {
	b, err := breaker.NewErrorBreaker(breaker.ErrorSettings{
		Failures: 2,
		OnChange: func(from, to breaker.State) { fmt.Println("breaker:", from, "→", to) },
	})
	if err != nil {
		panic(err)
	}
	for _, o := range []breaker.Outcome{breaker.Failure, breaker.Excluded, breaker.Failure} {
		done, err := b.Allow()
		if err != nil {
			fmt.Println(err)
			continue
		}
		done(o) // exactly once, when the response body has been copied
	}
	_, err = b.Allow()
	fmt.Println(err, b.State())
	// Output:
	// breaker: closed → open
	// breaker: open open
}

func ExampleLevelMachine() {
	m, err := breaker.NewLevelMachine(breaker.LevelSettings{
		Rules:      []breaker.Rule{{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5}},
		Hysteresis: 0.05,
		Hold:       5 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	// Hysteresis is a fraction of each threshold: degraded (1.2) is left
	// only below 1.2 × 0.95 = 1.14 and critical (1.5) below 1.425, each
	// after Hold. 1.145 is still within degraded's band, so at t=15s
	// critical falls to degraded, not straight to normal.
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, v := range []float64{1.1, 1.3, 1.6, 1.145, 1.1, 1.1, 1.1} {
		now := start.Add(time.Duration(i) * 3 * time.Second)
		if tr, ok := m.Observe(now, []breaker.Reading{{Signal: "fragmentation", Value: v}}); ok {
			fmt.Printf("t=%2.0fs %s → %s (%s=%g)\n", now.Sub(start).Seconds(), tr.From, tr.To, tr.Signal, tr.Value)
		}
	}
	// Output:
	// t= 3s normal → degraded (fragmentation=1.3)
	// t= 6s degraded → critical (fragmentation=1.6)
	// t=15s critical → degraded (fragmentation=1.1)
	// t=18s degraded → normal (fragmentation=1.1)
}

func ExampleSlow() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sl, err := breaker.NewSlow(breaker.SlowSettings{
		Level: breaker.LevelSettings{
			Rules: []breaker.Rule{
				{Signal: "fragmentation", Degrade: 1.2, Shed: 1.5},
				{Signal: "kv_cache_usage", Degrade: 0.95},
			},
			Hysteresis: 0.05,
			Hold:       2 * time.Second,
		},
		Window: breaker.WindowSettings{MaxInflight: 256, MinInflight: 4, RampStep: 0.25},
		Now:    func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	// The pressure loop feeds readings; the dispatch path reads Current.
	for _, frag := range []float64{1.1, 1.3, 1.6, 1.0, 1.0, 1.0, 1.0, 1.0} {
		u := sl.Observe([]breaker.Reading{
			{Signal: "fragmentation", Value: frag},
			{Signal: "kv_cache_usage", Value: 0.7},
		}, true)
		if u.LevelChanged || u.LimitChanged || u.PhaseChanged {
			fmt.Printf("frag %.1f: %s, %s, window %d, takes new work: %v\n", frag, u.Level, u.Phase, u.Limit,
				sl.Current().Level != breaker.Critical)
		}
		now = now.Add(time.Second)
	}
	// Output:
	// frag 1.3: degraded, degraded, window 204, takes new work: true
	// frag 1.6: critical, critical, window 163, takes new work: false
	// frag 1.0: normal, recovering, window 163, takes new work: true
	// frag 1.0: normal, recovering, window 227, takes new work: true
	// frag 1.0: normal, normal, window 256, takes new work: true
}

func ExampleWindow() {
	w, err := breaker.NewWindow(breaker.WindowSettings{MaxInflight: 100, MinInflight: 10})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, in := range []breaker.WindowInput{
		{Level: breaker.Degraded, Signal: "fragmentation", Value: 1.3},
		{Level: breaker.Degraded, Signal: "fragmentation", Value: 1.4}, // worse, 2s later: cut again
		{Level: breaker.Normal, BacklogEmpty: false},
		{Level: breaker.Normal, BacklogEmpty: false},
		{Level: breaker.Normal, BacklogEmpty: true},
	} {
		limit, phase := w.Tick(now, in)
		fmt.Println(limit, phase)
		now = now.Add(2 * time.Second)
	}
	// Output:
	// 80 degraded
	// 64 degraded
	// 64 recovering
	// 84 recovering
	// 100 normal
}

func ExampleLimiterSet() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var classes breaker.LimiterSet // the zero value holds no keys
	if err := classes.Set(map[string]breaker.LimiterSettings{"batch": {QPS: 1, Burst: 1, Now: clock}}); err != nil {
		panic(err)
	}
	fmt.Println("batch:", classes.Allow(context.Background(), "batch"))
	fmt.Println("batch again:", classes.Allow(context.Background(), "batch") != nil)
	// A reload that keeps the key keeps its bucket: no fresh token.
	_ = classes.Set(map[string]breaker.LimiterSettings{"batch": {QPS: 1, Burst: 1, Now: clock}})
	fmt.Println("after reload:", classes.Allow(context.Background(), "batch") != nil)
	fmt.Println("interactive:", classes.Allow(context.Background(), "interactive")) // no bucket of its own
	// Output:
	// batch: <nil>
	// batch again: true
	// after reload: true
	// interactive: <nil>
}
