package queue

import (
	"errors"
	"fmt"
	"time"
)

// Defaults applied to zero Settings fields.
const (
	DefaultMaxLength       = 1024
	DefaultMaxTokens       = 4_000_000
	DefaultStarvationAfter = 10 * time.Second
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
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	if s.MaxLength == 0 {
		s.MaxLength = DefaultMaxLength
	}
	if s.MaxTokens == 0 {
		s.MaxTokens = DefaultMaxTokens
	}
	if s.StarvationAfter == 0 {
		s.StarvationAfter = DefaultStarvationAfter
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s, nil
}
