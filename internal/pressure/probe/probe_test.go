package probe

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// fixture reads one of package pressure's test answers.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serve answers every GET with status and body; accept returns the Accept
// header of the last request it was sent ("" before any). Parallel tests
// share one server, so the header is stored atomically.
func serve(t *testing.T, status int, body []byte) (url string, accept func() string) {
	t.Helper()
	var last atomic.Pointer[string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Accept")
		last.Store(&a)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() string {
		if a := last.Load(); a != nil {
			return *a
		}
		return ""
	}
}

// table renders rows the way the tests compare them: "signal gpu value"
// with "c" after a counter.
func table(rows []Row) string {
	var b strings.Builder
	for _, r := range rows {
		gpu := r.gpu
		if gpu == "" {
			gpu = "-"
		}
		b.WriteString(string(r.Signal) + " " + gpu + " " + formatValue(r.Value))
		if r.counter {
			b.WriteString(" c")
		}
		b.WriteString("; ")
	}
	return b.String()
}

// The Accept headers gatekeeper's monitor sends (pressure.HTTPFormat).
const (
	acceptMetrics = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
	acceptJSON    = "application/json"
	acceptAny     = "application/json;q=0.9,text/plain;version=0.0.4;q=0.8,*/*;q=0.1"
	maxJSONBytes  = 1 << 20
)

func TestRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, fixture string
		kind          pressure.Kind
		wantKind      pressure.Kind
		guessed       bool
		accept        string
		rows          string
	}{
		{name: "vllm guessed", fixture: "vllm-two-engines.txt", wantKind: pressure.KindVLLM, guessed: true, accept: acceptAny,
			rows: "kv_cache_usage - 0.75; preemption_rate - 11 c; waiting - 3; running - 7; "},
		{name: "vllm given", fixture: "vllm-two-engines.txt", kind: pressure.KindVLLM, wantKind: pressure.KindVLLM, accept: acceptMetrics,
			rows: "kv_cache_usage - 0.75; preemption_rate - 11 c; waiting - 3; running - 7; "},
		{name: "dcgm guessed", fixture: "dcgm-two-gpus.txt", wantKind: pressure.KindDCGM, guessed: true, accept: acceptAny,
			rows: "memory_used 0 0.9; memory_used 1 0.5; "},
		{name: "memory_blocks guessed", fixture: "memory-blocks.json", wantKind: pressure.KindMemoryBlocks, guessed: true, accept: acceptAny,
			rows: "fragmentation 0 1.5000000000873115; memory_used 0 0.8; alloc_retry_rate 0 4 c; effective_utilization 0 0.8571428571428571; free_memory_bytes 0 17179869184; "},
		{name: "memory_blocks given", fixture: "memory-blocks.json", kind: pressure.KindMemoryBlocks, wantKind: pressure.KindMemoryBlocks, accept: acceptJSON,
			rows: "fragmentation 0 1.5000000000873115; memory_used 0 0.8; alloc_retry_rate 0 4 c; effective_utilization 0 0.8571428571428571; free_memory_bytes 0 17179869184; "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, accept := serve(t, http.StatusOK, fixture(t, tt.fixture))
			r, err := Read(t.Context(), Settings{URL: url + "/metrics", Kind: tt.kind})
			if err != nil {
				t.Fatalf("Read() = %v", err)
			}
			if r.kind != tt.wantKind || r.guessed != tt.guessed || r.url != url+"/metrics" {
				t.Errorf("Read() kind, guessed, url = %s, %v, %s; want %s, %v, %s", r.kind, r.guessed, r.url, tt.wantKind, tt.guessed, url+"/metrics")
			}
			if got := table(r.Rows); got != tt.rows {
				t.Errorf("Read() rows = %s\nwant %s", got, tt.rows)
			}
			if got := accept(); got != tt.accept {
				t.Errorf("Accept = %q, want %q", got, tt.accept)
			}
		})
	}
}

