package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// errRateLimited matches every *LimitError with errors.Is.
var errRateLimited = errors.New("breaker: rate limited")

// Scope says which token bucket refused a request.
type Scope int

const (
	// scopeGlobal is the bucket shared by all requests.
	scopeGlobal Scope = iota
	// scopeClient is the bucket of one client key.
	scopeClient
	// scopeTenant is the cap of one tenant's part of the global bucket.
	scopeTenant
)

// String returns "global", "client" or "tenant".
func (s Scope) String() string {
	switch s {
	case scopeGlobal:
		return "global"
	case scopeClient:
		return "client"
	case scopeTenant:
		return "tenant"
	default:
		return fmt.Sprintf("scope(%d)", int(s))
	}
}

// LimitError is the refusal returned by Limiter.Allow. It carries the scope
// that refused and how long until that bucket holds a token again.
type LimitError struct {
	// Scope is the bucket that refused.
	Scope Scope
	// Wait is the time until the bucket will hold a token, unrounded.
	Wait time.Duration
}

// Error returns e.g. "breaker: rate limited (client), retry after 2s".
func (e *LimitError) Error() string {
	return fmt.Sprintf("breaker: rate limited (%s), retry after %s", e.Scope, e.RetryAfter())
}

// RetryAfter returns Wait rounded up to whole seconds, at least one second,
// ready for a Retry-After header.
func (e *LimitError) RetryAfter() time.Duration { return wholeSeconds(e.Wait) }

// Is reports whether target is ErrRateLimited.
func (e *LimitError) Is(target error) bool { return target == errRateLimited }

// wholeSeconds rounds d up to whole seconds, with a floor of one second.
func wholeSeconds(d time.Duration) time.Duration {
	switch {
	case d <= time.Second:
		return time.Second
	case d > math.MaxInt64-time.Second:
		return d.Truncate(time.Second)
	}
	return (d + time.Second - 1).Truncate(time.Second)
}
