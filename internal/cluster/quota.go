package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// Quotas is quota.Quotas summed over every replica: the same quotas and
// the same Charge, decided by one atomic Redis call per charge (and one
// per settle) on Redis's clock while Redis answers, and by this replica's
// local *quota.Quotas at its share of each quota while it does not (see
// the package comment). Create one with Cluster.NewQuotas. Safe for
// concurrent use; must not be copied.
type Quotas struct {
	c     *Cluster
	local *quota.Quotas
	lim   atomic.Pointer[quotaLimits]

	// mu serializes SetLimits and resharing; sharedBy is the replica
	// count the local limits were divided by.
	mu       sync.Mutex
	sharedBy int
}

// quotaLimits are the quotas over every replica, as Charge looks them up.
type quotaLimits struct {
	full    quota.Limits
	clients map[string]quota.Limit // by quota.ClientName, lower case
}

// NewQuotas returns the Quotas of c that decides with local while Redis
// does not answer. Local then belongs to it: SetLimits sets local's limits
// (this replica's share) and local counts every charge this replica makes
// (those decided in Redis too, forced), so that a replica that loses
// Redis still knows what it charged. It limits nothing until SetLimits.
// Local's Snapshot is this replica's view.
func (c *Cluster) NewQuotas(local *quota.Quotas) *Quotas {
	q := &Quotas{c: c, local: local}
	q.lim.Store(&quotaLimits{})
	return q
}

// SetLimits installs the quotas of a (re)loaded policy, over every
// replica, from the next charge on; what was charged stays counted. On
// error (quota.Limits.Validate) nothing changes.
func (q *Quotas) SetLimits(l quota.Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	n := q.c.mostReplicas()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.local.SetLimits(shareLimits(l, n)); err != nil {
		return err
	}
	q.sharedBy = n
	clients := make(map[string]quota.Limit, len(l.Clients))
	for name, lim := range l.Clients {
		clients[strings.ToLower(name)] = lim
	}
	q.lim.Store(&quotaLimits{full: l, clients: clients})
	return nil
}

// reshare sets the local limits at this replica's share again when the
// most replicas seen changed since they were set.
func (q *Quotas) reshare() {
	n := q.c.mostReplicas()
	q.mu.Lock()
	defer q.mu.Unlock()
	if n != q.sharedBy {
		_ = q.local.SetLimits(shareLimits(q.lim.Load().full, n)) // validated by SetLimits
		q.sharedBy = n
	}
}

// shareLimits divides every limit by n, rounded down, at least 1 token
// (0 stays no limit), so that the replicas' shares sum to at most the
// whole.
func shareLimits(l quota.Limits, n int) quota.Limits {
	div := func(v int64) int64 {
		if v <= 0 || n <= 1 {
			return v
		}
		return max(1, v/int64(n))
	}
	one := func(x quota.Limit) quota.Limit {
		return quota.Limit{PerMinute: div(x.PerMinute), PerDay: div(x.PerDay)}
	}
	all := func(m map[string]quota.Limit) map[string]quota.Limit {
		out := make(map[string]quota.Limit, len(m))
		for k, v := range m {
			out[k] = one(v)
		}
		return out
	}
	return quota.Limits{PerClient: one(l.PerClient), Clients: all(l.Clients), Classes: all(l.Classes), Models: all(l.Models)}
}

// mostReplicas is the most replicas seen alive within ForgetAfter (before
// any heartbeat, Settings.Replicas): the share divides by it, as the
// windows' floor does.
func (c *Cluster) mostReplicas() int {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	return max(1, c.seenLocked(), int(c.replicas.Load()))
}

// quotaKey is one key a charge applies to, with its Redis keys (one per
// window).
type quotaKey struct {
	kind, name string // for errors: a client's name is "sha256:" and 12 hex digits
	redis      [2]string
	limit      quota.Limit
}

// quotaWindows are the windows' geometry, in quota's order: minute, day.
var quotaWindows = [2]struct {
	length, bucket time.Duration
	name           string
}{{quota.Minute, quota.MinuteBucket, "minute"}, {quota.Day, quota.DayBucket, "day"}}

// applicable returns the keys a applies to, by quota.Quotas' rules.
func (l *quotaLimits) applicable(a quota.Ask, prefix string) []quotaKey {
	var keys []quotaKey
	add := func(kind, value string, lim quota.Limit, name func(hx string) string) {
		if lim.PerMinute <= 0 && lim.PerDay <= 0 {
			return
		}
		sum := sha256.Sum256([]byte(value))
		hx := hex.EncodeToString(sum[:])
		k := quotaKey{kind: kind, name: name(hx), limit: lim}
		for w, win := range quotaWindows {
			k.redis[w] = prefix + "quota:" + kind + ":" + hx + ":" + win.name
		}
		keys = append(keys, k)
	}
	if a.Client != "" {
		add("client", a.Client, l.client(a.Client), func(hx string) string { return "sha256:" + hx[:12] })
	}
	if a.Class != "" {
		add("class", a.Class, l.full.Classes[a.Class], func(string) string { return a.Class })
	}
	if a.Model != "" {
		add("model", a.Model, l.full.Models[a.Model], func(string) string { return a.Model })
	}
	return keys
}

