package replay

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// SLO is what a served request must meet to count toward SLO goodput (the
// goodput of DistServe, OSDI '24: tokens of requests that met their
// time-to-first-token and time-per-output-token deadlines): what a user
// feels, where raw goodput counts an answer after a minute like one after a
// second. The zero value selects the defaults.
type SLO struct {
	// TTFT is the time-to-first-token deadline per trace class, from the
	// request's arrival (queueing included). A class not listed takes
	// DefaultTTFT. Nil means short 2s, long 10s.
	TTFT map[string]time.Duration
	// DefaultTTFT is the deadline of classes TTFT does not list. 0 means 10s.
	DefaultTTFT time.Duration
	// TPOT is the deadline on the mean time per output token after the
	// first. 0 means 100ms.
	TPOT time.Duration
}

func (s SLO) withDefaults() SLO {
	if s.TTFT == nil {
		s.TTFT = map[string]time.Duration{"short": 2 * time.Second, "long": 10 * time.Second}
	}
	if s.DefaultTTFT == 0 {
		s.DefaultTTFT = 10 * time.Second
	}
	if s.TPOT == 0 {
		s.TPOT = 100 * time.Millisecond
	}
	return s
}

// met reports whether a request of class, arrived at arrival and served as
// seq, met both deadlines.
func (s SLO) met(class string, arrival time.Duration, seq *sim.Seq) bool {
	if seq.FirstTokenAt()-arrival > s.ttft(class) {
		return false
	}
	if n := seq.Generated(); n > 1 {
		return (seq.FinishedAt()-seq.FirstTokenAt())/time.Duration(n-1) <= s.TPOT
	}
	return true
}

// ttft is class's time-to-first-token deadline.
func (s SLO) ttft(class string) time.Duration {
	if d, ok := s.TTFT[class]; ok {
		return d
	}
	return s.DefaultTTFT
}
