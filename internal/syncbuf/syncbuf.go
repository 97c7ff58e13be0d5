// Package syncbuf holds Buffer, a bytes.Buffer safe for concurrent use: what
// the tests give a child process or a logger as its output while they read
// it. It is here for the tests of several packages, which had a copy each.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; its methods may be called from
// any goroutine. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