// client returns the quota of a raw client key: its override, or
// PerClient.
func (l *quotaLimits) client(key string) quota.Limit {
	if lim, ok := l.clients[quota.ClientName(key)]; ok {
		return lim
	}
	return l.full.PerClient
}

// Charge is quota.Quotas.Charge over every replica: all or nothing over
// every window of every applicable key, in one atomic Redis call on
// Redis's clock. While Redis does not answer (Up is false, or the call
// fails or times out) the local Quotas decides at this replica's share.
// The Settler is never nil.
//
// ctx is the request's: the Redis call ends when it does (and within
// Settings.Timeout), and the local Quotas decides, as for a call that
// failed, but the end of ctx counts as no Redis failure (see Cluster.call).
// A charge Redis made before ctx ended stays charged there, as one whose
// answer timed out. The Settler does not use ctx's cancellation: it runs
// after the response, often once the client has left.
func (q *Quotas) Charge(ctx context.Context, a quota.Ask) (quota.Settler, error) {
	q.reshare()
	keys := q.lim.Load().applicable(a, q.c.s.KeyPrefix)
	if len(keys) == 0 || !q.c.Up() {
		return q.local.Charge(ctx, a) // nothing applies, or Redis is out of reach
	}
	est := max(a.Estimate, 0)
	rkeys := make([]string, 0, 2*len(keys))
	args := make([]any, 0, 3+6*len(keys))
	force := "0"
	if a.Force {
		force = "1"
	}
	args = append(args, q.c.nowArg(), est, force)
	for _, k := range keys {
		for w, win := range quotaWindows {
			rkeys = append(rkeys, k.redis[w])
			args = append(args, win.bucket.Microseconds(), int64(win.length/win.bucket), limitOf(k.limit, w))
		}
	}
	var res []int64
	err := q.c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = q.c.scripts.quotaCharge.Run(ctx, q.c.rdb, rkeys, args...).Int64Slice()
		return err
	})
	if err == nil && !validCharge(res, len(rkeys)) {
		err = &unavailableError{cause: fmt.Errorf("quota charge script returned %v", res)}
	}
	if err != nil {
		return q.local.Charge(ctx, a) // Redis did not decide: this replica's share
	}
	var refusal error
	if i := int(res[1]); i > 0 {
		k, w := keys[(i-1)/2], (i-1)%2
		refusal = &quota.ExceededError{Kind: k.kind, Name: k.name, Window: quotaWindows[w].length,
			Limit: limitOf(k.limit, w), Used: res[2], Charge: res[3],
			Wait: max(time.Duration(res[4])*time.Microsecond, time.Second)}
	}
	if res[0] == 0 {
		return noSettle{}, refusal
	}
	mirror := a
	mirror.Force = true // counted locally whatever the share: Redis decided
	m, _ := q.local.Charge(ctx, mirror)
	s := &sharedCharge{q: q, ctx: context.WithoutCancel(ctx), keys: rkeys, at: res[5:], mirror: m}
	return s, refusal
}

// validCharge checks the shape of the charge script's answer for n keys.
func validCharge(res []int64, n int) bool {
	switch {
	case len(res) < 5 || res[1] < 0 || res[1] > int64(n):
		return false
	case res[0] == 0:
		return len(res) == 5 && res[1] > 0
	}
	return res[0] == 1 && len(res) == 5+2*n
}

func limitOf(l quota.Limit, w int) int64 {
	if w == 0 {
		return l.PerMinute
	}
	return l.PerDay
}

// noSettle is the Settler of a charge that charged nothing.
type noSettle struct{}

func (noSettle) Settle(int64) {}

// sharedCharge is a charge made in Redis: its keys, and per key the bucket
// charged and the charge (the script's answer); mirror is its copy in the
// local Quotas. ctx is the charging request's without its cancellation:
// Settle runs after the response (a refund, once the client has left), so
// the request's end must not cut it short; Cluster.call still bounds it by
// Settings.Timeout.
type sharedCharge struct {
	q      *Quotas
	ctx    context.Context
	done   atomic.Bool
	keys   []string
	at     []int64
	mirror quota.Settler
}

// Settle trues the charge up in Redis, in one atomic call, and in the
// local Quotas' copy. While Redis does not answer the copy is trued up
// and Redis's is not (see the package comment). Only the first call
// counts.
func (s *sharedCharge) Settle(actual int64) {
	if s.done.Swap(true) {
		return
	}
	actual = max(actual, 0)
	s.mirror.Settle(actual)
	c := s.q.c
	if !c.Up() {
		return
	}
	args := make([]any, 0, 1+4*len(s.keys))
	args = append(args, c.nowArg())
	for i := range s.keys {
		win := quotaWindows[i%2]
		args = append(args, win.bucket.Microseconds(), int64(win.length/win.bucket),
			strconv.FormatInt(s.at[2*i], 10), actual-s.at[2*i+1])
	}
	// The request's context without its cancellation, bounded by
	// Settings.Timeout in call: a refund or true-up after the client left
	// still reaches Redis.
	_ = c.call(s.ctx, func(ctx context.Context) error {
		return c.scripts.quotaSettle.Run(ctx, c.rdb, s.keys, args...).Err()
	})
}
