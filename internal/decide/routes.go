package decide

import (
	"strings"

	"github.com/gatekeeper-dev/gatekeeper/internal/classify"
)

// Route is one entry of the allow-list of paths forwarded to vLLM.
type Route struct {
	// Path is the canonical path, matched byte for byte.
	Path string
	// methods lists the allowed methods, in the order Allow names them. It
	// is shared with the allow-list: callers must not modify it.
	methods []string
	// kind says what the route does.
	kind classify.Kind
	// body reports whether the request carries a JSON body to classify:
	// Kind.JSON(), which classify.Parse checks and the tests pin.
	body bool
}

// Allow returns the value of the Allow header for a 405 on this route.
func (rt Route) Allow() string { return strings.Join(rt.methods, ", ") }

// routes is the allow-list: the public inference API of vLLM's OpenAI server
// under the versioned /v1 and /v2 namespaces, nothing else. Everything that
// is not here is answered 404 by gatekeeper and never reaches a pod:
//
//   - admin and development routes, including those under /v1
//     (/v1/load_lora_adapter, /v1/unload_lora_adapter) and the unversioned
//     ones (/pause, /resume, /sleep, /wake_up, /reset_prefix_cache,
//     /collective_rpc, /start_profile, /server_info, /scale_elastic_ep, …);
//   - /invocations (SageMaker), which dispatches on the body to any task and
//     so cannot be classified by its path;
//   - vLLM's unversioned custom APIs (/tokenize, /detokenize, /pooling,
//     /classify, /score, /rerank, /inference/v1/generate): that namespace
//     mixes inference with admin routes, so it stays closed and a custom API
//     is added here as an explicit row when a deployment needs it;
//   - /health, /load, /ping, /version and /metrics: gatekeeper answers
//     health itself and scrapes metrics on its own connection;
//   - routes with path parameters (GET /v1/responses/{id},
//     POST /v1/responses/{id}/cancel), because matching is exact, and the
//     /v1/realtime WebSocket.
//
// GET routes also allow HEAD, as Starlette does for vLLM. Tests pin the list.
var routes = [...]Route{
	{Path: "/v1/models", methods: []string{"GET", "HEAD"}, kind: classify.KindModels},
	{Path: "/v1/completions", methods: []string{"POST"}, kind: classify.KindCompletion, body: true},
	{Path: "/v1/chat/completions", methods: []string{"POST"}, kind: classify.KindChat, body: true},
	{Path: "/v1/responses", methods: []string{"POST"}, kind: classify.KindResponses, body: true},
	{Path: "/v1/embeddings", methods: []string{"POST"}, kind: classify.KindEmbedding, body: true},
	// vLLM serves /v1/score and /v1/rerank as deprecated aliases of /score
	// and /rerank, and /v2/rerank for Cohere's client.
	{Path: "/v1/score", methods: []string{"POST"}, kind: classify.KindScore, body: true},
	{Path: "/v1/rerank", methods: []string{"POST"}, kind: classify.KindScore, body: true},
	{Path: "/v2/rerank", methods: []string{"POST"}, kind: classify.KindScore, body: true},
	{Path: "/v1/audio/transcriptions", methods: []string{"POST"}, kind: classify.KindAudio},
	{Path: "/v1/audio/translations", methods: []string{"POST"}, kind: classify.KindAudio},
}

// lookupRoute finds the route for a request. escapedPath is the path as the
// client sent it (r.URL.EscapedPath(), never the decoded r.URL.Path), and it
// must equal a route's canonical path byte for byte: no percent-encoding,
// no empty, "." or ".." segments, no backslash or NUL, no trailing slash, no
// case variant. Such a path is refused with 404 rather than cleaned, because
// vLLM (Starlette) decodes and matches paths its own way; forwarding only
// canonical paths means the route gatekeeper classified is the route vLLM
// runs. The caller forwards r.URL unchanged, whose path is then canonical.
//
// On success the refusal is nil. An unknown path is refused with 404; a known
// path with a method it does not allow is refused with 405 and the route is
// still returned, so the caller can set the Allow header from route.Allow().
func lookupRoute(method, escapedPath string) (Route, *Refusal) {
	for _, rt := range routes {
		if rt.Path != escapedPath {
			continue
		}
		for _, m := range rt.methods {
			if m == method {
				return rt, nil
			}
		}
		rf := malformed(StatusMethodNotAllowed,
			"method "+quoteMethod(method)+" is not allowed on "+rt.Path+"; allowed: "+rt.Allow(), "")
		return rt, &rf
	}
	rf := Refuse(ReasonNotFound, "no such route; gatekeeper forwards only the inference API (/v1/...)", 0, 0)
	return Route{}, &rf
}

// quoteMethod renders a client-supplied method for an error message: printable
// ASCII tokens only, bounded, so nothing odd is echoed back.
func quoteMethod(m string) string {
	const maxLen = 16
	if len(m) > maxLen {
		return "(too long)"
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return "(invalid)"
		}
	}
	return m
}
