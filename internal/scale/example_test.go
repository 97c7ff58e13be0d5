package scale_test

import (
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

func ExampleEstimator() {
	e, err := scale.NewEstimator(scale.Settings{Interval: 15 * time.Second, Horizon: time.Minute, PodRate: 5})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, arrivals := range []float64{8, 12, 16} { // a ramp of 4/s per interval
		now = now.Add(15 * time.Second)
		est := e.ObserveAt(now, scale.Input{Arrivals: arrivals, Pods: 2})
		fmt.Printf("arrivals %.0f/s: forecast %.1f/s, desired %d\n", arrivals, est.Forecast, est.Desired)
	}
	// Output:
	// arrivals 8/s: forecast 8.0/s, desired 2
	// arrivals 12/s: forecast 12.4/s, desired 4
	// arrivals 16/s: forecast 18.9/s, desired 5
}
