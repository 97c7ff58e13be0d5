package decide

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// tenantLimiter records what the fast breaker is asked: Allow's client key,
// or AllowTenant's client key and tenant.
type tenantLimiter struct {
	calls []string
	err   error
}

func (l *tenantLimiter) Allow(_ context.Context, key string) error {
	l.calls = append(l.calls, "Allow("+key+")")
	return l.err
}

func (l *tenantLimiter) AllowTenant(_ context.Context, key, tenant string) error {
	l.calls = append(l.calls, "AllowTenant("+key+", "+tenant+")")
	return l.err
}

// TestFastBreakerIsAskedByTenant: with fairness on, a limiter that shares
// by tenant gets the request's tenant as the queue names it; without, Allow.
func TestFastBreakerIsAskedByTenant(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("k-gold"))
	gold := "sha256:" + hex.EncodeToString(sum[:])
	sum = sha256.Sum256([]byte("k-other"))
	other := "sha256:" + hex.EncodeToString(sum[:])[:16]
	fair := &Fairness{Tenants: map[string]Tenant{gold: {Name: "gold", Weight: 2}}}
	tests := []struct {
		name   string
		pol    Policy
		header http.Header
		err    error
		want   string
		retry  time.Duration
	}{
		{name: "a named tenant", pol: Policy{ClientKeyHeader: "Authorization", Fair: fair},
			header: http.Header{"Authorization": {"k-gold"}}, want: "AllowTenant(k-gold, gold)"},
		{name: "an unnamed tenant", pol: Policy{ClientKeyHeader: "Authorization", Fair: fair},
			header: http.Header{"Authorization": {"k-other"}}, want: "AllowTenant(k-other, " + other + ")"},
		{name: "no tenant value", pol: Policy{ClientKeyHeader: "Authorization", Fair: fair},
			header: http.Header{}, want: "AllowTenant(, )"},
		{name: "a tenant header apart from the client key", pol: Policy{ClientKeyHeader: "Authorization",
			Fair: &Fairness{TenantHeader: "X-Tenant", Tenants: fair.Tenants}},
			header: http.Header{"Authorization": {"k-1"}, "X-Tenant": {"k-gold"}}, want: "AllowTenant(k-1, gold)"},
		{name: "fairness off", pol: Policy{ClientKeyHeader: "Authorization"},
			header: http.Header{"Authorization": {"k-gold"}}, want: "Allow(k-gold)"},
		{name: "its refusal's wait is the Retry-After", pol: Policy{ClientKeyHeader: "Authorization", Fair: fair},
			header: http.Header{"Authorization": {"k-gold"}}, err: limitErr{1500 * time.Millisecond},
			want: "AllowTenant(k-gold, gold)", retry: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, err := queue.New(queue.Settings{})
			if err != nil {
				t.Fatal(err)
			}
			reg := pods.New(&levels{critical: map[string]bool{}})
			u, _ := url.Parse("http://a:8000")
			reg.Set([]pods.Pod{{Name: "a", URL: u}})
			q.SetWindow("a", 4)
			q.SetAvailability(reg.Availability)
			lim := &tenantLimiter{err: tt.err}
			core, err := New(Options{Registry: reg, Admission: Queue(q), Limiter: lim, Policy: tt.pol})
			if err != nil {
				t.Fatal(err)
			}
			var req Request
			res := core.Decide(t.Context(), &req, chat(chatBody, tt.header))
			if len(lim.calls) != 1 || lim.calls[0] != tt.want {
				t.Fatalf("the fast breaker was asked %q, want [%s]", lim.calls, tt.want)
			}
			if tt.err == nil {
				if res.Admitted == nil {
					t.Fatalf("Decide = %+v, want admitted", res)
				}
				core.Finish(&req, res.Admitted, End{Status: 200})
				res.Admitted.Slot.Release()
				return
			}
			if res.Refusal == nil || res.Refusal.Reason != ReasonRateLimited || res.Refusal.RetryAfter != tt.retry {
				t.Fatalf("Decide = %+v, want rate_limited with Retry-After %v", res.Refusal, tt.retry)
			}
		})
	}
}
