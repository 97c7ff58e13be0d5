package quota

import (
	"errors"
	"fmt"
	"time"
)

// ErrExceeded matches every refusal of Charge (errors.Is): some applicable
// quota has no room for the request's estimate.
var ErrExceeded = errors.New("quota: exceeded")

// ExceededError is a refusal: the quota that has no room for the estimate
// and when it will. When several lack room it is the one that has room
// last, so that a retry after Wait is not refused by another.
type ExceededError struct {
	// Kind is what the quota belongs to: "client", "class" or "model".
	Kind string
	// Name is the class or model name, or for a client "sha256:" and the
	// first 12 hex digits of its key's hash (never the key).
	Name string
	// Window is the window's length: Minute or Day.
	Window time.Duration
	// Limit is the quota, in tokens per Window.
	Limit int64
	// Used is what the window counted when the request asked, in tokens.
	Used int64
	// Charge is what the request asked for: its estimate, clamped to
	// Limit.
	Charge int64
	// Wait is how long until enough of the window's charges have expired
	// for Charge to fit, at least a second (RetryAfter).
	Wait time.Duration
}

// Error describes the refusal with its numbers.
func (e *ExceededError) Error() string {
	per := "minute"
	if e.Window == Day {
		per = "day"
	}
	return fmt.Sprintf("quota: exceeded: %s %q allows %d tokens per %s, %d used, %d asked; retry in %v",
		e.Kind, e.Name, e.Limit, per, e.Used, e.Charge, e.Wait)
}

// Unwrap returns ErrExceeded.
func (e *ExceededError) Unwrap() error { return ErrExceeded }

// RetryAfter is Wait: when the window has room again for this estimate, if
// nothing else is charged meanwhile.
func (e *ExceededError) RetryAfter() time.Duration { return e.Wait }

// minWait is the least Wait: Retry-After counts whole seconds.
const minWait = time.Second

// kinds names the kinds of key, in the order Charge visits them.
var kinds = [3]string{"client", "class", "model"}
