package breaker

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// tenantStep advances the fake clock, then asks AllowTenantAt for one
// request of tenant (client: its client key) at the clock's time: want is
// "ok" or the refusing scope, wait the refusal's exact wait. An update, if
// set, is applied first (a reload).
type tenantStep struct {
	advance time.Duration
	update  *LimiterSettings
	tenant  string
	client  string
	want    string
	wait    time.Duration
	tenants int // if > 0, Tenants() after the call
}

func runTenantSteps(t *testing.T, s LimiterSettings, steps []tenantStep) {
	t.Helper()
	clk := newFakeClock()
	s.Now = clk.Now
	l, err := NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if st.update != nil {
			u := *st.update
			if err := l.Update(u); err != nil {
				t.Fatalf("step %d: Update: %v", i, err)
			}
		}
		err := l.AllowTenantAt(clk.Now(), st.client, st.tenant)
		got, wait := "ok", time.Duration(0)
		var le *LimitError
		if errors.As(err, &le) {
			got, wait = le.Scope.String(), le.Wait
		} else if err != nil {
			t.Fatalf("step %d: AllowTenantAt(%q) = %v, want nil or *LimitError", i, st.tenant, err)
		}
		if got != st.want || wait != st.wait {
			t.Errorf("step %d: AllowTenantAt(%q) = %s, wait %v; want %s, wait %v", i, st.tenant, got, wait, st.want, st.wait)
		}
		if st.tenants > 0 && l.Tenants() != st.tenants {
			t.Errorf("step %d: Tenants() = %d, want %d", i, l.Tenants(), st.tenants)
		}
	}
}

// repeat is n copies of st.
func repeat(n int, st tenantStep) []tenantStep {
	out := make([]tenantStep, n)
	for i := range out {
		out[i] = st
	}
	return out
}

