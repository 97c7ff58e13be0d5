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
			k = canonicalKey(k)
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

// envoyKeys are the canonical forms of the headers Envoy adds to, or
// commonly passes on with, an inference request that net/textproto does not
// already keep canonical (its common headers): each would otherwise cost a
// new string per request.
var envoyKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"x-request-id", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port",
		"x-envoy-expected-rq-timeout-ms", "x-envoy-internal", "x-envoy-external-address", "x-envoy-attempt-count",
		"x-envoy-original-path", "x-envoy-decorator-operation", "x-real-ip", "traceparent", "tracestate",
		"baggage", "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid", "x-b3-sampled", "x-api-key",
		"x-stainless-lang", "x-stainless-package-version", "x-stainless-os", "x-stainless-arch",
		"x-stainless-runtime", "x-stainless-runtime-version", "x-stainless-retry-count", "x-stainless-async",
		"x-stainless-read-timeout", "openai-organization", "openai-project"} {
		m[k] = textproto.CanonicalMIMEHeaderKey(k)
	}
	return m
}()

// canonicalKey is textproto.CanonicalMIMEHeaderKey(k), without a new
// string for the headers of envoyKeys.
func canonicalKey(k string) string {
	if c, ok := envoyKeys[k]; ok {
		return c
	}
	return textproto.CanonicalMIMEHeaderKey(k)
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
