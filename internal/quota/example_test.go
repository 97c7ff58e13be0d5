package quota_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/quota"
)

// A model's quota of 1000 tokens per minute: a request is charged its
// estimate at admission, a second one does not fit, and the first one's
// true-up refunds what it did not use.
func ExampleQuotas() {
	now := time.Unix(1_800_000_000, 0)
	q, err := quota.New(quota.Settings{Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := q.SetLimits(quota.Limits{Models: map[string]quota.Limit{"llama": {PerMinute: 1000}}}); err != nil {
		fmt.Println(err)
		return
	}
	first, err := q.Charge(context.Background(), quota.Ask{Model: "llama", Estimate: 800})
	fmt.Println(err)
	_, err = q.Charge(context.Background(), quota.Ask{Model: "llama", Estimate: 400})
	var e *quota.ExceededError
	fmt.Println(errors.As(err, &e), e.RetryAfter())
	first.Settle(300) // the response's usage: 500 tokens back
	_, err = q.Charge(context.Background(), quota.Ask{Model: "llama", Estimate: 400})
	fmt.Println(err, q.Snapshot().Models["llama"].Minute.Used)
	// Output:
	// <nil>
	// true 1m1s
	// <nil> 700
}
