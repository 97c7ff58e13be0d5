package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// onePodDigests pin what one pod gave before the replay had a pool (commit
// 03e46ba: d14352e, whose figures these are, with the per-tenant fields
// that TenantResult gained there): every field of the Result but Wall, as
// JSON, hashed. A pool of
// one pod must replay exactly as the single-pod runner did.
var onePodDigests = map[string]string{
	"chat/deadline-only":         "eac295e96bba500b",
	"chat/gatekeeper+exporter":   "b6288b3ad11d839a",
	"chat/gatekeeper":            "9fe75bf61119353e",
	"chat/qps-only":              "5e8c53ff6ddd6a9d",
	"chat/unprotected":           "1d18ec6fd5aa588d",
	"ooming/deadline-only":       "3a119eb6ee5ba185",
	"ooming/gatekeeper+exporter": "1be1056213cd29c9",
	"ooming/gatekeeper":          "56ddf54c3d347ff4",
	"ooming/qps-only":            "ba7207fcb2ce83a9",
	"ooming/unprotected":         "8fb33de6d617a59d",
}

// TestOnePodIsTheOldRunner runs each policy on chat and on an OOMing
// prompt-logprobs pod (series and timelines recorded) with Pods 0 and 1,
// and holds both to the digests pinned before the pool existed.
func TestOnePodIsTheOldRunner(t *testing.T) {
	for _, p := range Policies() {
		for _, kind := range []string{"chat", "ooming"} {
			s := Settings{Engine: sim.Settings{GPU: h100()}, Trace: TraceSettings{Duration: 3 * time.Minute, Seed: 3}, Policy: p}
			if kind == "ooming" {
				s = ooming(p, 4*time.Minute, 2)
			}
			s.SeriesEvery = 10 * time.Second
			name := kind + "/" + p.String()
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				for _, pods := range []int{0, 1} {
					s.Pods = pods
					r, err := Run(s)
					if err != nil {
						t.Fatal(err)
					}
					got := digest(t, r)
					if want := onePodDigests[name]; got != want {
						t.Errorf("%s, Pods %d: digest %s, want %s (OOMs %d, served %d)", name, pods, got, want, r.OOMs, r.Outcomes.Served)
					}
					if r.Pool.Pods != 1 || len(r.Pool.Started) != 1 {
						t.Errorf("Pods %d: pool %+v, want one pod", pods, r.Pool)
					}
				}
			})
		}
	}
}

func digest(t *testing.T, r Result) string {
	t.Helper()
	r.Wall = 0
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// The pool's figures came with the pool: Pool, the last field, is cut.
	i := bytes.LastIndex(b, []byte(`,"Pool":`))
	if i < 0 {
		t.Fatalf("no Pool in %s", b)
	}
	b = append(b[:i], '}')
	return fmt.Sprintf("%x", sha256.Sum256(b))[:16]
}
