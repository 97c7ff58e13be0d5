package admin

import (
	"encoding/json"
	"net/http"
)

// scaleDocument is GET /admin/scale's answer.
type scaleDocument struct {
	// Pools is the scaling signal's latest estimate of each pool
	// (scale.Scaler.Snapshot): desired, current, forecast and the inputs.
	Pools any `json:"pools"`
}

// ScaleHandler serves GET /admin/scale from pools, the scaling signal's
// estimates (docs/scaling.md). With a nil pools (no scaling section in the
// policy) it answers 404 with a JSON error saying so.
func ScaleHandler(pools func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if pools == nil {
			w.WriteHeader(http.StatusNotFound)
			_ = enc.Encode(map[string]string{"error": "scaling is off: the policy has no scaling section"})
			return
		}
		_ = enc.Encode(scaleDocument{Pools: pools()})
	})
}
