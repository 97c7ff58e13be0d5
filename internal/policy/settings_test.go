package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
	"github.com/gatekeeper-dev/gatekeeper/internal/scale"
)

// nvmlPolicy lists nvml twice: as a node source (line 3) and as an
// upstream's own (line 8).
const nvmlPolicy = `pressure:
  sources:
    - {kind: nvml}
upstreams:
  - {name: a, url: "http://a:8000", gpus: ["0"], sources: [{kind: vllm, url: "http://a:8000/metrics"}]}
  - name: b
    url: http://b:8000
    sources: [{kind: nvml, name: node-b}]
    gpus: ["1"]
`

// writePolicy writes text to a policy file and returns its path.
func writePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// problems flattens the errors.Join that config's loaders return.
func problems(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, problems(e)...)
	}
	return out
}

func TestSettingsFrom(t *testing.T) {
	cfg := config.Default()
	s, err := from(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Limiter.QPS != cfg.FastBreaker.QPS || s.Limiter.Burst != cfg.FastBreaker.Burst {
		t.Errorf("limiter = %+v, want the fast_breaker keys", s.Limiter)
	}
	if s.Policy.MaxWait != cfg.Queue.MaxWait || s.Policy.RetryAfter != cfg.Shed.RetryAfter ||
		s.Policy.MaxBodyBytes != cfg.Server.MaxBodyBytes || s.Policy.CharsPerToken != cfg.Estimate.CharsPerToken {
		t.Errorf("policy = %+v, want queue.max_wait, shed.retry_after, server.max_body_bytes, estimate", s.Policy)
	}
	if len(s.Upstreams) != len(cfg.Upstreams) || s.Upstreams[0].URL.String() != cfg.Upstreams[0].URL ||
		s.Upstreams[0].maxInflight != cfg.Upstreams[0].MaxInflight {
		t.Errorf("upstreams = %+v, want %+v", s.Upstreams, cfg.Upstreams)
	}
	if s.Transport.IdleConnTimeout >= 5*time.Second {
		t.Errorf("idle conn timeout %v must stay below vLLM's 5 s keep-alive", s.Transport.IdleConnTimeout)
	}
}

func TestPressureSettings(t *testing.T) {
	cfg, err := config.Parse([]byte(`
upstreams:
  - name: a
    url: http://127.0.0.1:8000
    gpus: ["0"]
    sources:
      - {kind: vllm, url: "http://127.0.0.1:8000/metrics", timeout: 300ms}
pressure:
  interval: 1s
  stale_after: 3s
  sources: [{kind: dcgm, url: "http://127.0.0.1:9400/metrics"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := pressureSettings(cfg, nil)
	if s.Interval != time.Second || s.StaleAfter != 3*time.Second {
		t.Errorf("interval, stale_after = %v, %v; want 1s, 3s", s.Interval, s.StaleAfter)
	}
	if len(s.Sources) != 1 || s.Sources[0].Kind != "dcgm" {
		t.Errorf("node sources = %+v, want one dcgm", s.Sources)
	}
	u := s.Upstreams[0]
	if u.Name != "a" || len(u.GPUs) != 1 || len(u.Sources) != 1 || u.Sources[0].Timeout != 300*time.Millisecond {
		t.Errorf("upstream = %+v, want a with gpu 0 and its vllm source at 300ms", u)
	}
}

func TestEmptyAdminTokenFileRefused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadAdminToken(f); err == nil || !strings.Contains(err.Error(), "server.admin_token_file") {
		t.Errorf("LoadAdminToken(empty file) = %v, want an error naming the key", err)
	}
}

func TestUnbuiltSources(t *testing.T) {
	t.Parallel()
	cfg, err := config.LoadFile(writePolicy(t, nvmlPolicy))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  *config.Config
		nvml bool
		want []string // the errors, in order
	}{
		{"nvml compiled in", cfg, true, nil},
		{"nvml not compiled in", cfg, false, []string{
			"config: line 3: pressure.sources[0].kind: " + NVMLNotCompiled,
			"config: line 8: upstreams[1].sources[0].kind: " + NVMLNotCompiled,
		}},
		{"no nvml source", config.Default(), false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			if err := unbuiltSources(tt.cfg, tt.nvml); err != nil {
				for _, e := range problems(err) {
					if fe := (*config.FieldError)(nil); !errors.As(e, &fe) {
						t.Errorf("UnbuiltSources() holds %T %v, want a *config.FieldError (-check's shape)", e, e)
					}
					got = append(got, e.Error())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("UnbuiltSources(nvml %v) =\n%s\nwant\n%s", tt.nvml, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	for _, w := range []string{"-tags nvml", "VARIANT=nvml", "kind: dcgm", "kind: memory_blocks"} {
		if !strings.Contains(NVMLNotCompiled, w) {
			t.Errorf("the nvml error %q does not mention %s", NVMLNotCompiled, w)
		}
	}
}

// TestScaleSettings: every scaling key reaches scale.Settings, and the
// policy's scaling.good.yaml makes a valid Scaler.
func TestScaleSettings(t *testing.T) {
	t.Parallel()
	c, err := config.LoadFile("../config/testdata/scaling.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := ScaleSettings(c.Scaling, nil)
	want := scale.Settings{Interval: 15 * time.Second, Horizon: 4 * time.Minute, MinReplicas: 2, MaxReplicas: 12,
		Stabilization: 5 * time.Minute, TargetUtilization: 0.8, Alpha: 0.5, Beta: 0.3, PodRate: 6}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ScaleSettings() = %+v, want %+v", got, want)
	}
	if _, err := scale.New(got, nil); err != nil {
		t.Errorf("scale.New(ScaleSettings()) = %v", err)
	}
}

func TestShareSettings(t *testing.T) {
	const keyA = "sha256:2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6"
	const keyB = "sha256:18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4"
	const keyC = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	for _, tt := range []struct {
		name   string
		policy string
		want   map[string]queue.Share
		def    float64
		// unshared: fairness.share_fast_breaker is false, so the fast
		// breaker gets no shares.
		unshared bool
	}{
		{name: "no shares", policy: `fairness: {tenant_header: X-Tenant, tenants: [{name: a, key: "` + keyA + `"}]}`},
		{name: "min and max", policy: `fairness:
  tenant_header: X-Tenant
  tenants:
    - {name: heavy, key: "` + keyA + `", max_share: 0.8}
    - {name: light, key: "` + keyB + `", min_share: 0.2}
    - {name: plain, key: "` + keyC + `"}
`, want: map[string]queue.Share{"heavy": {Max: 0.8}, "light": {Min: 0.2}}},
		{name: "a default cap leaves the named tenants uncapped", policy: `fairness:
  tenant_header: X-Tenant
  default_max_share: 0.5
  tenants:
    - {name: light, key: "` + keyB + `", min_share: 0.2}
    - {name: plain, key: "` + keyC + `"}
`, want: map[string]queue.Share{"light": {Min: 0.2}, "plain": {}}, def: 0.5},
		{name: "shares kept out of the fast breaker", policy: `fairness:
  tenant_header: X-Tenant
  share_fast_breaker: false
  tenants:
    - {name: heavy, key: "` + keyA + `", max_share: 0.8}
`, want: map[string]queue.Share{"heavy": {Max: 0.8}}, unshared: true},
		{name: "with a cluster the global bucket is Redis's, not split", policy: `cluster: {redis: {url: "redis://r:6379/0"}}
fairness:
  tenant_header: X-Tenant
  tenants:
    - {name: heavy, key: "` + keyA + `", max_share: 0.8}
`, want: map[string]queue.Share{"heavy": {Max: 0.8}}, unshared: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte("upstreams: [{url: \"http://a:8000\"}]\n" + tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			s, err := from(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Queue.Shares, tt.want) || s.Queue.DefaultMaxShare != tt.def {
				t.Errorf("queue shares = %v, default %v; want %v, %v", s.Queue.Shares, s.Queue.DefaultMaxShare, tt.want, tt.def)
			}
			if _, err := queue.NewCore(s.Queue); err != nil {
				t.Errorf("the queue refuses the mapped shares: %v", err)
			}
			wantLim := map[string]breaker.TenantShare(nil)
			for name, sh := range tt.want {
				if wantLim == nil {
					wantLim = map[string]breaker.TenantShare{}
				}
				wantLim[name] = breaker.TenantShare{Min: sh.Min, Max: sh.Max}
			}
			wantDef := tt.def
			if tt.unshared {
				wantLim, wantDef = nil, 0
			}
			if !reflect.DeepEqual(s.Limiter.Shares, wantLim) || s.Limiter.DefaultMaxShare != wantDef {
				t.Errorf("fast breaker shares = %v, default %v; want %v, %v", s.Limiter.Shares, s.Limiter.DefaultMaxShare, wantLim, wantDef)
			}
			if _, err := breaker.NewLimiter(s.Limiter); err != nil {
				t.Errorf("the fast breaker refuses the mapped shares: %v", err)
			}
		})
	}
}

// TestIdleConnsCoverTheWindows: the pooled idle connections per pod are at
// least the largest max_inflight, so a full window's connections are reused
// after a burst (issue 38), and never fewer than the key says.
func TestIdleConnsCoverTheWindows(t *testing.T) {
	for _, tt := range []struct {
		name           string
		perHost, large int
		want           int
	}{
		{"a window above the key raises it", 256, 1024, 1024},
		{"the key above every window stays", 2048, 1024, 2048},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Transport.MaxIdleConnsPerHost = tt.perHost
			cfg.Upstreams = []config.Upstream{{Name: "a", URL: "http://a:8000", MaxInflight: 16, MinInflight: 1},
				{Name: "b", URL: "http://b:8000", MaxInflight: tt.large, MinInflight: 1}}
			s, err := from(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Transport.MaxIdleConnsPerHost; got != tt.want {
				t.Errorf("MaxIdleConnsPerHost = %d, want %d", got, tt.want)
			}
		})
	}
}
