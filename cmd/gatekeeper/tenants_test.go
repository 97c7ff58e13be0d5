package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

const tenantPolicy = `
upstreams:
  - {name: pod, url: "http://pod.invalid:8000", max_inflight: 1, min_inflight: 1}
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
queue: {max_wait: 5m, ttft_deadline: 0s}
fairness: {tenant_header: X-Tenant}
`

// sendTenant starts a completion whose prompt is tag, for tenant.
func (r *slowRig) sendTenant(ctx context.Context, tag, tenant string) <-chan *httptest.ResponseRecorder {
	return r.sendWith(ctx, tag, "X-Tenant", tenant)
}

// TestTenantsShareTheQueue: the policy's fairness reaches the queue through
// the app's wiring (a light tenant's request passes a heavy tenant's older
// backlog, which FIFO alone would not let it do), /admin/state shows the
// tenants, and a reload that adds a quota refuses the next request over it
// with 429 quota_exceeded.
func TestTenantsShareTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, tenantPolicy)
		var all []<-chan *httptest.ResponseRecorder
		for _, tag := range []string{"heavy-1", "heavy-2", "heavy-3", "heavy-4"} {
			all = append(all, r.sendTenant(t.Context(), tag, "heavy"))
			synctest.Wait()
		}
		all = append(all, r.sendTenant(t.Context(), "light", "light"))
		synctest.Wait()
		ts := r.a.snapshot().Tenants
		if ts == nil || ts.Count != 2 || len(ts.List) != 2 || ts.List[0].Waiting != 3 || ts.List[1].Waiting != 1 ||
			!strings.HasPrefix(ts.List[0].Tenant, "sha256:") {
			t.Fatalf("/admin/state tenants = %+v, want heavy 3 waiting, light 1, both hashed", ts)
		}
		for range 5 {
			r.pod.release <- struct{}{}
			synctest.Wait()
		}
		for _, ch := range all {
			if rec := <-ch; rec.Code != 200 {
				t.Fatalf("request = %d %s", rec.Code, rec.Body.String())
			}
		}
		// Light's counter is lifted to heavy's: they tie and heavy's head came
		// first; then light is the least.
		if _, _, arrivals := r.pod.stats(); strings.Join(arrivals, ",") != "heavy-1,heavy-2,light,heavy-3,heavy-4" {
			t.Fatalf("the pod saw %v; the light tenant must pass the heavy one's older backlog", arrivals)
		}

		cfg, err := config.Parse([]byte(tenantPolicy + "quotas: {models: {m: {tokens_per_minute: 30}}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.a.policy.Set(cfg); err != nil {
			t.Fatal(err)
		}
		first := r.sendTenant(t.Context(), "within", "light") // an estimate of 18: within 30
		synctest.Wait()
		r.pod.release <- struct{}{}
		if rec := <-first; rec.Code != 200 {
			t.Fatalf("first request under the quota = %d %s", rec.Code, rec.Body.String())
		}
		rec := <-r.sendTenant(t.Context(), "over", "light") // the pod reported no usage: the 18 stand
		if rec.Code != 429 || rec.Header().Get("X-Gatekeeper-Reason") != "quota_exceeded" || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("over the reloaded quota = %d %v %s, want 429 quota_exceeded with Retry-After", rec.Code, rec.Header(), rec.Body.String())
		}
		r.wg.Wait()
	})
}
