package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
)

// classPolicy's fragmentation rule has no for, like slowPolicy's.
const classPolicy = `
upstreams:
  - {name: pod, url: "http://pod.invalid:8000", max_inflight: 1, min_inflight: 1, forward_priority: true}
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
queue: {max_wait: 5m, starvation_after: 1m, ttft_deadline: 0s}
pressure: {rules: {fragmentation: {degrade: 1.2, shed: 1.5}}}
classes:
  header: X-Class
  default: interactive
  list:
    - {name: interactive, priority: 10}
    - {name: batch, priority: -10, routes: [/v1/embeddings]}
`

func newClassRig(t *testing.T) *slowRig { return newRigWith(t, classPolicy) }

// sendClass starts a completion whose prompt is tag, in class (the X-Class
// header; "" for none).
func (r *slowRig) sendClass(ctx context.Context, tag, class string) <-chan *httptest.ResponseRecorder {
	return r.sendWith(ctx, tag, "X-Class", class)
}

// sendWith starts a completion whose prompt is tag, with header set to value
// ("" for none).
func (r *slowRig) sendWith(ctx context.Context, tag, header, value string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	r.wg.Go(func() {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"`+tag+`","max_tokens":16}`))
		if value != "" {
			req.Header.Set(header, value)
		}
		rec := httptest.NewRecorder()
		r.a.handler.ServeHTTP(rec, req)
		out <- rec
	})
	return out
}

// TestTrafficClasses: a queued interactive request goes before older batch
// ones; under degraded pressure the sheddable class is refused with 503
// shed_priority while the interactive class is still served.
func TestTrafficClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newClassRig(t)
		r.fragmentation(1.0)
		first := r.sendClass(t.Context(), "first", "") // takes the one slot
		synctest.Wait()
		batch := []<-chan *httptest.ResponseRecorder{r.sendClass(t.Context(), "batch-1", "batch")}
		synctest.Wait()
		batch = append(batch, r.sendClass(t.Context(), "batch-2", "batch"))
		synctest.Wait()
		inter := r.sendClass(t.Context(), "interactive", "interactive")
		synctest.Wait()
		if cs := r.a.snapshot().Classes; len(cs) != 2 || cs[0].Waiting != 1 || cs[1].Waiting != 2 || !cs[1].Sheddable {
			t.Fatalf("/admin/state classes = %+v, want interactive 1 waiting, batch 2 waiting and sheddable", cs)
		}
		for range 4 {
			r.pod.release <- struct{}{}
			synctest.Wait()
		}
		for _, ch := range append([]<-chan *httptest.ResponseRecorder{first, inter}, batch...) {
			if rec := <-ch; rec.Code != 200 {
				t.Fatalf("request = %d %s", rec.Code, rec.Body.String())
			}
		}
		if _, _, arrivals := r.pod.stats(); strings.Join(arrivals, ",") != "first,interactive,batch-1,batch-2" {
			t.Fatalf("the pod saw %v; the interactive request must pass the older batch ones", arrivals)
		}

		r.fragmentation(1.3) // degraded
		rec := <-r.sendClass(t.Context(), "late batch", "batch")
		if rec.Code != 503 || rec.Header().Get("X-Gatekeeper-Reason") != "shed_priority" || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("batch while degraded = %d %q, want 503 shed_priority with Retry-After", rec.Code, rec.Header().Get("X-Gatekeeper-Reason"))
		}
		served := r.sendClass(t.Context(), "served", "interactive")
		synctest.Wait()
		r.pod.release <- struct{}{}
		if rec := <-served; rec.Code != 200 {
			t.Fatalf("interactive while degraded = %d, want 200", rec.Code)
		}
		r.wg.Wait()
		counts := outcomeCounts(t, r.a)
		if counts["shed_priority"] != 1 {
			t.Errorf("outcomes %v, want one shed_priority", counts)
		}
	})
}
