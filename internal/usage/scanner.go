package usage

import "net/http"

// Scanner reads the usage of one response body that arrives as chunks
// rather than through an io.Reader: an Envoy ext_proc server sees a response
// only as the body messages Envoy streams to it. It applies the rules Body
// applies, with the same bounds on what it keeps.
//
// The zero value reads nothing (its Result is unknown) until Reset. A
// Scanner is not safe for concurrent use and must not be copied after Reset.
type Scanner struct {
	scan scanner
}

// Reset starts s on a response, forgetting any before it: status is its
// HTTP status, contentType and contentEncoding its headers of those names
// (they choose the format; "" for one it lacks) and size its
// Content-Length, -1 if unknown. As Watch does, it reads only a 200
// response; for any other, Result is unknown. It takes the two values, not
// an http.Header: an ext_proc server has the headers as Envoy's list, and a
// map built for two lookups would cost every exchange an allocation.
func (s *Scanner) Reset(status int, contentType, contentEncoding string, size int64) {
	s.scan.release() // forget the last response, returning its buffer
	if status == http.StatusOK {
		s.scan.init(formatOf(contentType, contentEncoding), size)
	}
}

// Write feeds s the next piece of the body. It never fails; it is an
// io.Writer so that a body can be copied into it.
func (s *Scanner) Write(p []byte) (int, error) {
	s.scan.write(p)
	return len(p), nil
}

// Result is the usage read so far. eof says the body reached its end;
// without it an SSE body gives the last usage seen (those tokens were spent)
// and a JSON body unknown, as a Body closed early reports.
func (s *Scanner) Result(eof bool) Tokens {
	return s.scan.result(eof)
}
