package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
	"github.com/gatekeeper-dev/gatekeeper/control"
	"github.com/gatekeeper-dev/gatekeeper/proxy"
	"github.com/gatekeeper-dev/gatekeeper/queue"
)

// The thin adapters that fit the concrete packages to proxy's interfaces.
var (
	_ proxy.Limiter      = (*breaker.Limiter)(nil)
	_ proxy.ClassLimiter = (*breaker.LimiterSet)(nil)
	_ proxy.ModelLimiter = (*breaker.LimiterSet)(nil)
	_ proxy.Admission    = admission{}
	_ proxy.Gate         = gate{}
	_ proxy.Levels       = (*control.Controller)(nil)
)

// errDrainingQueue is what queued requests get when shutdown drains the queue.
var errDrainingQueue = fmt.Errorf("%w: shutting down", proxy.ErrDraining)

// admission fits *queue.Queue to proxy.Admission.
type admission struct{ q *queue.Queue }

func (a admission) Acquire(ctx context.Context, need proxy.Need, priority int, exclude []string) (proxy.Slot, error) {
	s, err := a.q.Acquire(ctx, queue.Request{Seqs: need.Seqs, Tokens: need.Tokens, Memory: need.Memory, Exclude: exclude,
		Priority: priority, Deadline: need.Deadline})
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, queue.ErrDeadline): // keeps the queue's RetryAfter
		return nil, fmt.Errorf("%w: %w", proxy.ErrDeadline, err)
	case errors.Is(err, queue.ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", proxy.ErrTooLarge, err)
	case errors.Is(err, queue.ErrFull):
		return nil, fmt.Errorf("%w: %w", proxy.ErrQueueFull, err)
	case errors.Is(err, queue.ErrClosed):
		return nil, fmt.Errorf("%w: %w", proxy.ErrDraining, err)
	case errors.Is(err, queue.ErrUnavailable):
		return nil, fmt.Errorf("%w: %w", proxy.ErrNoUpstream, err)
	case errors.Is(err, queue.ErrNoMemory):
		return nil, fmt.Errorf("%w: %w", proxy.ErrNoMemory, err)
	}
	return nil, err
}

func (a admission) TryAcquire(need proxy.Need, exclude []string) proxy.Slot {
	if s := a.q.TryAcquire(queue.Request{Seqs: need.Seqs, Tokens: need.Tokens, Memory: need.Memory, Exclude: exclude}); s != nil {
		return s
	}
	return nil // not a nil *queue.Slot in a non-nil interface
}

func (a admission) Dispatch() { a.q.Dispatch() }

// gate fits *breaker.ErrorBreaker to proxy.Gate.
type gate struct{ b *breaker.ErrorBreaker }

func (g gate) Allow() (func(proxy.Result), error) {
	done, err := g.b.Allow()
	if err != nil {
		return nil, err
	}
	return func(r proxy.Result) {
		switch r {
		case proxy.Success:
			done(breaker.Success)
		case proxy.Failure:
			done(breaker.Failure)
		default:
			done(breaker.Excluded)
		}
	}, nil
}

// OpenRemaining is how long the open breaker still refuses.
func (g gate) OpenRemaining() time.Duration { return g.b.OpenRemaining() }

// State maps the error breaker onto what the proxy needs at dispatch.
func (g gate) State() proxy.GateState {
	switch st, ok := g.b.Admits(); {
	case st == breaker.Open:
		return proxy.GateOpen
	case !ok:
		return proxy.GateProbing
	}
	return proxy.GateReady
}
