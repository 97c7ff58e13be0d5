package proxy

import (
	"net/http"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// serveModels answers GET /v1/models itself with the union of the models
// every pod serves: the pods' own entries where they were discovered,
// minimal OpenAI model objects where the policy lists them.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request, ex *exchange, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	h.finish(r, ex, decide.OutcomeServed, http.StatusOK)
}
