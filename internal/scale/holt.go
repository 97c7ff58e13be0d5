package scale

// holt is Holt's linear (double exponential) smoothing of one series
// sampled at a fixed interval: a level and a trend, each an exponentially
// weighted average (Holt 1957; Hyndman & Athanasopoulos, "Forecasting:
// Principles and Practice", §8.2):
//
//	level' = α·x + (1−α)·(level + trend)
//	trend' = β·(level' − level) + (1−β)·trend
//	forecast(h) = level + h·trend
//
// α weighs the newest sample against the level (higher follows faster,
// smooths less); β does the same for the trend. The first sample sets the
// level with no trend. The zero value has seen nothing (Ready is false);
// set Alpha and Beta before Add. Not safe for concurrent use.
type holt struct {
	// alpha and Beta are the smoothing factors, each in (0, 1].
	alpha, beta float64
	level       float64
	trend       float64
	n           int
}

// Add folds one sample into the level and trend.
func (h *holt) Add(x float64) {
	if h.n == 0 {
		h.level, h.trend, h.n = x, 0, 1
		return
	}
	prev := h.level
	h.level = h.alpha*x + (1-h.alpha)*(h.level+h.trend)
	h.trend = h.beta*(h.level-prev) + (1-h.beta)*h.trend
	h.n++
}

// Ready reports whether a sample has been added.
func (h *holt) Ready() bool { return h.n > 0 }

// forecast is the value steps intervals ahead (steps may be fractional),
// never below 0: a falling trend does not forecast negative arrivals.
func (h *holt) forecast(steps float64) float64 {
	return max(0, h.level+steps*h.trend)
}

// Level and Trend are the smoothed level and the trend per interval.
func (h *holt) Level() float64 { return h.level }

// Trend is the smoothed change per interval.
func (h *holt) Trend() float64 { return h.trend }
