package decide_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// noPressure says no pod is under memory pressure.
type noPressure struct{}

func (noPressure) Critical(string) bool { return false }
func (noPressure) Degraded(string) bool { return false }

// A front hands the core what it read of a request, forwards an admitted
// one to the pod it names and tells the core how the exchange ended; a
// refusal it renders as it is.
func Example() {
	q, _ := queue.New(queue.Settings{})
	q.SetWindow("pod-0", 1)
	reg := pods.New(noPressure{})
	u, _ := url.Parse("http://10.0.0.1:8000")
	reg.Set([]pods.Pod{{Name: "pod-0", URL: u}})
	q.SetAvailability(reg.Availability)
	core, _ := decide.New(decide.Options{Registry: reg, Admission: decide.Queue(q),
		OnPodRefused: func(pod string) { fmt.Println("the controller hears that", pod, "refused") }})

	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`)
	in := decide.In{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{}, Body: body}
	var req decide.Request // the front keeps it until Finish
	res := core.Decide(context.Background(), &req, in)
	fmt.Println("admitted on", res.Admitted.Pod.Name, "at", res.Admitted.Pod.Endpoint())
	end := core.Finish(&req, res.Admitted, decide.End{Status: 503}) // the pod's own 503
	res.Admitted.Slot.Release()
	fmt.Println("outcome", end.Outcome)

	core.Drain()
	res = core.Decide(context.Background(), new(decide.Request), in)
	fmt.Println(res.Refusal.Status, res.Refusal.Reason, "Retry-After:", decide.RetryAfterSeconds(res.Refusal.RetryAfter))
	// Output:
	// admitted on pod-0 at 10.0.0.1:8000
	// the controller hears that pod-0 refused
	// outcome upstream_overloaded
	// 503 draining Retry-After: 2
}
