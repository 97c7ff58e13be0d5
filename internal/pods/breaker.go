package pods

import (
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
)

// Breaker fits a pod's error breaker to Gate.
func Breaker(b *breaker.ErrorBreaker) Gate { return errorBreaker{b} }

type errorBreaker struct{ b *breaker.ErrorBreaker }

func (g errorBreaker) Allow() (func(Result), error) {
	done, err := g.b.Allow()
	if err != nil {
		return nil, err
	}
	return func(r Result) {
		switch r {
		case Success:
			done(breaker.Success)
		case Failure:
			done(breaker.Failure)
		default:
			done(breaker.Excluded)
		}
	}, nil
}

// OpenRemaining is how long the open breaker still refuses.
func (g errorBreaker) OpenRemaining() time.Duration { return g.b.OpenRemaining() }

// State maps the error breaker onto what dispatch needs.
func (g errorBreaker) State() GateState {
	switch st, ok := g.b.Admits(); {
	case st == breaker.Open:
		return GateOpen
	case !ok:
		return GateProbing
	}
	return GateReady
}
