// Package interop holds tests that drive a gatekeeper binary with
// third-party software on either side, the way it runs in production. It has
// no code of its own.
//
// interop_test.go builds ./cmd/gatekeeper, starts it on loopback in front of
// a fake vLLM, and runs client.mjs with the official OpenAI Node SDK (pinned
// in package.json; `scripts/install/node-deps.sh` installs it).
//
// uvicorn_test.go puts it in front of vllm_app.py, a pod on the stack vLLM
// serves with (FastAPI under uvicorn, on httptools and on h11, /metrics from
// prometheus_client; Debian's packages, `scripts/install/uvicorn.sh`), shaped
// as vLLM's OpenAI server is: gatekeeper's own pod transport and metrics
// parser meet the server code a real pod runs.
//
// haproxy_test.go puts HAProxy in front of it, speaking HTTP/2 to gatekeeper
// with server.h2c (HAProxy's own HTTP/2, not Go's; Debian's haproxy,
// `scripts/install/haproxy.sh`), and the uvicorn pod behind it.
//
// nginx_test.go puts nginx in front of it as an ingress does (Debian's nginx,
// `scripts/install/nginx.sh`): as ingress-nginx configures its upstreams,
// and with nginx's own proxy defaults (HTTP/1.0, the answer buffered).
//
// httpx_test.go drives it with httpx_client.py: httpx, the HTTP client under
// the OpenAI Python SDK (Debian's python3-httpx and python3-h2,
// `scripts/install/httpx.sh`), on HTTP/1.1 and on h2c.
//
// Each test skips with a message when what it needs is absent, and fails
// instead under GATEKEEPER_REQUIRE_TOOLS=1 (CI installs everything first).
package interop
