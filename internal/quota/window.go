package quota

import "time"

// The windows' geometry. A window of length W counts its charges in buckets
// of length G (W a multiple of G): the current bucket and the W/G before
// it. A charge made in bucket b stays counted until the end of bucket
// b + W/G, that is its own time plus W rounded up to a bucket's end, so
// every charge is counted for at least W and at most W + G.
const (
	// Minute is the length of the per-minute window.
	Minute = time.Minute
	// MinuteBucket is the granularity of the per-minute window: 60 buckets
	// of the past and the current one.
	MinuteBucket = time.Second
	// Day is the length of the per-day window.
	Day = 24 * time.Hour
	// DayBucket is the granularity of the per-day window: 144 buckets of
	// the past and the current one.
	DayBucket = 10 * time.Minute
)

// geometry is one window's shape.
type geometry struct {
	length time.Duration // W
	bucket time.Duration // G
	past   int64         // W / G: the buckets counted before the current one
}

// The two windows, in the order of every [2] array in this package.
var windows = [2]geometry{
	{length: Minute, bucket: MinuteBucket, past: int64(Minute / MinuteBucket)},
	{length: Day, bucket: DayBucket, past: int64(Day / DayBucket)},
}

// index is the bucket that holds t.
func (g geometry) index(t time.Time) int64 {
	n, d := t.UnixNano(), int64(g.bucket)
	q := n / d
	if n%d < 0 {
		q-- // floor, for times before 1970
	}
	return q
}

// oldest is the oldest bucket still counted when the current one is cur.
func (g geometry) oldest(cur int64) int64 { return cur - g.past }

// expiry is when the charges of bucket b stop being counted: the end of
// bucket b + past.
func (g geometry) expiry(b int64) time.Time {
	return time.Unix(0, (b+g.past+1)*int64(g.bucket))
}

// ring is one key's counts in one window: the tokens of each bucket from
// first to first+n-1, kept in buf from head on, wrapping. It keeps only the
// span from the oldest non-zero bucket still counted to the newest written,
// so a key seen once holds one bucket, and never more than past + 1 (as
// long as the clock does not step back, which Quotas prevents). The zero
// value is an empty ring.
type ring struct {
	first   int64 // the bucket index of buf[head]
	head, n int
	buf     []int64
	sum     int64 // the tokens of every kept bucket
}

// at is the position in buf of bucket b, which is kept.
func (r *ring) at(b int64) int { return (r.head + int(b-r.first)) % len(r.buf) }

// get returns the tokens of bucket b (0 for one not kept).
func (r *ring) get(b int64) int64 {
	if b < r.first || b >= r.first+int64(r.n) {
		return 0
	}
	return r.buf[r.at(b)]
}

// trim drops the buckets before oldest and the empty buckets at the front,
// and returns the tokens still counted.
func (r *ring) trim(oldest int64) int64 {
	for r.n > 0 && (r.first < oldest || r.buf[r.head] == 0) {
		r.sum -= r.buf[r.head]
		r.buf[r.head] = 0
		r.head = (r.head + 1) % len(r.buf)
		r.first++
		r.n--
	}
	if r.n == 0 {
		r.sum, r.head = 0, 0
	}
	return r.sum
}

// usedFrom returns the tokens of the kept buckets from oldest on, without
// changing r.
func (r *ring) usedFrom(oldest int64) int64 {
	sum := r.sum
	for b := r.first; b < oldest && b < r.first+int64(r.n); b++ {
		sum -= r.buf[r.at(b)]
	}
	return sum
}

// add adds v tokens (negative: takes them back) to bucket b, keeping it
// when it was not.
func (r *ring) add(b, v int64) {
	if v == 0 {
		return
	}
	switch {
	case r.n == 0:
		r.grow(1)
		r.first, r.head, r.n = b, 0, 1
	case b < r.first:
		k := int(r.first - b)
		r.grow(r.n + k)
		r.head = (r.head - k + len(r.buf)) % len(r.buf) // the slots are zero
		r.first, r.n = b, r.n+k
	case b >= r.first+int64(r.n):
		k := int(b - r.first - int64(r.n) + 1)
		r.grow(r.n + k)
		r.n += k
	}
	r.buf[r.at(b)] += v
	r.sum += v
}

// grow makes room for need buckets, keeping their order; unused slots are
// zero.
func (r *ring) grow(need int) {
	if need <= len(r.buf) {
		return
	}
	buf := make([]int64, max(need, 2*len(r.buf), 4))
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// freedBy returns the first kept bucket whose expiry leaves at most limit
// − charge tokens counted, the buckets before it having expired too; ok is
// false when even every kept bucket expiring leaves too many (a charge
// above limit, which callers clamp).
func (r *ring) freedBy(limit, charge int64) (b int64, ok bool) {
	need := r.sum + charge - limit
	freed := int64(0)
	for i := range r.n {
		freed += r.buf[(r.head+i)%len(r.buf)]
		if freed >= need {
			return r.first + int64(i), true
		}
	}
	return 0, false
}
