package proxy

import (
	"net/http"
	"strconv"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// writeRefusal writes a refusal as an HTTP answer with the headers of
// DESIGN §5. Header values are constants or numbers, so nothing from the
// request can inject a header; the message is JSON-encoded.
func writeRefusal(w http.ResponseWriter, rf decide.Refusal) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if rf.Reason != "" {
		h.Set("X-Gatekeeper-Reason", string(rf.Reason))
	}
	if rf.SendsRetryAfter() {
		h.Set("Retry-After", decide.RetryAfterSeconds(rf.RetryAfter))
	}
	buf := rf.Body()
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(rf.Status)
	_, _ = w.Write(buf)
}
