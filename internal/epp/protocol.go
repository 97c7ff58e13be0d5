package epp

// The names the endpoint-picker protocol (Gateway API Inference Extension,
// proposal 004, v1.0) gives to what travels between Envoy and the picker.
const (
	// DestinationKey is both the request header the picker sets to the
	// picked endpoints ("ip:port,ip:port", best first) and the key of the
	// same list in the dynamic metadata namespace metadataNamespace.
	DestinationKey = "x-gateway-destination-endpoint"
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