func steps(parts ...[]tenantStep) []tenantStep {
	var out []tenantStep
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestTenantSharesSteps(t *testing.T) {
	t.Parallel()
	ok := func(tenant string) tenantStep { return tenantStep{tenant: tenant, want: "ok"} }
	tests := []struct {
		name  string
		s     LimiterSettings
		steps []tenantStep
	}{{
		// heavy: 5 QPS, burst 5 of the global 10/10. Its refusals take
		// nothing from the global bucket, so light gets the other 5.
		name: "the heavy tenant at its cap is refused while the light one passes",
		s:    LimiterSettings{QPS: 10, Burst: 10, Shares: map[string]TenantShare{"heavy": {Max: 0.5}}},
		steps: steps(repeat(5, ok("heavy")), []tenantStep{
			{tenant: "heavy", want: "tenant", wait: 200 * time.Millisecond},
			{tenant: "heavy", want: "tenant", wait: 200 * time.Millisecond},
		}, repeat(5, ok("light")), []tenantStep{
			{tenant: "light", want: "global", wait: 100 * time.Millisecond},
			{advance: 100 * time.Millisecond, tenant: "heavy", want: "tenant", wait: 100 * time.Millisecond},
			{tenant: "light", want: "ok"},
			{advance: 100 * time.Millisecond, tenant: "heavy", want: "ok"},
		}),
	}, {
		// light keeps 2 QPS, burst 2; the others share 8 QPS, burst 8.
		name: "a min share cannot be drained",
		s:    LimiterSettings{QPS: 10, Burst: 10, Shares: map[string]TenantShare{"light": {Min: 0.2}}},
		steps: steps(repeat(8, ok("heavy")), []tenantStep{
			{tenant: "heavy", want: "global", wait: 125 * time.Millisecond},
			ok("light"), ok("light"),
			// Its reservation empty too: the sooner of the two refills.
			{tenant: "light", want: "global", wait: 125 * time.Millisecond},
			{advance: 125 * time.Millisecond, tenant: "heavy", want: "ok"},
			{advance: 375 * time.Millisecond, tenant: "heavy", want: "ok"},
			{tenant: "heavy", want: "ok"},
			{tenant: "heavy", want: "ok"},
			{tenant: "heavy", want: "global", wait: 125 * time.Millisecond},
			ok("light"), // 500 ms refilled one token of its own
		}),
	}, {
		name: "unlisted tenants are capped each on its own; a listed one without a share is not",
		s: LimiterSettings{QPS: 4, Burst: 4, DefaultMaxShare: 0.5,
			Shares: map[string]TenantShare{"named": {}}},
		steps: steps([]tenantStep{ok("sha256:a"), ok("sha256:a"),
			{tenant: "sha256:a", want: "tenant", wait: 500 * time.Millisecond, tenants: 1},
			ok(""), ok(""), // requests without a tenant are one tenant
			{tenant: "", want: "tenant", wait: 500 * time.Millisecond, tenants: 2},
			{advance: time.Second, tenant: "named", want: "ok"},
			{tenant: "named", want: "ok"}, {tenant: "named", want: "ok"}, {tenant: "named", want: "ok"},
			{tenant: "named", want: "global", wait: 250 * time.Millisecond},
		}),
	}, {
		name: "a client's refusal comes first and takes nothing from its tenant",
		s: LimiterSettings{QPS: 10, Burst: 10, ClientQPS: 1, ClientBurst: 1,
			Shares: map[string]TenantShare{"t": {Max: 0.2}}},
		steps: []tenantStep{
			{tenant: "t", client: "a", want: "ok"},
			{tenant: "t", client: "a", want: "client", wait: time.Second},
			{tenant: "t", client: "b", want: "ok"},
			{tenant: "t", client: "c", want: "tenant", wait: 500 * time.Millisecond},
			{tenant: "u", client: "c", want: "ok"}, // c's token was given back
		},
	}, {
		name: "min shares that sum to 1 leave nothing to the others",
		s:    LimiterSettings{QPS: 2, Burst: 4, Shares: map[string]TenantShare{"a": {Min: 0.5}, "b": {Min: 0.5}}},
		steps: []tenantStep{
			{tenant: "c", want: "global", wait: 2 * time.Second},
			ok("a"), ok("a"),
			{tenant: "a", want: "global", wait: time.Second},
			ok("b"),
		},
	}, {
		name: "without shares the tenant is ignored",
		s:    LimiterSettings{QPS: 1, Burst: 2, DefaultMaxShare: 1},
		steps: []tenantStep{ok("a"), ok("a"),
			{tenant: "b", want: "global", wait: time.Second, tenants: 0},
		},
	}, {
		name:  "without a global limit nothing is shared",
		s:     LimiterSettings{Shares: map[string]TenantShare{"a": {Max: 0.1}}, DefaultMaxShare: 0.1},
		steps: []tenantStep{ok("a"), ok("a"), ok("a"), ok("b"), ok("b")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTenantSteps(t, tt.s, tt.steps)
		})
	}
}

func TestTenantRetryAfterIsTheRefusingBucketsWait(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	l, err := NewLimiter(LimiterSettings{QPS: 1, Burst: 4, Shares: map[string]TenantShare{"h": {Max: 0.25}}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AllowTenant(t.Context(), "", "h"); err != nil {
		t.Fatal(err)
	}
	var le *LimitError
	if err := l.AllowTenant(t.Context(), "", "h"); !errors.As(err, &le) || le.Scope != scopeTenant || le.Wait != 4*time.Second || le.RetryAfter() != 4*time.Second {
		t.Fatalf("AllowTenant at the cap = %v, want the cap's wait of 4s", err)
	}
	if !strings.Contains(le.Error(), "(tenant)") {
		t.Errorf("Error() = %q, want the scope named", le.Error())
	}
}

func TestTenantCapsAreBounded(t *testing.T) {
	t.Parallel()
	s := LimiterSettings{QPS: 100, Burst: 100, DefaultMaxShare: 0.5, MaxTenants: 2, IdleAfter: time.Minute}
	runTenantSteps(t, s, []tenantStep{
		{tenant: "a", want: "ok", tenants: 1},
		{tenant: "b", want: "ok", tenants: 2},
		{tenant: "c", want: "ok", tenants: 2}, // a, the least recently used, goes
		{advance: 30 * time.Second, tenant: "c", want: "ok", tenants: 2},
		{advance: 30 * time.Second, tenant: "d", want: "ok", tenants: 2}, // b idle a minute: evicted
		{advance: 2 * time.Minute, tenant: "e", want: "ok", tenants: 1},
	})
}

func TestTenantReloadKeepsBuckets(t *testing.T) {
	t.Parallel()
	s := LimiterSettings{QPS: 10, Burst: 10, DefaultMaxShare: 0.2,
		Shares: map[string]TenantShare{"heavy": {Max: 0.5}, "light": {Min: 0.2}}}
	same := s
	capped := s
	capped.Shares = map[string]TenantShare{"heavy": {Max: 0.3}, "light": {Min: 0.2}}
	off := LimiterSettings{QPS: 10, Burst: 10}
	ok := func(tenant string) tenantStep { return tenantStep{tenant: tenant, want: "ok"} }
	runTenantSteps(t, s, steps(repeat(5, ok("heavy")), repeat(2, ok("light")), repeat(2, ok("other")),
		[]tenantStep{
			// Reloaded unchanged: every bucket keeps what it holds.
			{update: &same, tenant: "heavy", want: "tenant", wait: 200 * time.Millisecond},
			{tenant: "other", want: "tenant", wait: 500 * time.Millisecond},
			// light: its reservation is empty, 1 token left in the common part.
			ok("light"),
			{tenant: "light", want: "global", wait: 125 * time.Millisecond},
			// A smaller cap: from now, at 3 QPS, still empty.
			{update: &capped, tenant: "heavy", want: "tenant", wait: 333333333},
			// Shares off: the global bucket is whole again, and as empty.
			{update: &off, tenant: "light", want: "global", wait: 100 * time.Millisecond},
			{advance: 100 * time.Millisecond, tenant: "heavy", want: "ok", tenants: 0},
			// On again: new buckets start full; the common part has what the
			// global bucket held.
			{advance: 200 * time.Millisecond, update: &same, tenant: "light", want: "ok"},
			ok("light"),
			// The common part holds the global bucket's 200 ms of refill at 10 QPS.
			ok("light"), ok("light"),
			{tenant: "light", want: "global", wait: 125 * time.Millisecond},
		}))
}

func TestTenantSharesRejectInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s     LimiterSettings
		field string
	}{
		{LimiterSettings{QPS: 1, DefaultMaxShare: 1.5}, "DefaultMaxShare"},
		{LimiterSettings{QPS: 1, MaxTenants: -1}, "MaxTenants"},
		{LimiterSettings{QPS: 1, Shares: map[string]TenantShare{"a": {Min: -0.1}}}, `Shares["a"]`},
		{LimiterSettings{QPS: 1, Shares: map[string]TenantShare{"a": {Max: 2}}}, `Shares["a"]`},
		{LimiterSettings{QPS: 1, Shares: map[string]TenantShare{"a": {Min: 0.5, Max: 0.4}}}, `Shares["a"].Min`},
		{LimiterSettings{QPS: 1, Shares: map[string]TenantShare{"a": {Min: 0.6}, "b": {Min: 0.6}}}, "Mins sum"},
	}
	for _, tt := range tests {
		if _, err := NewLimiter(tt.s); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("NewLimiter(%+v) = %v, want an error naming %s", tt.s, err, tt.field)
		}
	}
}

// TestTenantSharesConcurrent runs requests of several tenants beside
// reloads, for the race detector, and checks that no more pass than the
// global bucket holds (the clock stands still: no refill).
func TestTenantSharesConcurrent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	s := LimiterSettings{QPS: 100, Burst: 100, DefaultMaxShare: 0.3, MaxTenants: 3,
		Shares: map[string]TenantShare{"a": {Min: 0.2, Max: 0.5}}, Now: clk.Now}
	l, err := NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				tenant := []string{"a", "b", "c", "d", "e"}[(g+i)%5]
				if l.AllowTenant(t.Context(), "", tenant) == nil {
					mu.Lock()
					passed++
					mu.Unlock()
				}
				if i%10 == 0 {
					_ = l.Update(s)
				}
			}
		})
	}
	wg.Wait()
	if passed > 100 {
		t.Errorf("%d passed, want at most the global bucket's 100", passed)
	}
}
