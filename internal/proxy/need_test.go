package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
)

// needAdmission records what each request asked of the window.
type needAdmission struct {
	*fakeAdmission
	mu    sync.Mutex
	needs []decide.Need
}

func (a *needAdmission) Acquire(ctx context.Context, need decide.Need, priority int, exclude []string) (decide.Slot, error) {
	a.mu.Lock()
	a.needs = append(a.needs, need)
	a.mu.Unlock()
	return a.fakeAdmission.Acquire(ctx, need, priority, exclude)
}

// TestNeedCountsSequences: the window is asked for the request's sequences, prompts × max(n, best_of), beside its token and
// memory estimates.
func TestNeedCountsSequences(t *testing.T) {
	adm := &needAdmission{fakeAdmission: newFakeAdmission(64, "pod-0")}
	pod := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"choices":[]}`) })
	tp := newTestProxy(t, pod, func(o *testOptions) { o.Admission = adm })
	adm.fakeAdmission.mu.Lock()
	adm.fakeAdmission.avail = tp.h.reg.Availability
	adm.fakeAdmission.mu.Unlock()
	for _, body := range []string{
		`{"model":"m","prompt":["a","b"],"n":3,"max_tokens":4}`,
		`{"model":"m","prompt":"a","max_tokens":4}`,
	} {
		res, err := http.Post(tp.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, want 200", body, res.StatusCode)
		}
	}
	adm.mu.Lock()
	defer adm.mu.Unlock()
	if len(adm.needs) != 2 || adm.needs[0].Seqs != 6 || adm.needs[1].Seqs != 1 || adm.needs[0].Memory != 6*32 {
		t.Errorf("needs %+v, want 6 sequences (memory 6 × 32) then 1", adm.needs)
	}
}
