package epp

import (
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// The tenant header reaches the queue's fair share: a light tenant that
// comes to a queue full of a heavy tenant's waiters is served as soon as
// its counter is the least, not behind every one of them (FIFO would put
// it fourth).
func TestCoreFairShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pol := decide.Policy{Fair: &decide.Fairness{TenantHeader: "x-tenant"}}
		cp := newCorePicker(t, 1, breaker.LimiterSettings{}, pol) // two pods, one slot each
		send := func(tenant string) *envoy {
			e := cp.open()
			e.send(reqHeaders(false, "content-type", "application/json", "x-tenant", tenant))
			e.send(reqBody(chatBody, true))
			return e
		}
		var running []*envoy
		for range 2 {
			e := send("heavy")
			e.pick(strconv.Itoa(len(chatBody)))
			running = append(running, e)
		}
		// Each waits before the next comes: the picker runs every stream on
		// its own goroutine, so without the wait the arrival order (a tie's
		// break) would be the scheduler's.
		var heavy []*envoy
		for i := range 3 {
			heavy = append(heavy, send("heavy"))
			cp.waiting(t, i+1)
		}
		light := send("light")
		cp.waiting(t, 4)
		finish := func(e *envoy) {
			e.body(requestSide, len(chatBody), true)
			e.send(respHeaders(true, ":status", "200"))
			e.recv()
			e.closed()
		}
		// Light's counter was lifted to heavy's: they tie, and heavy's head
		// came first. Then light is the least.
		finish(running[0])
		heavy[0].pick(strconv.Itoa(len(chatBody)))
		finish(running[1])
		light.pick(strconv.Itoa(len(chatBody)))
		synctest.Wait()
		if n := cp.q.Stats().Length; n != 2 {
			t.Fatalf("%d waiting after two slots freed, want heavy's other two", n)
		}
		for _, e := range append([]*envoy{heavy[0], light}, heavy[1:]...) {
			if e != heavy[0] && e != light {
				e.pick(strconv.Itoa(len(chatBody)))
			}
			finish(e)
		}
		cp.settled(t)
	})
}
