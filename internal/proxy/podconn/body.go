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
	chunked bool        // the body is framed in chunks (Wait)
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

// Wait blocks until the pod has sent more of the body than Read has taken
// (or the connection fails), so that a caller can wait for a token stream's
// next event holding no buffer of its own: such a stream waits most of its
// life. In a chunked body that is 3 bytes: what a Read leaves behind without
// data (the CRLF that ends a chunk) is 2 at most, and the next chunk's
// header line is 3 at least. Wait reads nothing a Read would not, and an
// error it meets is the next Read's (conn.Read keeps it).
func (b *body) Wait() {
	if b.state.Load() != bodyOpen {
		return
	}
	n := 1
	if b.chunked {
		n = 3
	}
	_, _ = b.c.br.Peek(n)
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
