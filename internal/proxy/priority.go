package proxy

import (
	"strconv"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// withPriority returns body with vLLM's "priority" field set from the
// class (vLLM serves lower values first, so a higher class is sent lower),
// unless named says the body has one already (the classifier saw it in its
// own pass: decide.Request.HasPriority); nil when it is left as it is.
// body is a JSON route's, which the classifier has read whole.
func withPriority(body []byte, c *decide.Class, named bool) []byte {
	if c == nil || named || len(body) < 2 || body[0] != '{' {
		return nil
	}
	field := `"priority":` + strconv.Itoa(-c.Priority)
	out := make([]byte, 0, len(body)+len(field)+1)
	out = append(out, '{')
	out = append(out, field...)
	rest := body[1:]
	if !emptyObject(rest) {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// emptyObject reports whether rest (a JSON object after its '{') is "}",
// whitespace aside.
func emptyObject(rest []byte) bool {
	for _, b := range rest {
		switch b {
		case ' ', '\t', '\n', '\r':
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}
