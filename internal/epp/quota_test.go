package epp

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// The picker charges a request's estimate to its quotas when it picks, trues
// it up from the usage the response's body carries when the exchange ends,
// and refuses a request with no room as an ImmediateResponse 429
// quota_exceeded with Retry-After, as the proxy does.
func TestCoreQuota(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q, err := quota.New(quota.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 1000}}}); err != nil {
			t.Fatal(err)
		}
		used := func() int64 { return q.Snapshot().Models["m"].Minute.Used }
		cp := newCorePickerWith(t, 4, breaker.LimiterSettings{}, decide.Policy{Quotas: true}, q)
		e := cp.open()
		chat(e)
		e.pick(strconv.Itoa(len(chatBody)))
		estimate := used()
		if estimate <= 17 {
			t.Fatalf("charged %d at the pick, want the estimate (above the usage's 17)", estimate)
		}
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(false, ":status", "200", "content-type", "text/event-stream"))
		e.recv()
		e.send(respBody(sseUsage, false))
		e.body(responseSide, len(sseUsage), false)
		e.send(respBody(sseDone, true))
		e.body(responseSide, len(sseDone), true)
		e.closed()
		cp.settled(t)
		if got := used(); got != 17 {
			t.Fatalf("used after the exchange = %d, want the usage's 7 + 10", got)
		}
		// One token short of room for a second estimate.
		if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"m": {PerMinute: 17 + estimate - 1}}}); err != nil {
			t.Fatal(err)
		}
		e = cp.open()
		chat(e)
		ir := e.refused()
		ra, _ := strconv.Atoi(header(ir, "retry-after"))
		if ir.GetStatus().GetCode() != 429 || header(ir, "x-gatekeeper-reason") != "quota_exceeded" || ra < 1 || ra > 61 {
			t.Fatalf("over quota: %v %q Retry-After %q, want 429 quota_exceeded within a minute", ir.GetStatus().GetCode(),
				header(ir, "x-gatekeeper-reason"), header(ir, "retry-after"))
		}
		if cp.rec.get(decide.OutcomeQuotaExceeded) != 1 {
			t.Errorf("quota_exceeded outcomes = %d, want 1", cp.rec.get(decide.OutcomeQuotaExceeded))
		}
		time.Sleep(61 * time.Second) // the bubble's clock: the first charge leaves the window
		e = cp.open()
		chat(e)
		e.pick(strconv.Itoa(len(chatBody)))
		e.body(requestSide, len(chatBody), true)
		e.send(respHeaders(true, ":status", "200"))
		e.recv()
		e.closed()
		cp.settled(t)
	})
}