// TestReadMatchesParsers holds probe to gatekeeper: its rows are exactly
// the values pressure's parsers yield for the same answer.
func TestReadMatchesParsers(t *testing.T) {
	t.Parallel()
	for file, parse := range map[string]func([]byte) (pressure.Reading, error){
		"vllm-two-engines.txt": pressure.ParseVLLMMetrics,
		"dcgm-two-gpus.txt":    pressure.ParseDCGMMetrics,
		"memory-blocks.json":   pressure.ParseMemoryBlocks,
	} {
		body := fixture(t, file)
		rd, err := parse(body)
		if err != nil {
			t.Fatal(err)
		}
		n := len(rd.Values) + len(rd.Counters)
		for _, g := range rd.GPUs {
			n += len(g.Values) + len(g.Counters)
		}
		url, _ := serve(t, http.StatusOK, body)
		r, err := Read(t.Context(), Settings{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Rows) != n {
			t.Errorf("%s: Read() = %d rows, the parser yields %d values", file, len(r.Rows), n)
		}
		for _, row := range r.Rows {
			want, ok := value(rd, row)
			if !ok || want != row.Value {
				t.Errorf("%s: row %+v, parser %v (found %v)", file, row, want, ok)
			}
		}
	}
}

// value finds row's value in rd.
func value(rd pressure.Reading, row Row) (float64, bool) {
	pick := func(values, counters map[pressure.Signal]float64) (float64, bool) {
		if row.counter {
			v, ok := counters[row.Signal]
			return v, ok
		}
		v, ok := values[row.Signal]
		return v, ok
	}
	if row.gpu == "" {
		return pick(rd.Values, rd.Counters)
	}
	for _, g := range rd.GPUs {
		if g.ID == row.gpu && g.UUID == row.uuid {
			return pick(g.Values, g.Counters)
		}
	}
	return 0, false
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL + "/metrics"
	refused.Close() // nothing listens there any more: connection refused
	okURL, _ := serve(t, http.StatusOK, []byte("# nothing here\nup 1\n"))
	notFound, _ := serve(t, http.StatusNotFound, []byte("404 page not found\n"))
	badJSON, _ := serve(t, http.StatusOK, []byte(`{"memory_blocks": [{"gpu_id": true}]}`))
	badText, _ := serve(t, http.StatusOK, []byte("vllm:num_requests_running{engine=\"0\" 3\n"))
	huge, _ := serve(t, http.StatusOK, append([]byte(`{"memory_blocks": [`), bytes.Repeat([]byte(" "), maxJSONBytes)...))
	tests := []struct {
		name string
		s    Settings
		want []string // substrings of the error
		is   error
	}{
		{name: "connection refused", s: Settings{URL: refusedURL}, want: []string{refusedURL, "connection refused"}},
		{name: "status", s: Settings{URL: notFound + "/metrics"}, want: []string{"GET " + notFound + "/metrics: status 404 Not Found", `"404 page not found"`}},
		{name: "unguessable", s: Settings{URL: okURL}, want: []string{okURL, "pass -kind"}, is: errUnknownKind},
		{name: "no vllm metric", s: Settings{URL: okURL, Kind: pressure.KindVLLM}, want: []string{okURL + ": not a vllm answer"}, is: pressure.ErrNoMetrics},
		{name: "no dcgm metric", s: Settings{URL: okURL, Kind: pressure.KindDCGM}, want: []string{okURL + ": not a dcgm answer"}, is: pressure.ErrNoMetrics},
		{name: "unparsable text", s: Settings{URL: badText}, want: []string{badText + ": not a vllm answer", "parsing metrics"}},
		{name: "unparsable json", s: Settings{URL: badJSON}, want: []string{badJSON + ": not a memory_blocks answer", "gpu_id"}},
		{name: "not json", s: Settings{URL: okURL, Kind: pressure.KindMemoryBlocks}, want: []string{"not a memory_blocks answer"}},
		{name: "allocator answer too large", s: Settings{URL: huge}, want: []string{huge, "over 1048576 bytes"}, is: pressure.ErrBodyTooLarge},
		{name: "no scheme", s: Settings{URL: "localhost:8000/metrics"}, want: []string{`did you mean http://localhost:8000/metrics?`}},
		{name: "not http", s: Settings{URL: "ftp://x/metrics"}, want: []string{`"ftp://x/metrics" is not an http(s) URL`}},
		{name: "no url", s: Settings{}, want: []string{"a URL is required"}},
		{name: "unknown kind", s: Settings{URL: okURL, Kind: "prometheus"}, want: []string{`unknown kind "prometheus"`}},
		{name: "nvml with url", s: Settings{URL: okURL, Kind: pressure.KindNVML}, want: []string{"takes no URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Read(t.Context(), tt.s)
			if err == nil {
				t.Fatalf("Read(%+v) = nil error, want one", tt.s)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Read(%+v) = %q, want it to contain %q", tt.s, err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("Read(%+v) = %v, want errors.Is %v", tt.s, err, tt.is)
			}
		})
	}
}

func TestGuess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want pressure.Kind
		ok   bool
	}{
		{string(fixture(t, "vllm-two-engines.txt")), pressure.KindVLLM, true},
		{string(fixture(t, "dcgm-two-gpus.txt")), pressure.KindDCGM, true},
		{string(fixture(t, "memory-blocks.json")), pressure.KindMemoryBlocks, true},
		{"  [{\"gpu_id\": 0}]", pressure.KindMemoryBlocks, true},
		{"go_goroutines 8\n", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got, ok := guess([]byte(tt.body)); got != tt.want || ok != tt.ok {
			t.Errorf("Guess(%.40q) = %q, %v; want %q, %v", tt.body, got, ok, tt.want, tt.ok)
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	r := Result{url: "http://pod:8000/metrics", kind: pressure.KindDCGM, guessed: true, Rows: []Row{
		{Signal: pressure.KVCacheUsage, Value: 0.5},
		{Signal: pressure.PreemptionRate, Value: 11, counter: true},
		{Signal: pressure.FreeMemory, gpu: "0", uuid: "GPU-aaa", Value: 17179869184},
	}}
	var b bytes.Buffer
	if err := r.writeTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `dcgm http://pod:8000/metrics (kind guessed from the answer; -kind sets it)

SIGNAL             GPU          VALUE
kv_cache_usage     -            0.5
preemption_rate    -            11 (counter)
free_memory_bytes  0 (GPU-aaa)  17179869184

(counter): a running total; gatekeeper turns two readings into the per-second rate of that name.
`
	if b.String() != want {
		t.Errorf("WriteTable() =\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := (Result{kind: pressure.KindNVML}).writeTable(&b); err != nil || !strings.Contains(b.String(), "(no value)") {
		t.Errorf("WriteTable() of no rows = %q, %v; want (no value)", b.String(), err)
	}
}
