#!/usr/bin/env bash
# pgo.sh rebuilds cmd/gatekeeper/default.pgo, the CPU profile that `go build`
# uses for profile-guided optimisation of the gatekeeper binary (issue 16).
#
# The profile comes from the proxy's hot-path benchmarks: BenchmarkServeHTTP
# (gatekeeper's own per-request code against a static transport) and
# BenchmarkLoopback (the same through net/http's server and transport over
# loopback TCP, JSON and SSE), merged with `go tool pprof -proto`.
#
# Refresh it (run this, commit the result) after a change to the request
# path (proxy, its subpackages, the adapters cmd/gatekeeper hands it), after
# a Go upgrade, or when the build prints that the profile no longer matches
# much of the code; a stale profile only loses some of the gain.
# Before committing a new profile, compare what depends on stack depth with
# the old one and the new one (BENCH_EPP_ONLY=1 and BENCH_STREAMS_ONLY=1
# bench/run: RSS per held stream and per open stream): inlining can make a
# hot frame large enough to double every stream's goroutine stack, as the
# refresh of 2026-12-06 did (bench/README.md, "The PGO profile stays the one from before podconn").
#
#	scripts/pgo.sh                   # about 30 s of benchmarks
#	PGO_BENCHTIME=10s scripts/pgo.sh # a steadier profile
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
benchtime="${PGO_BENCHTIME:-5s}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

go test -c -o "$tmp/proxy.test" ./internal/proxy
for bench in ServeHTTP Loopback; do
	(cd internal/proxy && "$tmp/proxy.test" -test.run '^$' -test.bench "^Benchmark$bench\$" \
		-test.benchtime "$benchtime" -test.cpuprofile "$tmp/$bench.pprof" >/dev/null)
done
go tool pprof -proto "$tmp/ServeHTTP.pprof" "$tmp/Loopback.pprof" > "$tmp/default.pgo"
mv "$tmp/default.pgo" cmd/gatekeeper/default.pgo
ls -l cmd/gatekeeper/default.pgo
