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
// d14352e): every field of the Result but Wall, as JSON, hashed. A pool of
// one pod must replay exactly as the single-pod runner did.
var onePodDigests = map[string]string{
	"chat/deadline-only":         "17df7bc22412e671",
	"chat/gatekeeper+exporter":   "159a6222495c5128",
	"chat/gatekeeper":            "b7c361f081d7181c",
	"chat/qps-only":              "b310f7bf1ba5ef33",
	"chat/unprotected":           "ff365a078d78dc17",
	"ooming/deadline-only":       "c5c23b3791ba0cc0",
	"ooming/gatekeeper+exporter": "001bd2ce4f68b8d7",
	"ooming/gatekeeper":          "1146e01436c7cbb7",
	"ooming/qps-only":            "fb3ba087401b7622",
	"ooming/unprotected":         "c27e5a4e2fadf589",
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
