package epp

// The names the endpoint-picker protocol (Gateway API Inference Extension,
// proposal 004, v1.0) gives to what travels between Envoy and the picker.
const (
	// DestinationKey is both the request header the picker sets to the
	// picked endpoints ("ip:port,ip:port", best first) and the key of the
	// same list in the dynamic metadata namespace MetadataNamespace.
	DestinationKey = "x-gateway-destination-endpoint"
	// MetadataNamespace is the metadata namespace of DestinationKey in the
	// picker's answer, and of ServedKey in what Envoy sends with a response.
	MetadataNamespace = "envoy.lb"
	// ServedKey names, in Envoy's metadata_context of a response, the
	// endpoint that really served it (Envoy may have tried a fallback).
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey name Envoy's subset hint in the
	// metadata_context of a request: the only endpoints the pick may use.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
)

// chunkLimit bounds each body chunk the server streams back. Some data
// planes cap a streamed chunk at 64 KiB; the reference picker stays at
// 62,000 bytes for a margin, and so does this one.
const chunkLimit = 62000
