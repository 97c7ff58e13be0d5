package queue

import (
	"errors"
	"fmt"
	"time"
)

// Defaults applied to zero Settings fields.
const (
	defaultMaxLength       = 1024
	defaultMaxTokens       = 4_000_000
	defaultStarvationAfter = 10 * time.Second
	defaultMaxTenants      = 10_000
)

// Settings configures a Core or a Queue. The zero value selects the defaults.
type Settings struct {
	// MaxLength is the most requests that may wait at once. 0 means 1024;
	// negative is invalid. Requests holding a slot do not count.
	MaxLength int
	// MaxTokens bounds the sum of the waiters' estimated tokens. 0 means
	// 4 000 000; negative is invalid. A request estimating more than
	// MaxTokens on its own is refused with ErrTooLarge.
	MaxTokens int64
	// StarvationAfter is how long a waiter may wait under ShortestFirst
	// before it goes ahead regardless of size. 0 means 10s; negative is
	// invalid. FIFO ignores it.
	StarvationAfter time.Duration
	// MaxTenants is how many idle tenants (no waiter, nothing in flight)
	// the queue remembers at most, with their counters; beyond it those
	// with the least counter are forgotten first, which costs them nothing
	// when their counter is below every backlogged one's (see the package
	// doc). Tenants with waiters or requests in flight are always kept.
	// 0 means 10 000; negative is invalid.
	MaxTenants int
	// Shares guarantees or caps some tenants' part of every window, by
	// tenant name (Request.Tenant, whatever its priority); see Share. Nil
	// means none. The Mins must sum to at most 1.
	Shares map[string]Share
	// DefaultMaxShare caps the part of every window of each tenant that
	// Shares does not list, as Share.Max does. 0 means 1 (no cap); valid
	// range [0, 1].
	DefaultMaxShare float64
	// Now returns the current time; Queue reads it at its exported edge.
	// Nil means time.Now. Core ignores it (its methods take now).
	Now func() time.Time
}

// withDefaults validates s and fills its zero fields. The error names every
// invalid field at once.
func (s Settings) withDefaults() (Settings, error) {
	var errs []error
	if s.MaxLength < 0 {
		errs = append(errs, fmt.Errorf("queue: MaxLength must not be negative, got %d", s.MaxLength))
	}
	if s.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("queue: MaxTokens must not be negative, got %d", s.MaxTokens))
	}
	if s.StarvationAfter < 0 {
		errs = append(errs, fmt.Errorf("queue: StarvationAfter must not be negative, got %v", s.StarvationAfter))
	}
	if s.MaxTenants < 0 {
		errs = append(errs, fmt.Errorf("queue: MaxTenants must not be negative, got %d", s.MaxTenants))
	}
	errs = append(errs, s.validShares()...)
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	if s.MaxLength == 0 {
		s.MaxLength = defaultMaxLength
	}
	if s.MaxTokens == 0 {
		s.MaxTokens = defaultMaxTokens
	}
	if s.StarvationAfter == 0 {
		s.StarvationAfter = defaultStarvationAfter
	}
	if s.MaxTenants == 0 {
		s.MaxTenants = defaultMaxTenants
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}
