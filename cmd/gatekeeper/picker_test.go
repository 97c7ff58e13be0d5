package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/gatekeeper-dev/gatekeeper/internal/config"
)

// gatekeeper in endpoint-picker mode, end to end: its pods come from an
// InferencePool (client-go's fake API server), Envoy's part is played over
// a real gRPC connection, and a pod the pool stops listing stops being
// picked.
func TestEndpointPickerFromInferencePool(t *testing.T) {
	t.Parallel()
	podURL := newPodServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
		}
	}))
	_, port, _ := net.SplitHostPort(podURL[len("http://"):])
	portN, _ := strconv.Atoi(port)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "vllm", "namespace": "ai"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts": []any{map[string]any{"number": int64(portN)}}},
	}}
	vllm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "vllm-0", "namespace": "ai", "labels": map[string]any{"app": "vllm"}},
		"status": map[string]any{"phase": "Running", "podIP": "127.0.0.1",
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
	}}
	gvr := schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "InferencePoolList", pods: "PodList"}, pool, vllm)
	clients := &kubeClients{dynamic: dyn}
	policy := `
endpoint_picker: {health_listen: "127.0.0.1:0"}
server: {drain_delay: 0s}
upstreams:
  - inference_pool: {name: vllm}
    max_inflight: 2
`
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan struct{}, 4)
	a, err := newApp(cfg, appOptions{path: path, kube: clients, namespace: "ai", stage: func(name string) {
		if name == "pools" {
			applied <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.serveOn(ctx, gl, al, make(chan os.Signal)) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serveOn() = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	waitApplied(t, applied)

	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if got := pickOnce(t, conn, body); got != "127.0.0.1:"+port {
		t.Fatalf("pick = %q, want the pool's pod 127.0.0.1:%s", got, port)
	}
	if st := readiness(t, a); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("readiness on the plaintext health listener = %v, want SERVING", st)
	}

	// The pod turns unready: the pool lists no endpoint, so nothing is picked.
	unready := vllm.DeepCopy()
	if err := unstructured.SetNestedSlice(unready.Object, []any{map[string]any{"type": "Ready", "status": "False"}},
		"status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(pods).Namespace("ai").UpdateStatus(context.Background(), unready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, applied)
	if got := pickOnce(t, conn, body); got != "503" {
		t.Fatalf("with no ready pod: %q, want a 503 refusal", got)
	}
	if st := readiness(t, a); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness with no pod = %v, want NOT_SERVING", st)
	}
	stop()
}

func waitApplied(t *testing.T, applied <-chan struct{}) {
	t.Helper()
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's pods were never applied")
	}
}

// pickOnce sends one request as Envoy does and returns the pick, or the
// refusal's status.
func pickOnce(t *testing.T, conn *grpc.ClientConn, body string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{
			Headers: []*corev3.HeaderValue{hv(":method", "POST"), hv(":path", "/v1/chat/completions"), hv("content-type", "application/json")}}}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	}
	for _, m := range msgs {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ir := m.GetImmediateResponse(); ir != nil {
		return strconv.Itoa(int(ir.GetStatus().GetCode()))
	}
	for _, o := range m.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			_ = s.CloseSend()
			return string(o.GetHeader().GetRawValue())
		}
	}
	t.Fatalf("neither a pick nor a refusal: %v", m)
	return ""
}

func readiness(t *testing.T, a *app) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	addr, _ := a.pickerHealthAddr.Load().(string)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetStatus()
}

// In endpoint-picker mode no HTTP front is built: readiness and the drain
// are the decision core's, and each step of a shutdown reaches the
// picker's readiness, its picks and the admin listener's state through the
// core alone.
func TestPickerDrainsThroughTheCore(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
endpoint_picker: {health_listen: "off"}
upstreams: [{name: pod, url: "http://10.0.0.1:8000"}]
fast_breaker: {qps: 0}
health_check: {interval: 1h, timeout: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, appOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if a.handler != nil {
		t.Fatal("newApp built a proxy.Handler in endpoint-picker mode")
	}
	if a.health == nil {
		t.Fatal("newApp built no health check in endpoint-picker mode")
	}
	p, conn := dialPicker(t, a)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	steps := []struct {
		name     string
		act      func()
		ready    bool   // the picker's readiness and /admin/state's ready
		draining bool   // /admin/state's draining
		pick     string // what a new request gets
	}{
		{name: "serving", act: func() {}, ready: true, pick: "10.0.0.1:8000"},
		{name: "step one: unready, still picking", act: a.core.StartDrain, draining: true, pick: "10.0.0.1:8000"},
		{name: "step two: new work refused", act: a.core.Drain, draining: true, pick: "503"},
	}
	for _, s := range steps {
		s.act()
		if got := p.srv.Ready(); got != s.ready {
			t.Errorf("%s: picker Ready() = %v, want %v", s.name, got, s.ready)
		}
		st := a.snapshot()
		if st.Ready != s.ready || st.Draining != s.draining {
			t.Errorf("%s: /admin/state ready %v draining %v, want %v %v", s.name, st.Ready, st.Draining, s.ready, s.draining)
		}
		if got := pickOnce(t, conn, body); got != s.pick {
			t.Errorf("%s: pick = %q, want %q", s.name, got, s.pick)
		}
	}
}

// dialPicker serves a's endpoint picker (its ext_proc gRPC server) on a
// loopback port for the test and returns it with a client connection to
// it; both end with the test.
func dialPicker(t *testing.T, a *app) (*picker, *grpc.ClientConn) {
	t.Helper()
	p, err := a.newPicker()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.gs.Serve(lis)
	}()
	t.Cleanup(func() {
		p.gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return p, conn
}
