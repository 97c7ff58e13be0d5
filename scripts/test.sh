#!/usr/bin/env bash
# The whole test suite: formatting, vet, and every test with the race detector.
# README's second set-up command; .ci/run calls it too.
set -euo pipefail
cd "$(dirname "$0")/.."
# The nvml build tag compiles go-nvml, whose cgo preamble trips deprecation
# warnings in NVIDIA's header; they are noise. The default build has no cgo.
nvml_cflags="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet (the default build, then the nvml build tag's files and the binary built with it)"
go vet ./...
CGO_CFLAGS="$nvml_cflags" go vet -tags nvml ./internal/pressure/... ./cmd/gatekeeper
echo "== the default build needs no cgo: the image's static binary"
CGO_ENABLED=0 go build -o /dev/null ./cmd/gatekeeper
bash scripts/test-python.sh # the Python exporter (exporters/pytorch): unittest, offline install
echo "== go test -race"
go test -race -count=1 -timeout 8m ./...
echo "== go test -race -tags nvml: the nvml source against go-nvml's mock"
CGO_CFLAGS="$nvml_cflags" go test -race -count=1 -timeout 5m -tags nvml ./internal/pressure/...
echo "== seed sweep: the shipped policy never OOMs more than no gatekeeper (without -race, ten times faster)"
go test -count=1 -timeout 5m -run '^TestShippedPolicyNeverOOMsMore$' ./cmd/vllm-sim
echo "== bench: vet and tests of the bench module, then its smoke (BENCH_SMOKE=1 bench/run: build everything, one short scenario)"
# bench/ is a module of its own that go test ./... does not reach; without
# this step its go.mod rotted unseen (issue 35).
if ! (cd bench && go vet ./... && go test -count=1 ./...) || ! timeout 300 env BENCH_SMOKE=1 bench/run; then
	echo "bench smoke FAILED: the bench module (bench/go.mod, bench/driver, ...) no longer builds or its smoke scenario fails;"
	echo "reproduce with 'BENCH_SMOKE=1 bench/run' (bench/README.md). After a change to the main module's go.mod: cd bench && go mod tidy"
	exit 1
fi
echo "== fuzz (each target for a short, bounded time)"
FUZZTIME="${FUZZTIME:-5s}" ./scripts/fuzz.sh
