package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/sim/traffic"
)

// doerFunc adapts a function to Doer.
type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// sent records what a fake doer received.
type sent struct {
	mu       sync.Mutex
	at       []time.Duration // since the start of the bubble
	streamed int
	long     int
	topP     []time.Duration // when the requests with top_p 0.9 were sent
	logprobs []time.Duration // when the requests with prompt_logprobs were sent
	odd      []string        // bodies outside both classes' ranges
}

func (s *sent) add(r *http.Request, start time.Time) {
	var body struct {
		traffic.ChatRequest
		TopP           *float64 `json:"top_p"`
		PromptLogprobs *int     `json:"prompt_logprobs"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, time.Since(start))
	if body.TopP != nil && *body.TopP == 0.9 {
		s.topP = append(s.topP, time.Since(start))
	}
	if body.PromptLogprobs != nil {
		s.logprobs = append(s.logprobs, time.Since(start))
	}
	if body.Stream {
		s.streamed++
	}
	if len(body.Messages) == 1 && len(body.Messages[0].Content) >= 8000 {
		s.long++
	}
	// Short chats: 50–200 tokens (4 characters each), up to 128 out,
	// streamed with usage; long documents: 2 000–4 000 tokens behind an
	// instruction, 128–512 out, answered whole.
	const instruction = "Summarise this document:\n"
	var n int
	if len(body.Messages) == 1 {
		n = len(body.Messages[0].Content)
	}
	short := body.Stream && body.StreamOptions != nil && n >= 200 && n <= 800 && body.MaxTokens >= 16 && body.MaxTokens <= 128
	long := !body.Stream && n >= 8000+len(instruction) && n <= 16000+len(instruction) && body.MaxTokens >= 128 && body.MaxTokens <= 512 &&
		strings.HasPrefix(body.Messages[0].Content, instruction)
	if body.Model != "m" || !short && !long {
		s.odd = append(s.odd, string(b[:min(len(b), 200)]))
	}
}

// inWindow counts requests sent in [from, to).
func (s *sent) inWindow(from, to time.Duration) int {
	n := 0
	for _, at := range s.at {
		if at >= from && at < to {
			n++
		}
	}
	return n
}

func response(status int, reason string, body io.Reader) *http.Response {
	h := http.Header{}
	if reason != "" {
		h.Set("X-Gatekeeper-Reason", reason)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(body)}
}

// failingReader fails after its data, like a stream cut short.
type failingReader struct{ r io.Reader }

func (f failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errors.New("connection reset")
	}
	return n, err
}

func TestGenerator(t *testing.T) {
	tests := []struct {
		name  string
		s     Settings
		run   time.Duration // how long Run's ctx lasts
		reply func(n int, r *http.Request) (*http.Response, error)
		check func(t *testing.T, st Stats, rec *sent, logs string)
	}{
		{
			name: "steady then burst, repeating",
			s:    Settings{QPS: 10, BurstFactor: 3, Steady: 10 * time.Second, Burst: 5 * time.Second, Documents: -1, ReportEvery: 5 * time.Second},
			run:  29 * time.Second, // ends inside the second burst, not on a phase boundary
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, st Stats, rec *sent, logs string) {
				steady := rec.inWindow(0, 10*time.Second) + rec.inWindow(15*time.Second, 25*time.Second)
				burst := rec.inWindow(10*time.Second, 15*time.Second) + rec.inWindow(25*time.Second, 29*time.Second)
				// 20 s of steady at 10/s and 9 s of burst at 30/s: per second, burst ≈ 3 × steady.
				if float64(burst)/9 < 2*float64(steady)/20 {
					t.Errorf("sent %d in 20 s of steady and %d in 9 s of burst, want the burst rate near 3×", steady, burst)
				}
				if got := strings.Count(logs, `"msg":"load phase changed"`); got != 4 {
					t.Errorf("%d phase change lines, want 4 (steady, burst, steady, burst)", got)
				}
				if got := strings.Count(logs, `"msg":"load summary"`); got < 5 {
					t.Errorf("%d summary lines in 29 s every 5 s, want at least 5", got)
				}
				if st.Statuses[200] != st.Sent || st.Skipped != 0 {
					t.Errorf("stats %+v, want every request answered 200, none skipped", st)
				}
				if rec.long == 0 || rec.streamed == 0 || rec.long+rec.streamed != len(rec.at) || len(rec.topP) != 0 {
					t.Errorf("%d long, %d streamed, %d top_p of %d, want both kinds (long ones not streamed), no top_p", rec.long, rec.streamed, len(rec.topP), len(rec.at))
				}
			},
		},
		{
			name: "steady, burst, steady, documents",
			s:    Settings{QPS: 10, BurstFactor: 3, Steady: 10 * time.Second, Burst: 5 * time.Second, Documents: 5 * time.Second, DocumentQPS: 20},
			run:  31 * time.Second, // one cycle, then the next steady phase
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, st Stats, rec *sent, logs string) {
				docs := rec.inWindow(25*time.Second, 30*time.Second)
				others := len(rec.at) - docs
				// 5 s at 20/s, all documents, half of them with top_p; top_p nowhere else.
				inDocs := 0
				for _, at := range rec.topP {
					if at >= 25*time.Second && at < 30*time.Second {
						inDocs++
					}
				}
				if docs < 60 || docs > 140 || inDocs != len(rec.topP) || inDocs < docs/4 || inDocs > 3*docs/4 {
					t.Errorf("%d sent in the document burst, %d with top_p (%d in all), want about 100, half of them, none elsewhere", docs, inDocs, len(rec.topP))
				}
				if rec.long < docs || others-(rec.long-docs) != rec.streamed {
					t.Errorf("%d long, %d streamed of %d (%d in the burst), want documents only in the burst", rec.long, rec.streamed, len(rec.at), docs)
				}
				for _, want := range []string{`"state":"steady"`, `"state":"burst"`, `"state":"documents"`} {
					if !strings.Contains(logs, `"msg":"load phase changed",`+want) || !strings.Contains(logs, `"msg":"load phase ended",`+want) {
						t.Errorf("logs lack the change and the end of %s:\n%s", want, logs)
					}
				}
				if !strings.Contains(logs, `"msg":"load phase ended","state":"documents","short_served":0,"short_p99_s":0,"long_served":`) {
					t.Errorf("the documents' end line does not count long answers only:\n%s", logs)
				}
				if st.Statuses[200] != st.Sent {
					t.Errorf("stats %+v, want every request answered 200", st)
				}
			},
		},
		{
			name: "sends what Arrivals yields",
			s: Settings{QPS: 10, Steady: 5 * time.Second, Burst: 2 * time.Second, Documents: 3 * time.Second,
				DocumentPromptLogprobs: 0.5},
			run: 21 * time.Second, // two cycles and a second
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, _ Stats, rec *sent, _ string) {
				arr, err := Settings{QPS: 10, Steady: 5 * time.Second, Burst: 2 * time.Second, Documents: 3 * time.Second,
					DocumentPromptLogprobs: 0.5, Seed: 1}.Arrivals()
				if err != nil {
					t.Fatal(err)
				}
				var want, wantTopP, wantLogprobs []time.Duration
				long := 0
				for a := arr.Next(); a.At < 21*time.Second; a = arr.Next() {
					want = append(want, a.At)
					if a.TopP {
						wantTopP = append(wantTopP, a.At)
					}
					if a.PromptLogprobs {
						if a.Phase != 3 {
							t.Errorf("prompt_logprobs in phase %d, want the document burst's only", a.Phase)
						}
						wantLogprobs = append(wantLogprobs, a.At)
					}
					if a.Class == "long" {
						long++
					}
				}
				slices.Sort(rec.at)
				slices.Sort(rec.topP)
				slices.Sort(rec.logprobs)
				if !slices.Equal(rec.at, want) || !slices.Equal(rec.topP, wantTopP) || rec.long != long {
					t.Errorf("sent at %v (top_p %v, %d long), want Arrivals' %v (top_p %v, %d long)", rec.at, rec.topP, rec.long, want, wantTopP, long)
				}
				if len(wantLogprobs) == 0 || !slices.Equal(rec.logprobs, wantLogprobs) {
					t.Errorf("prompt_logprobs sent at %v, want Arrivals' %v (some)", rec.logprobs, wantLogprobs)
				}
			},
		},
		{
			name: "documents only",
			s:    Settings{QPS: 10, LongFraction: 1},
			run:  10 * time.Second,
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, st Stats, rec *sent, _ string) {
				if rec.long != len(rec.at) || rec.streamed != 0 || st.Sent < 50 {
					t.Errorf("%d long and %d streamed of %d, want every one a document (about 100)", rec.long, rec.streamed, len(rec.at))
				}
			},
		},
		{
			name: "chats only",
			s:    Settings{QPS: 10, LongFraction: -1},
			run:  10 * time.Second,
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, st Stats, rec *sent, _ string) {
				if rec.streamed != len(rec.at) || rec.long != 0 || st.Sent < 50 {
					t.Errorf("%d long and %d streamed of %d, want every one a streamed chat (about 100)", rec.long, rec.streamed, len(rec.at))
				}
			},
		},
		{
			name: "bounded concurrency skips arrivals",
			s:    Settings{QPS: 10, MaxConcurrent: 3},
			run:  10 * time.Second,
			reply: func(_ int, r *http.Request) (*http.Response, error) {
				<-r.Context().Done() // never answers: the pod is stuck
				return nil, r.Context().Err()
			},
			check: func(t *testing.T, st Stats, _ *sent, _ string) {
				if st.Sent != 3 || st.Canceled != 3 || st.Skipped != st.Arrivals-3 || st.Arrivals < 10 {
					t.Errorf("stats %+v, want 3 sent and canceled at the end, the other arrivals skipped", st)
				}
			},
		},
		{
			name: "max requests ends the run",
			s:    Settings{QPS: 10, MaxRequests: 7},
			run:  time.Hour,
			reply: func(int, *http.Request) (*http.Response, error) {
				return response(200, "", strings.NewReader("{}")), nil
			},
			check: func(t *testing.T, st Stats, rec *sent, _ string) {
				if st.Arrivals != 7 || st.Sent != 7 || len(rec.at) != 7 || rec.at[6] > time.Minute {
					t.Errorf("stats %+v, sent at %v, want 7 within a minute and then the end", st, rec.at)
				}
			},
		},
		{
			name: "statuses, reasons and errors add up",
			s:    Settings{QPS: 20},
			run:  10 * time.Second,
			reply: func(n int, _ *http.Request) (*http.Response, error) {
				switch n % 5 {
				case 0:
					return response(200, "", strings.NewReader("data: [DONE]\n\n")), nil
				case 1:
					return response(429, "rate_limited", strings.NewReader("{}")), nil
				case 2:
					r := response(503, "queue_full", strings.NewReader("{}"))
					if n%10 == 2 {
						r.Header.Set("Retry-After", "2")
					}
					return r, nil
				case 3:
					return response(200, "", failingReader{strings.NewReader("data: {}\n\n")}), nil
				}
				return nil, errors.New("connection refused")
			},
			check: func(t *testing.T, st Stats, _ *sent, logs string) {
				if st.Statuses[429] != st.Reasons["rate_limited"] || st.Statuses[503] != st.Reasons["queue_full"] ||
					st.Statuses[200] == 0 || st.Errors == 0 || st.Canceled != 0 {
					t.Errorf("stats %+v, want 200s, 429s and 503s with their reasons, and errors", st)
				}
				// The replies cycle through five outcomes; count each residue.
				count := func(r int64) int64 { return (st.Sent - r + 4) / 5 }
				if st.Statuses[200] != count(0) || st.Statuses[429] != count(1) || st.Statuses[503] != count(2) ||
					st.Errors != count(3)+count(4) {
					t.Errorf("stats %+v, want %d, %d, %d of 200, 429, 503 and %d errors", st,
						count(0), count(1), count(2), count(3)+count(4))
				}
				if st.RetryAfter503 != (st.Sent+7)/10 {
					t.Errorf("stats %+v, want %d 503s with Retry-After (every other one)", st, (st.Sent+7)/10)
				}
				if !strings.Contains(logs, `"msg":"load stopped"`) || !strings.Contains(logs, `"status_429":`) || !strings.Contains(logs, `"retry_after_503":`) {
					t.Errorf("no final summary with the 429 count:\n%s", logs)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				rec := &sent{}
				var mu sync.Mutex
				calls := 0
				var logs bytes.Buffer // written from Run's goroutines, read after Run
				s := tt.s
				s.URL, s.Model, s.Seed = "http://gatekeeper.test", "m", 1
				s.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				s.Client = doerFunc(func(r *http.Request) (*http.Response, error) {
					rec.add(r, start)
					mu.Lock()
					n := calls
					calls++
					mu.Unlock()
					return tt.reply(n, r)
				})
				g, err := New(s)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), tt.run)
				defer cancel()
				if err := g.Run(ctx); err != nil {
					t.Fatalf("Run() = %v", err)
				}
				st := g.Stats()
				if len(rec.odd) > 0 {
					t.Errorf("%d bodies outside the mix, the first: %s", len(rec.odd), rec.odd[0])
				}
				if st.Sent+st.Skipped != st.Arrivals || st.Finished() != st.Sent || st.InFlight != 0 {
					t.Errorf("stats %+v: want arrivals = sent + skipped, sent = finished, nothing pending after Run", st)
				}
				tt.check(t, st, rec, logs.String())
			})
		})
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
	}{
		{name: "no url", s: Settings{Model: "m"}},
		{name: "no model", s: Settings{URL: "http://x"}},
		{name: "burst factor below 1", s: Settings{URL: "http://x", Model: "m", BurstFactor: 0.5}},
		{name: "long fraction above 1", s: Settings{URL: "http://x", Model: "m", LongFraction: 1.5}},
		{name: "negative qps", s: Settings{URL: "http://x", Model: "m", QPS: -1}},
		{name: "negative document qps", s: Settings{URL: "http://x", Model: "m", DocumentQPS: -1}},
		{name: "prompt_logprobs share above 1", s: Settings{URL: "http://x", Model: "m", DocumentPromptLogprobs: 1.5}},
		{name: "prompt_logprobs share NaN", s: Settings{URL: "http://x", Model: "m", DocumentPromptLogprobs: math.NaN()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.s); err == nil || !strings.HasPrefix(err.Error(), "load: ") {
				t.Errorf("New(%+v) = %v, want a load: error", tt.s, err)
			}
		})
	}
}
