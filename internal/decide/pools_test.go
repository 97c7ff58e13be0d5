package decide

import (
	"slices"
	"sync"
	"testing"
)

// poolLog records what the core tells its PoolCounter, in order.
type poolLog struct {
	mu     sync.Mutex
	events []string
}

func (p *poolLog) add(e string) { p.mu.Lock(); defer p.mu.Unlock(); p.events = append(p.events, e) }

func (p *poolLog) Arrived(model string)         { p.add("arrived " + model) }
func (p *poolLog) Refused(model, reason string) { p.add("refused " + model + " " + reason) }
func (p *poolLog) Waiting(model string, delta int) {
	if delta > 0 {
		p.add("waits " + model)
	} else {
		p.add("stops waiting " + model)
	}
}

// TestPoolCounts: the core tells Options.Pools of each request's arrival
// in its model's pool, its wait for a slot and its refusal, by the core or
// by its pod; a request refused before it is routed arrives nowhere.
func TestPoolCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		setup  func(r *rig)
		body   string
		subset []string // the gateway's subset hint; nil: none
		end    *End     // Finish an admitted request with it
		want   []string
	}{
		{name: "served", body: chatBody, end: &End{Status: 200},
			want: []string{"arrived m", "waits m", "stops waiting m"}},
		{name: "the pod's own 503", body: chatBody, end: &End{Status: 503},
			want: []string{"arrived m", "waits m", "stops waiting m", "refused m upstream_overloaded"}},
		{name: "queue full", body: chatBody, setup: func(r *rig) { r.adm.err = ErrQueueFull },
			want: []string{"arrived m", "waits m", "stops waiting m", "refused m queue_full"}},
		{name: "every pod critical", body: chatBody, setup: func(r *rig) { r.lv.set("a", true); r.lv.set("b", true) },
			want: []string{"arrived m", "refused m overloaded"}},
		{name: "every pod critical, observe mode: nothing refused", body: chatBody,
			setup: func(r *rig) { r.lv.set("a", true); r.lv.set("b", true); r.opts.Policy.Observe = true },
			end:   &End{Status: 200}, want: []string{"arrived m", "waits m", "stops waiting m"}},
		{name: "rate limited (the counter keeps the capacity causes)", body: chatBody,
			setup: func(r *rig) { r.opts.Limiter = limiterFunc(func(string) error { return limitErr{} }) },
			want:  []string{"arrived m", "refused m rate_limited"}},
		{name: "no pod in the gateway's subset hint", body: chatBody, subset: []string{"10.9.9.9:8000"},
			want: []string{"arrived m", "refused m no_upstream"}},
		{name: "a model no pod serves arrives nowhere", body: `{"model":"x","messages":[]}`,
			setup: func(r *rig) { r.pods[0].Models, r.pods[1].Models = []string{"m"}, []string{"m"} }},
		{name: "a bad body arrives nowhere", body: `{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, Policy{})
			log := &poolLog{}
			r.opts.Pools = log
			if tt.setup != nil {
				tt.setup(r)
			}
			r.build()
			in := chat(tt.body, nil)
			in.Subset = tt.subset
			req, res := r.decide(t.Context(), in)
			if res.Admitted != nil {
				end := End{Status: 200}
				if tt.end != nil {
					end = *tt.end
				}
				r.finish(req, res.Admitted, end)
			}
			if !slices.Equal(log.events, tt.want) {
				t.Errorf("the pool counter heard %q, want %q", log.events, tt.want)
			}
			r.settled()
		})
	}
}
