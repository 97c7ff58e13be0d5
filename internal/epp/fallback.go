package epp

import (
	"context"
	"log/slog"
	"slices"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// MaxFallbacks bounds CoreOptions.Fallbacks, and the pods besides the pick
// whose scores are written.
const MaxFallbacks = 8

// scorer is what the core's slot may say of its grant (queue.Slot.Score):
// the score that chose its pod.
type scorer interface {
	Score() (score float64, ok bool)
}

// endpoints returns the pick's endpoint list, primary (the pod holding the
// slot) first, then up to CoreOptions.Fallbacks other pods that could take
// the request now, best first (decide.Core.Ranked: available, with room,
// one it may use; never one under critical pressure or with an open error
// breaker); and, with CoreOptions.Scores, the scores of the primary and of
// up to MaxFallbacks such pods. A primary whose queue scores nothing (no
// routing scorers) gives no scores. The list is built on dst's array
// when it has room.
func (d *coreDecider) endpoints(dst []string, req *decide.Request, adm *decide.Admitted, primary string) ([]string, []EndpointScore) {
	fallbacks := min(max(d.o.Fallbacks, 0), MaxFallbacks)
	n := fallbacks
	var scores []EndpointScore
	if s, ok := adm.Slot.(scorer); ok && d.o.Scores {
		if v, scored := s.Score(); scored {
			n = MaxFallbacks
			scores = make([]EndpointScore, 1, 1+n)
			scores[0] = EndpointScore{Endpoint: primary, Score: v}
		}
	}
	endpoints := append(slices.Grow(dst[:0], 1+fallbacks), primary)
	if n == 0 {
		return endpoints, nil
	}
	reg := d.o.Core.Registry()
	for _, c := range d.o.Core.Ranked(make([]queue.Candidate, 0, n), req, adm, n) {
		m, ok := reg.Get(c.Upstream)
		if !ok {
			continue // removed since it was ranked
		}
		ep := m.Endpoint()
		if ep == "" || slices.Contains(endpoints, ep) {
			continue
		}
		if len(endpoints) <= fallbacks {
			endpoints = append(endpoints, ep)
		}
		if scores != nil {
			scores = append(scores, EndpointScore{Endpoint: ep, Score: c.Score})
		}
	}
	return endpoints, scores
}

// servedBy returns the admission to finish the request with. The gateway
// goes to a fallback only when it could not use the pick (its retry policy
// retried), so a request served there still counts against the pick's slot
// and its outcome, usage and status are the request's, but the pick's
// error breaker hears a failure: it did not serve the request. An
// endpoint the pick did not name is a misconfigured gateway: warned of,
// and counted as the pick's.
func (d *coreDecider) servedBy(adm *decide.Admitted, endpoints []string, served string) *decide.Admitted {
	switch {
	case served == "" || served == endpoints[0]:
		return adm
	case slices.Contains(endpoints[1:], served):
		d.o.Logger.LogAttrs(context.Background(), slog.LevelDebug, "the gateway served a fallback",
			slog.String("picked", endpoints[0]), slog.String("served", served), slog.String("upstream", adm.Pod.Name))
		fell := *adm
		fell.Done = func(pods.Result) { adm.Done(pods.Failure) }
		return &fell
	}
	d.o.Logger.LogAttrs(context.Background(), slog.LevelWarn, "the gateway served another endpoint than the one picked",
		slog.String("picked", endpoints[0]), slog.String("served", served), slog.String("upstream", adm.Pod.Name))
	return adm
}
