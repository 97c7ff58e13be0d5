package traffic

import (
	"math"
	"slices"
	"time"
)

// Quantile returns the q-quantile (0..1) of ds by nearest rank: the smallest
// value with at least q of ds at or below it (the replay's rule too). It
// sorts ds in place when it is not sorted; an empty ds gives 0.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
