package proxy

import (
	"io"
	"net/http"
	"time"
)

// lingering bounds how long gatekeeper reads, and throws away, what a client
// still sends of a body it refused (413) before it closes the connection:
// nginx's lingering close. Closing a connection with unread bytes in it makes
// the kernel send a reset, which a client that is still writing meets
// before it reads the answer. net/http on its own reads at most 256 KiB of
// a body a handler left (maxPostHandlerReadBytes), and then closes after a
// 500 ms pause (rstAvoidanceDelay); a byte bound of our own reset clients
// whose body was larger than it (issue 35: every body over 64 MiB). So the
// bound is time, never bytes: reading to the body's end costs a connection
// and a goroutine for a while, not memory.
type lingering struct {
	// total is the longest the reading goes on: nginx's lingering_time.
	total time.Duration
	// idle ends it when no byte came for this long: nginx's
	// lingering_timeout (a client that sent its body and waits for the
	// answer with its connection open, or one that stalls).
	idle time.Duration
}

// defaultLingering is nginx's defaults: 30 s in all, 5 s without a byte.
func defaultLingering() lingering { return lingering{total: 30 * time.Second, idle: 5 * time.Second} }

// drain reads body until it ends, the client closes, or l's bounds pass.
// The bounds are read deadlines on the client's connection (rc), which is
// why they are on the real clock (time.Now: a connection deadline can have
// no other). Without deadlines it does not read at all: an unbounded read
// is worse than a reset. The last deadline stays in place, so what net/http
// reads of the body after the handler is bounded too.
func (l lingering) drain(body io.Reader, rc *http.ResponseController) {
	lr := &lingerReader{body: body, rc: rc, end: time.Now().Add(l.total), idle: l.idle}
	_, _ = io.Copy(io.Discard, lr) // io.Discard's ReadFrom: a pooled buffer, no allocation
}

// lingerReader moves the connection's read deadline before every read: to
// idle from now, and never past end.
type lingerReader struct {
	body io.Reader
	rc   *http.ResponseController
	end  time.Time
	idle time.Duration
}

func (r *lingerReader) Read(p []byte) (int, error) {
	now := time.Now()
	if !now.Before(r.end) {
		return 0, io.EOF
	}
	d := now.Add(r.idle)
	if d.After(r.end) {
		d = r.end
	}
	if err := r.rc.SetReadDeadline(d); err != nil {
		return 0, err
	}
	return r.body.Read(p)
}
