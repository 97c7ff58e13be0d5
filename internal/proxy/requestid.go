package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// idSource makes request ids: a random per-process prefix and a counter, so
// ids are unique across replicas and cost no syscall per request.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return &idSource{prefix: hex.EncodeToString(b[:]) + "-"}
}

// next returns a new id; it allocates only the string it returns.
func (s *idSource) next() string {
	var b [32]byte // a 13-byte prefix and at most 13 base-36 digits
	return string(strconv.AppendUint(append(b[:0], s.prefix...), s.n.Add(1), 36))
}

// validRequestID accepts a client-supplied id only if it is short and made of
// characters that cannot split a header or a log line.
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}
