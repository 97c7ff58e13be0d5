package main

import (
	"errors"
	"testing"
)

func TestQueueCheck(t *testing.T) {
	errLate := errors.New("driver: admin state not reached")
	ok := queueResult{waiters: 200, reached: 200, drained: true}
	tests := []struct {
		name    string
		q       queueResult
		err     error
		wantErr bool
	}{
		{"every waiter queued, none failed, drained", ok, nil, false},
		{"queueMemory failed", ok, errLate, true},
		{"a waiter never queued", queueResult{waiters: 200, reached: 199, drained: true}, nil, true},
		{"a client failed", queueResult{waiters: 200, reached: 200, drained: true, clientFailures: 1}, nil, true},
		{"not drained", queueResult{waiters: 200, reached: 200}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.q.check(tt.err); (err != nil) != tt.wantErr {
				t.Errorf("check(%v) = %v, want an error: %v", tt.err, err, tt.wantErr)
			}
		})
	}
}
