package control

import (
	"math"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// Memory configures memory admission for one upstream: the in-flight
// requests' estimated transient memory (queue.Request.Memory, in bytes per
// vocabulary entry) is bounded by a share of the free memory the pod
// reports (pressure.FreeMemory, from the allocator exporter).
type Memory struct {
	// VocabSize is the served model's vocabulary. 0 turns memory admission
	// off for the upstream.
	VocabSize int64
	// Share is the fraction of the reported free memory that in-flight
	// requests' estimates may take, 0 < Share ≤ 1.
	Share float64
}

// budget is the upstream's memory budget in the queue's unit (bytes per
// vocabulary entry) for one round's signals: 0 (no bound) while memory
// admission is off or no source has reported free memory, at least 1
// otherwise, so that a pod with nothing free starts nothing new.
func (m Memory) budget(us pressure.UpstreamState) int64 {
	v, ok := us.Signals[pressure.FreeMemory]
	if m.VocabSize <= 0 || !ok || math.IsNaN(v.Value) {
		return 0
	}
	b := math.Floor(v.Value * m.Share / float64(m.VocabSize))
	return int64(max(1, min(b, math.MaxInt64/2)))
}

// tokenLimit is the token-budget window for a request window of limit out of
// maxInflight: maxTokens scaled by the same fraction, rounded up, so a cut
// of the window cuts it too. 0 (no bound) while maxTokens is 0.
func tokenLimit(maxTokens int64, limit, maxInflight int) int64 {
	if maxTokens <= 0 || maxInflight <= 0 {
		return 0
	}
	return max(1, int64(math.Ceil(float64(maxTokens)*float64(limit)/float64(maxInflight))))
}
