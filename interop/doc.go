// Package interop holds tests that drive a gatekeeper binary with
// third-party clients, the way teams call it in production. It has no code of
// its own: interop_test.go builds ./cmd/gatekeeper, starts it on loopback in
// front of a fake vLLM, and runs client.mjs with the official OpenAI Node SDK
// (pinned in package.json; `scripts/install/node-deps.sh` installs it). The
// test skips with a message when node or the SDK is absent.
package interop
