package advise

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
	"github.com/gatekeeper-dev/gatekeeper/sim/replay"
)

func (s Settings) withDefaults() Settings {
	if s.Utilizations == nil {
		s.Utilizations = []float64{0.8, 0.9}
	}
	if s.MaxNumSeqs == nil {
		s.MaxNumSeqs = []int{0}
	}
	if s.Traffic.BurstQPS == 0 {
		s.Traffic.BurstQPS = s.Traffic.SteadyQPS
	}
	if s.Horizon == 0 {
		s.Horizon = 15 * time.Minute
	}
	if s.Traffic.BurstEvery == 0 {
		s.Traffic.BurstEvery = min(30*time.Minute, s.Horizon)
	}
	if s.Traffic.BurstLength == 0 {
		s.Traffic.BurstLength = min(5*time.Minute, s.Traffic.BurstEvery)
	}
	if s.Traffic.Classes == nil {
		s.Traffic.Classes = replay.DefaultClasses()
	}
	if s.SLOTarget == 0 {
		s.SLOTarget = 0.99
	}
	if s.MaxPods == 0 {
		s.MaxPods = 64
	}
	if s.Parallel == 0 {
		s.Parallel = runtime.GOMAXPROCS(0)
	}
	return s
}

func (s Settings) validate() error {
	var errs []error
	if len(s.GPUs) == 0 {
		errs = append(errs, errors.New("advise: Settings.GPUs is empty"))
	}
	if s.Model == (sim.Model{}) {
		errs = append(errs, errors.New("advise: Settings.Model is not set"))
	}
	for _, u := range s.Utilizations {
		if !(u > 0 && u <= 1) {
			errs = append(errs, fmt.Errorf("advise: Settings.Utilizations: %v, want (0, 1]", u))
		}
	}
	for _, n := range s.MaxNumSeqs {
		if n < 0 {
			errs = append(errs, fmt.Errorf("advise: Settings.MaxNumSeqs: %d, want ≥ 0", n))
		}
	}
	if len(s.Utilizations) == 0 || len(s.MaxNumSeqs) == 0 {
		errs = append(errs, errors.New("advise: Settings.Utilizations and MaxNumSeqs need a value each"))
	}
	t := s.Traffic
	if !(t.SteadyQPS > 0) || !(t.BurstQPS > 0) || t.BurstEvery <= 0 || t.BurstLength < 0 || t.BurstLength > t.BurstEvery {
		errs = append(errs, fmt.Errorf("advise: Settings.Traffic: steady %v and burst %v QPS must be > 0, burst length %v ≤ burst every %v",
			t.SteadyQPS, t.BurstQPS, t.BurstLength, t.BurstEvery))
	}
	for _, c := range t.Classes {
		if !c.Valid() || c.Prompt.Max+c.MaxTokens > s.Model.MaxModelLen {
			errs = append(errs, fmt.Errorf("advise: Settings.Traffic.Classes %q: prompt %d-%d + max_tokens %d must be valid and fit max_model_len %d",
				c.Name, c.Prompt.Min, c.Prompt.Max, c.MaxTokens, s.Model.MaxModelLen))
		}
	}
	if s.Horizon < 0 {
		errs = append(errs, fmt.Errorf("advise: Settings.Horizon = %v, want > 0", s.Horizon))
	} else if t.BurstQPS != t.SteadyQPS && t.BurstEvery > s.Horizon {
		errs = append(errs, fmt.Errorf("advise: Settings.Horizon = %v holds no burst (one every %v, closing its period)", s.Horizon, t.BurstEvery))
	}
	if !(s.SLOTarget > 0 && s.SLOTarget <= 1) {
		errs = append(errs, fmt.Errorf("advise: Settings.SLOTarget = %v, want (0, 1]", s.SLOTarget))
	}
	if s.MaxOOMs < 0 || s.MaxPods < 1 || s.Parallel < 1 {
		errs = append(errs, fmt.Errorf("advise: Settings.MaxOOMs = %d, MaxPods = %d, Parallel = %d: want ≥ 0, ≥ 1, ≥ 1", s.MaxOOMs, s.MaxPods, s.Parallel))
	}
	return errors.Join(errs...)
}
