package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

// FuzzChargeSettle runs a random sequence of charges (of three clients,
// a class and a model, in any combination), settles and clock advances,
// one at a time, and checks after each admission the bound of the package
// comment (see ledger) on every window of every quota charged, and after
// each refusal that RetryAfter is exact: the same ask is refused 1 ns
// before it and admitted at it, when nothing else happened meanwhile.
func FuzzChargeSettle(f *testing.F) {
	f.Add([]byte{0, 1, 200, 64, 0, 2, 100, 3, 0, 0, 7, 80, 0, 3, 250, 1, 0, 4, 60, 2, 0})
	f.Add([]byte{0, 7, 255, 255, 128, 0, 7, 255, 255, 128, 1, 3, 60, 0, 5, 1, 0, 2, 1, 0, 3, 230})
	f.Add([]byte{0, 2, 20, 200, 0, 2, 20, 200, 0, 2, 20, 200, 3, 127, 2, 0, 0, 2, 20, 10, 3, 255})
	f.Fuzz(fuzzChargeSettle)
}

func fuzzChargeSettle(t *testing.T, data []byte) {
	lim := Limits{
		PerClient: Limit{PerMinute: 3000, PerDay: 20000},
		Classes:   map[string]Limit{"a": {PerMinute: 5000}},
		Models:    map[string]Limit{"m": {PerMinute: 4000, PerDay: 30000}},
	}
	q, clk := newQuotas(t, Settings{maxClients: 3}) // no eviction: it would forget charges
	if err := q.SetLimits(lim); err != nil {
		t.Fatal(err)
	}
	type pending struct {
		s      Settler
		rows   []*admitted
		actual int64
	}
	var live []pending
	ledgers := map[string]*ledger{}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for op := int64(1); len(data) > 0; op++ {
		switch next() % 4 {
		case 0, 1: // charge
			ask, actual := fuzzAsk(next(), next(), next(), next())
			s, err := q.Charge(context.Background(), ask)
			if err != nil {
				if next()%2 == 0 {
					continue
				}
				s = retryAt(t, q, clk, ask, err) // admitted at its RetryAfter
			}
			p := pending{s: s, actual: actual}
			for _, w := range applicable(lim, ask) {
				l := ledgers[w.key]
				if l == nil {
					l = &ledger{}
					ledgers[w.key] = l
				}
				row := &admitted{at: clk.Now(), key: op, charge: min(ask.Estimate, w.limit), actual: actual}
				l.admit(row)
				p.rows = append(p.rows, row)
				if used, bound, _ := l.window(clk.Now(), w.length, w.limit); used > bound {
					t.Fatalf("op %d: %s: the admissions of the last %v use %d, want ≤ %d", op, w.key, w.length, used, bound)
				}
			}
			live = append(live, p)
		case 2: // settle
			if len(live) == 0 {
				continue
			}
			i := int(next()) % len(live)
			live[i].s.Settle(live[i].actual)
			for _, row := range live[i].rows {
				row.settled = op
			}
			live = append(live[:i], live[i+1:]...)
		case 3: // advance
			clk.Advance(fuzzAdvance(next()))
		}
		checkNonNegative(t, q.Snapshot())
	}
}

// fuzzAsk builds a charge from four bytes: who (which client, class and
// model apply), the estimate (up to 8 190, above every per-minute limit)
// and its actual (0 to 4 × the estimate).
func fuzzAsk(who, hi, lo, factor byte) (Ask, int64) {
	var a Ask
	if c := who % 4; c > 0 {
		a.Client = string(rune('a' + c - 1))
	}
	if who&4 != 0 {
		a.Class = "a"
	}
	if who&8 != 0 {
		a.Model = "m"
	}
	a.Estimate = (int64(hi)<<8 | int64(lo)) % 8191
	return a, a.Estimate * int64(factor) / 64
}

// fuzzAdvance maps a byte to a step of the clock: 0 to 12.7 s by 100 ms,
// then up to 96 s by 1 s, then up to 5 h by 10 min.
func fuzzAdvance(b byte) time.Duration {
	switch {
	case b < 128:
		return time.Duration(b) * 100 * time.Millisecond
	case b < 224:
		return time.Duration(b-127) * time.Second
	}
	return time.Duration(b-223) * 10 * time.Minute
}

// quotaWindow is one window of one quota that an ask is charged against.
type quotaWindow struct {
	key    string
	length time.Duration
	limit  int64
}

// applicable lists the limited windows an ask is charged against.
func applicable(l Limits, a Ask) []quotaWindow {
	var out []quotaWindow
	add := func(key string, lim Limit) {
		if lim.PerMinute > 0 {
			out = append(out, quotaWindow{key + "/minute", Minute, lim.PerMinute})
		}
		if lim.PerDay > 0 {
			out = append(out, quotaWindow{key + "/day", Day, lim.PerDay})
		}
	}
	if a.Client != "" {
		add("client/"+a.Client, l.PerClient)
	}
	if lim, ok := l.Classes[a.Class]; ok {
		add("class/"+a.Class, lim)
	}
	if lim, ok := l.Models[a.Model]; ok {
		add("model/"+a.Model, lim)
	}
	return out
}

// retryAt checks a refusal's RetryAfter: 1 ns before it the ask is still
// refused (when it is above the 1 s floor), at it admitted. It returns the
// admission's Settler, the clock at RetryAfter.
func retryAt(t *testing.T, q *Quotas, clk *clock, a Ask, err error) Settler {
	t.Helper()
	var e *ExceededError
	if !errors.As(err, &e) || e.Wait < minWait {
		t.Fatalf("Charge(%+v) = %v, want an *ExceededError with Wait ≥ 1s", a, err)
	}
	if e.Wait > minWait {
		clk.Advance(e.Wait - time.Nanosecond)
		if _, err := q.Charge(context.Background(), a); err == nil {
			t.Fatalf("Charge(%+v) admitted 1ns before its RetryAfter %v", a, e.Wait)
		}
		clk.Advance(time.Nanosecond)
	} else {
		clk.Advance(e.Wait)
	}
	s, err := q.Charge(context.Background(), a)
	if err != nil {
		t.Fatalf("Charge(%+v) at its RetryAfter %v = %v, want admitted", a, e.Wait, err)
	}
	return s
}

func checkNonNegative(t *testing.T, s Snapshot) {
	t.Helper()
	all := []Usage{}
	for _, u := range s.Classes {
		all = append(all, u)
	}
	for _, u := range s.Models {
		all = append(all, u)
	}
	for _, c := range s.Clients.Heaviest {
		all = append(all, c.Usage)
	}
	for _, u := range all {
		if u.Minute.Used < 0 || u.Day.Used < 0 {
			t.Errorf("Snapshot() counts %+v, want ≥ 0", u)
		}
	}
}
