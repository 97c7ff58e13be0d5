package scale

import (
	"math"
	"strings"
	"testing"
	"time"
)

// step is one interval of a step table: the clock advances by adv, the
// estimator observes in (or, with hold, answers Hold), and the row says
// what must hold.
type step struct {
	adv             time.Duration
	in              Input
	hold            bool // call Hold(now, in.Pods) instead of ObserveAt
	desired, rec    int
	forecast        *float64 // checked when set
	wantHold        string
	podRate, demand float64 // checked when > 0
}

func TestEstimatorSteps(t *testing.T) {
	t.Parallel()
	// Alpha = Beta = 1: the level is the last sample and the trend the last
	// change, so each forecast is x + 3·Δx (horizon 30s ÷ interval 10s).
	fast := Settings{Interval: 10 * time.Second, Horizon: 30 * time.Second, MinReplicas: 1, MaxReplicas: 8,
		Stabilization: time.Minute, TargetUtilization: 1, Alpha: 1, Beta: 1, PodRate: 10}
	s := 10 * time.Second
	in := func(arrivals float64, pods int) Input { return Input{Arrivals: arrivals, Pods: pods} }
	tests := []struct {
		name  string
		s     Settings
		steps []step
	}{
		{name: "ramp, plateau, hysteresis, burst, drop, queue", s: fast, steps: []step{
			{adv: s, in: in(20, 2), desired: 2, rec: 2, forecast: fc(20)},            // t=10: no trend yet
			{adv: s, in: in(30, 2), desired: 6, rec: 6, forecast: fc(60)},            // t=20: ramp of 10/interval: 30+3·10, up at once
			{adv: s, in: in(40, 6), desired: 7, rec: 7, forecast: fc(70)},            // t=30
			{adv: s, in: in(40, 7), desired: 7, rec: 4, forecast: fc(40)},            // t=40: plateau; 7 is held
			{adv: 4 * s, in: in(40, 7), desired: 7, rec: 4, forecast: fc(40)},        // t=80: 7 (t=30) still within the minute
			{adv: s, in: in(40, 7), desired: 4, rec: 4, forecast: fc(40)},            // t=90: lower for a whole window: down
			{adv: s, in: in(200, 4), desired: 8, rec: 8, forecast: fc(680)},          // t=100: burst; 68 clamped to max
			{adv: s, in: in(0, 8), desired: 8, rec: 1, forecast: fc(0)},              // t=110: drop; forecast never negative
			{adv: s, in: Input{Queue: 330, Pods: 8}, desired: 8, rec: 2, demand: 11}, // t=120: the queue drained in the horizon: 330/30 = 11/s
			{adv: 4 * s, in: in(0, 8), desired: 2, rec: 1, forecast: fc(0)},          // t=160: 100's 8 out of the window, 120's 2 in
			{adv: 2 * s, in: in(0, 8), desired: 1, rec: 1, forecast: fc(0)},          // t=180
		}},
		{name: "no data holds the current count within the bounds", s: fast, steps: []step{
			{hold: true, in: in(0, 3), desired: 3, rec: 3, wantHold: noData},
			{hold: true, in: in(0, 0), desired: 1, rec: 1, wantHold: noData},
			{hold: true, in: in(0, 20), desired: 8, rec: 8, wantHold: noData},
		}},
		{name: "no pod rate holds until a pod serves", s: withRate(fast, 0), steps: []step{
			{adv: s, in: in(50, 3), desired: 3, rec: 3, wantHold: noPodRate, forecast: fc(50)},
			{adv: s, in: Input{Arrivals: 50, Pods: 3, PodRates: map[string]float64{"a": 5, "b": 10}}, desired: 5, rec: 5, podRate: 10},
			// saturated (a refusal): the busiest pod's rate is what a pod sustains now
			{adv: s, in: Input{Arrivals: 50, Pods: 3, Refused: map[string]float64{"queue_full": 5}, PodRates: map[string]float64{"a": 5}},
				desired: 8, rec: 8, podRate: 5},
			// not saturated: a lower rate is only demand, not capacity
			{adv: s, in: Input{Arrivals: 10, Pods: 3, PodRates: map[string]float64{"a": 2}}, desired: 8, rec: 1, podRate: 5}, // forecast 10 − 3·40 < 0
		}},
		{name: "target utilization leaves headroom", s: withTarget(fast, 0.5), steps: []step{
			{adv: s, in: in(20, 1), desired: 4, rec: 4, forecast: fc(20)},
		}},
		{name: "bounds", s: withBounds(fast, 2, 4), steps: []step{
			{adv: s, in: in(0, 1), desired: 2, rec: 2, forecast: fc(0)},
			{adv: s, in: in(1000, 2), desired: 4, rec: 4},
		}},
		{name: "no stabilization window follows at once", s: withStab(fast, time.Nanosecond), steps: []step{
			{adv: s, in: in(70, 1), desired: 7, rec: 7},
			{adv: s, in: in(70, 7), desired: 7, rec: 7},
			{adv: s, in: in(20, 7), desired: 1, rec: 1, forecast: fc(0)}, // 20 + 3·(−50) < 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := NewEstimator(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, st := range tt.steps {
				now = now.Add(st.adv)
				var got Estimate
				if st.hold {
					got = e.hold(now, st.in.Pods)
				} else {
					got = e.ObserveAt(now, st.in)
				}
				if got.Desired != st.desired || got.Recommended != st.rec || got.Hold != st.wantHold {
					t.Errorf("step %d: ObserveAt(%+v) = desired %d, recommended %d, hold %q; want %d, %d, %q",
						i, st.in, got.Desired, got.Recommended, got.Hold, st.desired, st.rec, st.wantHold)
				}
				if st.forecast != nil && math.Abs(got.Forecast-*st.forecast) > 1e-9 {
					t.Errorf("step %d: forecast = %v, want %v", i, got.Forecast, *st.forecast)
				}
				if st.podRate > 0 && got.PodRate != st.podRate {
					t.Errorf("step %d: pod rate = %v, want %v", i, got.PodRate, st.podRate)
				}
				if st.demand > 0 && math.Abs(got.Demand-st.demand) > 1e-9 {
					t.Errorf("step %d: demand = %v, want %v", i, got.Demand, st.demand)
				}
				if got.Current != st.in.Pods || !got.At.Equal(now) {
					t.Errorf("step %d: current %d at %v, want %d at %v", i, got.Current, got.At, st.in.Pods, now)
				}
			}
		})
	}
}

