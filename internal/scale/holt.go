package scale

// Holt is Holt's linear (double exponential) smoothing of one series
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
type Holt struct {
	// Alpha and Beta are the smoothing factors, each in (0, 1].
	Alpha, Beta float64
	level       float64
	trend       float64
	n           int
}

// Add folds one sample into the level and trend.
func (h *Holt) Add(x float64) {
	if h.n == 0 {
		h.level, h.trend, h.n = x, 0, 1
		return
	}
	prev := h.level
	h.level = h.Alpha*x + (1-h.Alpha)*(h.level+h.trend)
	h.trend = h.Beta*(h.level-prev) + (1-h.Beta)*h.trend
	h.n++
}

// Ready reports whether a sample has been added.
func (h *Holt) Ready() bool { return h.n > 0 }

// Forecast is the value steps intervals ahead (steps may be fractional),
// never below 0: a falling trend does not forecast negative arrivals.
func (h *Holt) Forecast(steps float64) float64 {
	return max(0, h.level+steps*h.trend)
}

// Level and Trend are the smoothed level and the trend per interval.
func (h *Holt) Level() float64 { return h.level }

// Trend is the smoothed change per interval.
func (h *Holt) Trend() float64 { return h.trend }
