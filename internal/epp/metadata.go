package epp

import (
	"net/http"
	"net/textproto"
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

// requestOf is the request that headers describe: the :method, :path and
// :authority pseudo-headers in their fields, the other headers (not
// pseudo-headers) in Header under their canonical keys, in their order.
// Every value read from raw_value shares one string, and every header one
// array of values, rather than an allocation each: Envoy sends a dozen or
// more headers, and the Decider keeps what it is given.
func requestOf(headers []*corev3.HeaderValue) *Request {
	var text strings.Builder
	size := 0
	for _, hv := range headers {
		size += len(hv.GetRawValue())
	}
	text.Grow(size)
	for _, hv := range headers {
		text.Write(hv.GetRawValue())
	}
	all := text.String()
	r := &Request{Header: make(http.Header, len(headers))}
	values := make([]string, len(headers))
	for i, hv := range headers {
		v := hv.GetValue()
		if raw := hv.GetRawValue(); len(raw) > 0 {
			v, all = all[:len(raw)], all[len(raw):]
		}
		switch k := hv.GetKey(); k {
		case ":method":
			r.Method = v
		case ":path":
			r.Path = v
		case ":authority":
			r.Authority = v
		default:
			if strings.HasPrefix(k, ":") {
				continue
			}
			k = textproto.CanonicalMIMEHeaderKey(k)
			if vs, ok := r.Header[k]; ok { // a header sent twice: rare
				r.Header[k] = append(vs, v)
				continue
			}
			values[i] = v
			r.Header[k] = values[i : i+1 : i+1]
		}
	}
	return r
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
