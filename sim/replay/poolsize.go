package replay

import (
	"fmt"
	"slices"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// serving are the pods with an engine to run: the pool's and those
// draining out of it.
func (r *runner) serving() []*pod {
	if len(r.draining) == 0 {
		return r.pods
	}
	return append(slices.Clone(r.pods), r.draining...)
}

// addPod brings a started pod into the pool: its engine, its window, its
// upstream in the controller and its sources in the monitor.
func (r *runner) addPod() {
	i := len(r.all)
	es := r.s.Engine
	if i < len(r.s.PodEngines) {
		es = r.s.PodEngines[i]
	}
	e, err := sim.New(es)
	if err != nil { // the first pod started with these settings
		panic(fmt.Sprintf("replay: a pod of the pool did not start: %v", err))
	}
	e.Advance(r.t)
	p := &pod{name: podName(i), gpu: fmt.Sprint(i), e: e, avail: true, wasAlive: true}
	r.pods = append(r.pods, p)
	r.all = append(r.all, p)
	r.peak = max(r.peak, len(r.pods))
	r.membership()
	st, _, _ := r.ctl.State(p.name)
	r.core.SetWindow(p.name, st.Limit)
	r.grant(r.core.Dispatch(r.now()))
}

// drainPod takes the pool's newest pod out: no new request goes there
// (its window is removed, the controller and the monitor forget it), and
// it stops once its requests have ended (stopDrained).
func (r *runner) drainPod() {
	p := r.pods[len(r.pods)-1]
	r.pods = r.pods[:len(r.pods)-1]
	r.draining = append(r.draining, p)
	r.core.RemoveWindow(p.name)
	if r.router != nil {
		r.router.Forget(p.name)
	}
	r.membership()
}

// accrue adds the pod time from the last change to t.
func (r *runner) accrue(t time.Duration) {
	r.gpuTime += (t - r.gpuAt) * time.Duration(len(r.pods)+len(r.draining)+r.starting())
	r.gpuAt = t
}

// stopDrained stops the draining pods that have nothing left to run.
func (r *runner) stopDrained() {
	r.accrue(r.t)
	r.draining = slices.DeleteFunc(r.draining, func(p *pod) bool {
		m := p.e.Metrics()
		return !m.Alive || m.Running+m.Waiting == 0
	})
}

// membership gives the controller and the monitor the pool's pods now.
func (r *runner) membership() {
	cs := controllerFor(r.slow, r.s.Memory, r.s.MaxInflightTokens, r.pods)
	cs.DeadlineOrder = r.s.DeadlineOrder
	if err := r.ctl.Update(cs); err != nil {
		panic(fmt.Sprintf("replay: the controller refused the pool's pods: %v", err)) // validated at start
	}
	mon, err := r.newMonitor()
	if err != nil {
		panic(fmt.Sprintf("replay: the monitor refused the pool's pods: %v", err))
	}
	r.mon = mon
}
