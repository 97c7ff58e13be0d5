package podconn

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
)

// The states of a body: open, then ended by its reader (its end, or an
// error) or closed by Close before that; whichever comes first owns the
// connection's fate.
const (
	bodyOpen int32 = iota
	bodyEnded
	bodyClosed
)

var errClosedBody = errors.New("podconn: read on closed response body")

// body is a response's body: http.ReadResponse's, reading the connection,
// and the end of the exchange. Reaching the body's end cleanly gives the
// connection back to the pool; an error, or Close before the end, closes
// it. Read is for one goroutine at a time, as any io.Reader; Close may come
// from another while a Read is blocked (closing the connection unblocks
// it).
type body struct {
	rc      io.ReadCloser // http.ReadResponse's body; never closed (its Close reads to the end)
	c       *conn         // not touched once the body has ended or closed
	ctx     context.Context
	stop    func() bool // the exchange's context.AfterFunc
	closing bool        // the response or the request said Connection: close
	state   atomic.Int32
	err     error // what Read returns once ended: io.EOF or the error
}

func (b *body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyEnded:
		return 0, b.err
	case bodyClosed:
		return 0, errClosedBody
	}
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	reuse := err == io.EOF && !b.closing
	if err != io.EOF {
		err = b.c.mapErr(b.ctx, err)
	}
	b.err = err
	if !b.state.CompareAndSwap(bodyOpen, bodyEnded) {
		return n, err // Close came first, and closed the connection
	}
	if reuse {
		b.c.finish(b.stop, true)
	} else {
		b.stop()
		b.c.close()
	}
	return n, err
}

// Close ends the body. Before its end it closes the connection (what is
// left of the response is not read); after, it does nothing.
func (b *body) Close() error {
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.stop()
		b.c.close()
	}
	return nil
}
