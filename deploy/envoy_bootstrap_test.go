package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// The typed_config extensions the bootstrap names, registered so that
	// protojson resolves their Any types (an unregistered one is an error).
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// envoyBootstrap is the plain Envoy bootstrap of the example.
var envoyBootstrap = filepath.Join(inferenceGateway, "envoy", "envoy.yaml")

// parseBootstrap decodes an Envoy bootstrap written as YAML the way Envoy
// reads it: as JSON into envoy.config.bootstrap.v3.Bootstrap, unknown
// fields and unregistered types refused, then protoc-gen-validate's rules
// (required fields, ranges, enums) checked on every message.
func parseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &b); err != nil {
		return nil, err
	}
	if err := b.ValidateAll(); err != nil {
		return nil, err
	}
	return &b, nil
}

// TestEnvoyBootstrapParse: parseBootstrap takes the example and refuses
// what Envoy would refuse, so the checks below stand on Envoy's own API.
func TestEnvoyBootstrapParse(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile(envoyBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string // a change to the example; "" old keeps it
		wantErr  string // "" means valid
	}{
		{"the example", "", "", ""},
		{"an unknown field", "allow_mode_override: true", "allow_mode_overide: true", `unknown field "allow_mode_overide"`},
		{"an unknown body mode", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: DUPLEX", `invalid value for enum`},
		{"a typed_config type that is not registered", "envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.router.v3.Routr", "unable to resolve"},
		{"a rule protoc-gen-validate checks (connect_timeout > 0)", "connect_timeout: 10s\n      original_dst", "connect_timeout: 0s\n      original_dst", "ConnectTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := string(good)
			if tt.old != "" {
				if !strings.Contains(data, tt.old) {
					t.Fatalf("%s does not contain %q", envoyBootstrap, tt.old)
				}
				data = strings.Replace(data, tt.old, tt.new, 1)
			}
			_, err := parseBootstrap([]byte(data))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("parseBootstrap(%s) = %v, want valid", envoyBootstrap, err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("parseBootstrap accepted it, want an error with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("parseBootstrap = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// TestEnvoyBootstrapAgrees checks the plain Envoy bootstrap: ext_proc with
// the reference's processing modes and no fail-open, the pick carried in
// x-gateway-destination-endpoint to an ORIGINAL_DST cluster, and the
// picker's cluster speaking HTTP/2 with a circuit breaker above Envoy's
// default of 1,024 concurrent requests (one ext_proc stream per request in
// flight: llm-d/llm-d#1582).
func TestEnvoyBootstrapAgrees(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(envoyBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseBootstrap(data)
	if err != nil {
		t.Fatalf("parseBootstrap(%s) = %v", envoyBootstrap, err)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	listeners := b.GetStaticResources().GetListeners()
	if len(listeners) != 1 || len(listeners[0].GetFilterChains()) != 1 || len(listeners[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("%s: want one listener with one filter chain of one filter (the HTTP connection manager)", envoyBootstrap)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := listeners[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("the listener's filter: %v", err)
	}
	filters := hcm.GetHttpFilters()
	var ep extprocv3.ExternalProcessor
	if len(filters) != 2 || filters[0].GetTypedConfig().UnmarshalTo(&ep) != nil || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("%s: http_filters %v, want ext_proc then the router", envoyBootstrap, filters)
	}
	mode := ep.GetProcessingMode()
	picker := clusters[ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	routes := hcm.GetRouteConfig().GetVirtualHosts()
	var routeCluster string
	if len(routes) == 1 && len(routes[0].GetRoutes()) == 1 {
		routeCluster = routes[0].GetRoutes()[0].GetRoute().GetCluster()
	}
	pods := clusters[routeCluster]
	var proto upstreamhttpv3.HttpProtocolOptions
	protoErr := picker.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&proto)
	var tls tlsv3.UpstreamTlsContext
	tlsErr := picker.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tls)

	tests := []struct {
		name string
		ok   bool
	}{
		{"request headers SEND", mode.GetRequestHeaderMode() == extprocv3.ProcessingMode_SEND},
		{"request body FULL_DUPLEX_STREAMED", mode.GetRequestBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		{"request trailers SEND", mode.GetRequestTrailerMode() == extprocv3.ProcessingMode_SEND},
		{"response headers SEND", mode.GetResponseHeaderMode() == extprocv3.ProcessingMode_SEND},
		{"response body FULL_DUPLEX_STREAMED", mode.GetResponseBodyMode() == extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		{"response trailers SEND", mode.GetResponseTrailerMode() == extprocv3.ProcessingMode_SEND},
		{"allow_mode_override", ep.GetAllowModeOverride()},
		{"failure_mode_allow false: an unreachable picker admits nothing", !ep.GetFailureModeAllow()},
		{"message_timeout above queue.max_wait's default 30s", ep.GetMessageTimeout().AsDuration() > 30*time.Second},
		{"the ext_proc gRPC service is a cluster of the bootstrap", picker != nil},
		{"the picker's cluster speaks HTTP/2", protoErr == nil && proto.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil},
		{"the picker's cluster speaks TLS (endpoint_picker.tls), offering h2", tlsErr == nil &&
			len(tls.GetCommonTlsContext().GetAlpnProtocols()) == 1 && tls.GetCommonTlsContext().GetAlpnProtocols()[0] == "h2"},
		{"the picker's cluster health-checks the ext_proc service over gRPC", len(picker.GetHealthChecks()) == 1 &&
			picker.GetHealthChecks()[0].GetGrpcHealthCheck().GetServiceName() == "envoy.service.ext_proc.v3.ExternalProcessor"},
		{"the route goes to an ORIGINAL_DST cluster", pods != nil && pods.GetType() == clusterv3.Cluster_ORIGINAL_DST &&
			pods.GetLbPolicy() == clusterv3.Cluster_CLUSTER_PROVIDED},
		{"that cluster takes the pick from x-gateway-destination-endpoint", pods.GetOriginalDstLbConfig().GetUseHttpHeader() &&
			pods.GetOriginalDstLbConfig().GetHttpHeaderName() == "x-gateway-destination-endpoint"},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("%s: want %s", envoyBootstrap, tt.name)
		}
	}
	for _, c := range []*clusterv3.Cluster{picker, pods} {
		th := c.GetCircuitBreakers().GetThresholds()
		if len(th) != 1 {
			t.Errorf("cluster %s: circuit_breakers thresholds %v, want one (priority DEFAULT)", c.GetName(), th)
			continue
		}
		for name, v := range map[string]uint32{
			"max_requests":         th[0].GetMaxRequests().GetValue(),
			"max_pending_requests": th[0].GetMaxPendingRequests().GetValue(),
			"max_connections":      th[0].GetMaxConnections().GetValue(),
		} {
			if v <= envoyDefaultMaxRequests {
				t.Errorf("cluster %s: circuit_breakers %s = %d, want above Envoy's default %d", c.GetName(), name, v, envoyDefaultMaxRequests)
			}
		}
	}
}
