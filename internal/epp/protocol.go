package epp

// The names the endpoint-picker protocol (Gateway API Inference Extension,
// proposal 004, v1.0) gives to what travels between Envoy and the picker.
const (
	// DestinationKey is both the request header the picker sets to the
	// picked endpoints ("ip:port,ip:port", best first) and the key of the
	// same list in the dynamic metadata namespace metadataNamespace. The
	// data plane uses the first valid one, and goes down the list, in
	// order, when its retry policy retries (proposal 004, "Destination
	// Endpoint").
	DestinationKey = "x-gateway-destination-endpoint"
	// ScoresKey is the key, beside DestinationKey in the envoy.lb dynamic
	// metadata, of a struct from "ip:port" to the pod's score for the
	// request (a number, higher is better): llm-d-router's
	// DestinationEndpointScoresKey (pkg/epp/metadata/consts.go), which it
	// writes only under --emit-endpoint-scores. Not yet part of the
	// protocol: gateway-api-inference-extension issue #2985 proposes it.
	// Metadata only, never a header.
	ScoresKey = "x-gateway-destination-endpoint-scores"
	// metadataNamespace is the metadata namespace of DestinationKey in the
	// picker's answer, and of servedKey in what Envoy sends with a response.
	metadataNamespace = "envoy.lb"
	// servedKey names, in Envoy's metadata_context of a response, the
	// endpoint that really served it (Envoy may have tried a fallback).
	servedKey = "x-gateway-destination-endpoint-served"
	// subsetNamespace and subsetKey name Envoy's subset hint in the
	// metadata_context of a request: the only endpoints the pick may use.
	subsetNamespace = "envoy.lb.subset_hint"
	subsetKey       = "x-gateway-destination-endpoint-subset"
)

// chunkLimit bounds each body chunk the server streams back. Some data
// planes cap a streamed chunk at 64 KiB; the reference picker stays at
// 62,000 bytes for a margin, and so does this one.
const chunkLimit = 62000
