package listener

import (
	"syscall"
	"testing"
)

// TestFileLimitLow: no warning without a limit or with one far below the
// open-file limit; a warning when max_connections cannot fit under it.
func TestFileLimitLow(t *testing.T) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<40 {
		t.Skipf("open-file limit %d, %v: nothing is above it", r.Cur, err)
	}
	tests := []struct {
		max  int
		want bool
	}{
		{0, false},
		{1, r.Cur < 1+fileReserve},
		{int(r.Cur), true},
		{1 << 40, true},
	}
	for _, tt := range tests {
		if limit, low := FileLimitLow(tt.max); low != tt.want || (low && limit != r.Cur) {
			t.Errorf("FileLimitLow(%d) = %d, %v; want %d, %v", tt.max, limit, low, r.Cur, tt.want)
		}
	}
}

// TestProtocols: without h2c the server's default (nil); with it HTTP/1
// and HTTP/2 with prior knowledge, and no HTTP/2 over TLS (h2c is refused
// with server.tls).
func TestProtocols(t *testing.T) {
	if p := Protocols(false); p != nil {
		t.Errorf("Protocols(false) = %v, want nil", p)
	}
	p := Protocols(true)
	if p == nil || !p.HTTP1() || !p.UnencryptedHTTP2() || p.HTTP2() {
		t.Errorf("Protocols(true) = %v, want HTTP1 and UnencryptedHTTP2", p)
	}
}
