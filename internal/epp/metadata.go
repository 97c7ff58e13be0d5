package epp

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// headerValue is a header's value: Envoy sends it in raw_value (bytes) or,
// from older configurations, in value.
func headerValue(h *corev3.HeaderValue) string {
	if raw := h.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return h.GetValue()
}

// subsetHint reads Envoy's subset hint from a request message's metadata;
// ok is false when it carries none. The protocol sends a list of "ip:port"
// strings; a single comma-separated string, which Envoy's header-to-metadata
// filter writes, is read too (the reference picker reads both). A hint of
// any other type lists no endpoint: the pick must fail rather than ignore it.
func subsetHint(md *corev3.Metadata) (endpoints []string, ok bool) {
	v, ok := md.GetFilterMetadata()[subsetNamespace].GetFields()[subsetKey]
	if !ok {
		return nil, false
	}
	endpoints = []string{} // present: never nil, even when it lists none
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			endpoints = appendEndpoints(endpoints, e.GetStringValue())
		}
	case *structpb.Value_StringValue:
		endpoints = appendEndpoints(endpoints, k.StringValue)
	}
	return endpoints, true
}

// appendEndpoints appends the non-empty comma-separated parts of s.
func appendEndpoints(to []string, s string) []string {
	for part := range strings.SplitSeq(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			to = append(to, p)
		}
	}
	return to
}

// servedEndpoint reads servedKey from a response message's metadata; "" when
// it carries none.
func servedEndpoint(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[metadataNamespace].GetFields()[servedKey].GetStringValue()
}
