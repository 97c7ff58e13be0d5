package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
	"testing/synctest"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

func TestTenant(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("Bearer acme"))
	acme := "sha256:" + hex.EncodeToString(sum[:])
	other := sha256.Sum256([]byte("Bearer other"))
	f := &Fairness{Tenants: map[string]Tenant{acme: {Name: "acme", Weight: 3}}}
	byHeader := &Fairness{TenantHeader: "X-Tenant"}
	tests := []struct {
		name       string
		f          *Fairness
		hdr        http.Header
		key        string
		wantTenant string
		wantWeight float64
	}{
		{name: "no fairness", f: nil, key: "Bearer acme", wantTenant: "", wantWeight: 0},
		{name: "named by the client key", f: f, key: "Bearer acme", wantTenant: "acme", wantWeight: 3},
		{name: "unnamed: a hash prefix, never the key", f: f, key: "Bearer other",
			wantTenant: "sha256:" + hex.EncodeToString(other[:8]), wantWeight: 1},
		{name: "no key: anonymous", f: f, key: "", wantTenant: "", wantWeight: 1},
		{name: "by header, not the key", f: byHeader, hdr: http.Header{"X-Tenant": {"Bearer acme"}}, key: "Bearer other",
			wantTenant: "sha256:" + hex.EncodeToString(sum[:8]), wantWeight: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.hdr
			if h == nil {
				h = http.Header{}
			}
			tenant, w := tt.f.tenant(h, tt.key)
			if tenant != tt.wantTenant || w != tt.wantWeight {
				t.Errorf("tenant() = %q, %v, want %q, %v", tenant, w, tt.wantTenant, tt.wantWeight)
			}
			if tenant != "" && unnamedTenant(tenant) != (tt.wantTenant != "acme") {
				t.Errorf("UnnamedTenant(%q) = %v", tenant, unnamedTenant(tenant))
			}
		})
	}
}

func TestService(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f              *Fairness
		prompt, output int64
		want           int64
	}{
		{f: nil, prompt: 100, output: 50, want: 0},
		{f: &Fairness{}, prompt: 100, output: 50, want: 200},                                             // 1 × 100 + 2 × 50
		{f: &Fairness{InputWeight: 0.5, OutputWeight: 3}, prompt: 101, output: 10, want: 81},             // ⌈50.5 + 30⌉
		{f: &Fairness{InputWeight: 1e6, OutputWeight: 1e6}, prompt: 1 << 62, output: 1, want: 1<<63 - 1}, // saturates
		{f: &Fairness{}, prompt: -5, output: -1, want: 0},
	}
	for _, tt := range tests {
		if got := tt.f.service(tt.prompt, tt.output); got != tt.want {
			t.Errorf("%+v.service(%d, %d) = %d, want %d", tt.f, tt.prompt, tt.output, got, tt.want)
		}
	}
}

// TestCoreFairShare: the tenant header reaches the queue's fair share: a
// light tenant that comes to a queue full of a heavy tenant's waiters is
// served as soon as its counter is the least, not behind every one of them
// (FIFO would put it fourth). On the real queue, two pods with one slot
// each. (From the picker's TestCoreFairShare.)
func TestCoreFairShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(queue.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		reg := pods.New(&levels{critical: map[string]bool{}})
		var ps []pods.Pod
		for _, name := range []string{"a", "b"} {
			u, _ := url.Parse("http://" + name + ":8000")
			ps = append(ps, pods.Pod{Name: name, URL: u})
			q.SetWindow(name, 1)
		}
		reg.Set(ps)
		q.SetAvailability(reg.Availability)
		core, err := New(Options{Registry: reg, Admission: Queue(q), Policy: Policy{Fair: &Fairness{TenantHeader: "x-tenant"}}})
		if err != nil {
			t.Fatal(err)
		}
		type call struct {
			req  Request
			done chan Result
			adm  *Admitted
		}
		send := func(tenant string) *call {
			c := &call{done: make(chan Result, 1)}
			go func() { c.done <- core.Decide(t.Context(), &c.req, chat(chatBody, http.Header{"X-Tenant": {tenant}})) }()
			return c
		}
		admitted := func(c *call) {
			t.Helper()
			synctest.Wait()
			select {
			case res := <-c.done:
				if res.Admitted == nil {
					t.Fatalf("Decide = %+v, want admitted", res)
				}
				c.adm = res.Admitted
			default:
				t.Fatal("still waiting, want admitted")
			}
		}
		waiting := func(want int) {
			t.Helper()
			synctest.Wait()
			if n := q.Stats().Length; n != want {
				t.Fatalf("%d waiting in the queue, want %d", n, want)
			}
		}
		finish := func(c *call) {
			core.Finish(&c.req, c.adm, End{Status: 200})
			c.adm.Slot.Release()
		}
		var running []*call
		for range 2 {
			c := send("heavy")
			admitted(c)
			running = append(running, c)
		}
		// Each waits before the next comes, so that the arrival order (a
		// tie's break) is not the scheduler's.
		var heavy []*call
		for i := range 3 {
			heavy = append(heavy, send("heavy"))
			waiting(i + 1)
		}
		light := send("light")
		waiting(4)
		// Light's counter was lifted to heavy's: they tie, and heavy's head
		// came first. Then light is the least.
		finish(running[0])
		admitted(heavy[0])
		finish(running[1])
		admitted(light)
		waiting(2) // heavy's other two
		finish(heavy[0])
		admitted(heavy[1])
		finish(light)
		admitted(heavy[2])
		finish(heavy[1])
		finish(heavy[2])
		synctest.Wait()
		if n := q.InFlight("a") + q.InFlight("b"); n != 0 || q.Stats().Length != 0 {
			t.Fatalf("%d slots held, %d waiting after every request ended", n, q.Stats().Length)
		}
	})
}
