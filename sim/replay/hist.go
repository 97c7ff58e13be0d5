package replay

import (
	"math"
	"time"
)

// hist is a log-bucketed latency histogram (1 % resolution from 1 ms).
type hist struct {
	counts []int64
	n      int64
}

const histBase = 1.01

func (h *hist) add(d time.Duration) {
	ms := max(d.Seconds()*1000, 1)
	i := int(math.Log(ms) / math.Log(histBase))
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
}

func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(math.Pow(histBase, float64(i+1)) * float64(time.Millisecond))
		}
	}
	return 0
}
