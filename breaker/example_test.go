package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/breaker"
)

func ExampleLimiter() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := breaker.NewLimiter(breaker.LimiterSettings{
		QPS: 80, Burst: 40, // global
		ClientQPS: 1, ClientBurst: 2, // per Authorization header
		Now: func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		err := l.Allow("Bearer sk-alice")
		var le *breaker.LimitError
		if errors.As(err, &le) {
			fmt.Println("refused:", le.Scope, "retry after", le.RetryAfter())
			continue
		}
		fmt.Println("admitted")
	}
	fmt.Println("bob:", l.Allow("Bearer sk-bob"))
	// Output:
	// admitted
	// admitted
	// refused: client retry after 1s
	// bob: <nil>
}

func ExampleErrorBreaker() {
	b, err := breaker.NewErrorBreaker(breaker.ErrorSettings{
		Failures: 2,
		OnChange: func(from, to breaker.State) { fmt.Println("breaker:", from, "→", to) },
	})
	if err != nil {
		panic(err)
	}
	for _, o := range []breaker.Outcome{breaker.Failure, breaker.Excluded, breaker.Failure} {
		done, err := b.Allow()
		if err != nil {
			fmt.Println(err)
			continue
		}
		done(o) // exactly once, when the response body has been copied
	}
	_, err = b.Allow()
	fmt.Println(err, b.State())
	// Output:
	// breaker: closed → open
	// breaker: open open
}
