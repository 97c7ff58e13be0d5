package decide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// Quotas charges token quotas; quota.Quotas (one replica) and the cluster's
// shared quotas satisfy it. Charge returns nil or a *quota.ExceededError
// (with RetryAfter); with Ask.Force it charges even then. A charge that
// asks another process (the cluster's Redis) ends when ctx, the request's,
// does; its Settler must not depend on ctx, for it runs after the response,
// often after the client left (the cluster's detaches it).
type Quotas interface {
	Charge(ctx context.Context, a quota.Ask) (quota.Settler, error)
}

// Usage is what a pod reported a request used, for the true-up of what it
// was charged at admission.
type Usage struct {
	// Prompt and Completion are the usage's token counts.
	Prompt, Completion int64
	// Known says the response's usage was read; without it the estimates
	// charged stand (a stream without include_usage, a compressed body).
	Known bool
	// none says the pod did no work for it (it refused the request, could
	// not be reached, or the client left before it was sent): what was
	// charged is given back.
	none bool
}

// chargeQuota charges req's estimate to the quotas of its client key, class
// and model: a 429 quota_exceeded when one lacks room, unless the quotas
// are in shadow mode (or gatekeeper in observe mode), which only count it.
func (c *Core) chargeQuota(ctx context.Context, req *Request, key string) *Refusal {
	pol := req.Policy
	if c.quotas == nil || !pol.Quotas {
		return nil
	}
	shadow := pol.QuotaShadow || pol.Observe
	a := quota.Ask{Client: key, Model: req.Model, Estimate: req.Tokens, Force: shadow}
	if req.Class != nil {
		a.Class = req.Class.Name
	}
	s, err := c.quotas.Charge(ctx, a)
	req.quota = s
	if err == nil {
		return nil
	}
	if c.rec != nil {
		c.rec.Decided(string(ReasonQuotaExceeded), !shadow)
	}
	if shadow {
		return nil
	}
	var ex *quota.ExceededError
	if !errors.As(err, &ex) { // the quotas could not decide: admit rather than refuse on our fault
		return nil
	}
	rf := Refuse(ReasonQuotaExceeded, quotaMessage(ex), ex.RetryAfter(), pol.RetryAfter)
	return &rf
}

// quotaMessage tells the client which quota it ran out of.
func quotaMessage(ex *quota.ExceededError) string {
	window := "minute"
	if ex.Window >= 24*time.Hour {
		window = "day"
	}
	who := ex.Kind
	switch ex.Kind {
	case "client":
		who = "your client key's"
	case "class":
		who = fmt.Sprintf("traffic class %q's", ex.Name)
	case "model":
		who = fmt.Sprintf("model %q's", ex.Name)
	}
	return fmt.Sprintf("token quota exceeded: %s quota of %d tokens per %s is used up; retry after the Retry-After delay",
		who, ex.Limit, window)
}

// settle trues up what req was charged at admission from what its pod
// reported: its tenant's service on the slot's queue counter, and its
// token quotas. Finish calls it once, when the response has ended, before
// the slot is released; a retried request settles its first slot alone
// (settleSlot) with None, and its quota charge travels on with it.
func (c *Core) settle(req *Request, slot Slot, u Usage) {
	if slot != nil {
		c.settleSlot(req, slot, u)
	}
	c.settleQuota(req, u)
}

func (c *Core) settleSlot(req *Request, slot Slot, u Usage) {
	f := req.Policy.Fair
	if f == nil {
		return
	}
	final := f.service(req.Prompt, req.Output) // the estimate stands without a usage
	switch {
	case u.none:
		final = 0
		slot.Settle(0)
	case u.Known:
		final = f.service(u.Prompt, u.Completion)
		slot.Settle(final)
	}
	if c.rec != nil {
		c.rec.TenantService(tenantLabel(req.Tenant), final)
	}
}

// tenantLabel is a tenant's metrics label: bounded by the named tenants.
func tenantLabel(tenant string) string {
	switch {
	case tenant == "":
		return "anonymous"
	case unnamedTenant(tenant):
		return "other"
	}
	return tenant
}

func (c *Core) settleQuota(req *Request, u Usage) {
	s := req.quota
	if s == nil {
		return
	}
	req.quota = nil
	switch {
	case u.none:
		s.Settle(0)
	case u.Known:
		s.Settle(u.Prompt + u.Completion)
	}
}

// refund gives back req's quota charge: it was refused or left before a pod
// did any work.
func (c *Core) refund(req *Request) { c.settleQuota(req, Usage{none: true}) }