func fc(v float64) *float64 { return &v }

func withRate(s Settings, r float64) Settings       { s.PodRate = r; return s }
func withTarget(s Settings, u float64) Settings     { s.TargetUtilization = u; return s }
func withBounds(s Settings, lo, hi int) Settings    { s.MinReplicas, s.MaxReplicas = lo, hi; return s }
func withStab(s Settings, d time.Duration) Settings { s.Stabilization = d; return s }

func TestHoltDefaults(t *testing.T) {
	t.Parallel()
	h := holt{alpha: defaultAlpha, beta: defaultBeta}
	if h.Ready() || h.forecast(3) != 0 {
		t.Fatalf("zero Holt: ready %v, forecast %v; want false, 0", h.Ready(), h.forecast(3))
	}
	// 10, 20: level 0.5·20 + 0.5·10 = 15; trend 0.3·5 = 1.5; 3 ahead: 19.5.
	h.Add(10)
	h.Add(20)
	if got := h.forecast(3); math.Abs(got-19.5) > 1e-9 || h.Level() != 15 || math.Abs(h.Trend()-1.5) > 1e-9 {
		t.Errorf("Forecast(3) = %v (level %v, trend %v), want 19.5 (15, 1.5)", got, h.Level(), h.Trend())
	}
}

func TestSettingsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    Settings
		want string
	}{
		{Settings{Interval: time.Millisecond}, "scale: Interval"},
		{Settings{Interval: time.Minute, Horizon: time.Second}, "scale: Horizon"},
		{Settings{MinReplicas: 5, MaxReplicas: 2}, "scale: MinReplicas"},
		{Settings{Stabilization: -time.Second}, "scale: Stabilization"},
		{Settings{TargetUtilization: 1.5}, "scale: TargetUtilization"},
		{Settings{Alpha: -1}, "scale: Alpha"},
		{Settings{Beta: 2}, "scale: Beta"},
		{Settings{PodRate: -1}, "scale: PodRate"},
	}
	for _, tt := range tests {
		if _, err := NewEstimator(tt.s); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewEstimator(%+v) = %v, want an error naming %q", tt.s, err, tt.want)
		}
	}
	if _, err := NewEstimator(Settings{}); err != nil {
		t.Errorf("NewEstimator(zero) = %v, want the defaults", err)
	}
}
