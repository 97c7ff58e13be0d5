package epp

import (
	"net/http"
	"reflect"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func metadata(t *testing.T, namespace string, fields map[string]any) *corev3.Metadata {
	t.Helper()
	s, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{namespace: s}}
}

// TestSubsetHintValues: what each shape of the hint lists. Any hint that is
// present, however malformed, restricts the pick (to nothing, at worst).
func TestSubsetHintValues(t *testing.T) {
	tests := []struct {
		name   string
		md     *corev3.Metadata
		want   []string
		wantOK bool
	}{
		{name: "no metadata", md: nil},
		{name: "other namespace", md: metadata(t, "envoy.lb", map[string]any{subsetKey: []any{"a:1"}})},
		{name: "namespace without the key", md: metadata(t, subsetNamespace, map[string]any{"other": "a:1"})},
		{name: "list", md: metadata(t, subsetNamespace, map[string]any{subsetKey: []any{"10.0.0.1:80", "10.0.0.2:80"}}),
			want: []string{"10.0.0.1:80", "10.0.0.2:80"}, wantOK: true},
		{name: "list entries holding commas", md: metadata(t, subsetNamespace, map[string]any{subsetKey: []any{"a:1,b:2", " c:3 "}}),
			want: []string{"a:1", "b:2", "c:3"}, wantOK: true},
		{name: "list with non-strings", md: metadata(t, subsetNamespace, map[string]any{subsetKey: []any{1.0, "a:1", nil}}),
			want: []string{"a:1"}, wantOK: true},
		{name: "string", md: metadata(t, subsetNamespace, map[string]any{subsetKey: "a:1,,b:2"}), want: []string{"a:1", "b:2"}, wantOK: true},
		{name: "empty list", md: metadata(t, subsetNamespace, map[string]any{subsetKey: []any{}}), want: []string{}, wantOK: true},
		{name: "number", md: metadata(t, subsetNamespace, map[string]any{subsetKey: 3.0}), want: []string{}, wantOK: true},
		{name: "null", md: metadata(t, subsetNamespace, map[string]any{subsetKey: nil}), want: []string{}, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := subsetHint(tt.md)
			if ok != tt.wantOK || !slices.Equal(got, tt.want) || (ok && got == nil) {
				t.Errorf("subsetHint() = %#v, %v; want %#v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestServedEndpoint(t *testing.T) {
	tests := []struct {
		md   *corev3.Metadata
		want string
	}{
		{nil, ""},
		{metadata(t, metadataNamespace, map[string]any{servedKey: "10.0.0.1:8000"}), "10.0.0.1:8000"},
		{metadata(t, metadataNamespace, map[string]any{servedKey: 1.0}), ""},
		{metadata(t, subsetNamespace, map[string]any{servedKey: "10.0.0.1:8000"}), ""},
	}
	for _, tt := range tests {
		if got := servedEndpoint(tt.md); got != tt.want {
			t.Errorf("servedEndpoint(%v) = %q, want %q", tt.md, got, tt.want)
		}
	}
}

// TestRequestOfHeaders: the pseudo-headers in their fields, the others by
// canonical key in their order, a header sent twice with both values, raw
// values and plain ones mixed, and no value changed by a later header
// (they share one string and one array).
func TestRequestOfHeaders(t *testing.T) {
	hm := headers(":method", "POST", ":path", "/v1/chat/completions?x=1", ":authority", "gw.example",
		"accept=v", "text/event-stream", "x-tenant", "blue", ":scheme", "https", "x-tenant", "green",
		"content-type", "application/json", "x-empty", "", "x-request-id", "r-1")
	r := requestOf(hm.GetHeaders())
	if r.Method != "POST" || r.Path != "/v1/chat/completions?x=1" || r.Authority != "gw.example" {
		t.Fatalf("pseudo-headers = %q %q %q", r.Method, r.Path, r.Authority)
	}
	want := http.Header{
		"Accept": {"text/event-stream"}, "X-Tenant": {"blue", "green"}, "Content-Type": {"application/json"},
		"X-Empty": {""}, "X-Request-Id": {"r-1"},
	}
	if !reflect.DeepEqual(r.Header, want) {
		t.Fatalf("Header = %v, want %v", r.Header, want)
	}
	r.Header["X-Tenant"][0] = "changed" // the Decider may edit what it holds
	if r.Header.Get("Content-Type") != "application/json" || r.Header["Accept"][0] != "text/event-stream" {
		t.Fatalf("an edit of one header changed another: %v", r.Header)
	}
}
