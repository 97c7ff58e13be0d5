#!/usr/bin/env bash
# The allocator exporter and an engine OOM on a real GPU (issue 12, part 5;
# issue 34, item 6). Never part of CI.
#
#   scripts/gpu/check.sh             the GPU run
#   scripts/gpu/check.sh --dry-run   its CPU check: the oom phase on a fake GPU
#                                    (scripts/test-python.sh runs the same)
#
# Needs: one CUDA GPU, PyTorch with CUDA, transformers, python3; no vLLM, no
# network; only loopback addresses are used. Runs in under 8 minutes (every
# step has a time cap, the whole a budget of GPU_CHECK_LIMIT_S, default 450 s)
# and writes everything into $OUT (default ./gpu-out):
#   steps.txt            each step's exit status and time
#   env.log              nvidia-smi, torch / CUDA / transformers versions
#   nvml.log             PRESSURE_REAL_NVML=1 TestRealNVML
#   oom.log              the oom phase (scripts/gpu/vllm_like.py): a vLLM-like
#                        engine with the exporter, a second process taking
#                        memory beside it, the same load (a) straight at it,
#                        (b) through gatekeeper; each run stops at the OOM:
#   oom-series-unprotected.csv, oom-series-gatekeeper.csv
#                        every 0.5 s: NVML used, the exporter's free bytes and
#                        ratio, gatekeeper's level and window, requests so far
#   oom-summary.json     both runs: the OOM (time, NVML, torch, exporter), outcomes
#   GPU-RESULTS.md       the same as Markdown, for bench/GPU-RESULTS.md
#   oom/<run>/           server, neighbour and gatekeeper logs, death.json, policy
#   timeline.csv|json    the exporter's figures, torch's own and gatekeeper's
#                        view at moments of serving-like work, then under a
#                        tight set_per_process_memory_fraction
#   compare.json         exporter minus torch at each moment (summary.json: worst)
#   probe.json           bisected largest allocation vs largest_free_block_bytes
#   snapshot_cost.json   real memory_snapshot time against the segment count
#   bench_walk.json      the exporter's own walk over synthetic snapshots
#   fixtures/*.json      real memory_stats + snapshot for the CPU tests
#                        (copy into exporters/pytorch/testdata/recorded/)
#   gatekeeper/          the policy, gatekeeper's log, /admin/state, /metrics
#   expandable-*         a short run with expandable_segments:True
#
# gatekeeper and the pressure tests need Go modules, which an offline machine
# lacks: build both where the module cache is and bring them (git-ignored):
#   go build -ldflags='-s -w' -o gatekeeper ./cmd/gatekeeper
#   go test -tags nvml -c -o pressure.test ./internal/pressure/   (TestRealNVML needs the nvml build tag)
# Without them the script tries an offline `go build` / `go test`.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY="${PYTHON:-python3}"
LIMIT="${GPU_CHECK_LIMIT_S:-450}"
START=$SECONDS
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$ROOT/exporters/pytorch${PYTHONPATH:+:$PYTHONPATH}"
export GOFLAGS="${GOFLAGS:--mod=mod}" GOPROXY="${GOPROXY:-off}" # offline: fail fast, never reach out

left() { echo $((LIMIT - (SECONDS - START))); }

# step NAME CAP CMD...: runs CMD for at most min(CAP, time left) seconds,
# output in $OUT/NAME.log; returns CMD's status.
step() {
	local name=$1 cap=$2 t rc
	shift 2
	t=$(left)
	[ "$t" -gt "$cap" ] && t=$cap
	if [ "$t" -lt 5 ]; then
		echo "$name: skipped, no time left" | tee -a "$OUT/steps.txt"
		return 124
	fi
	echo "== $name (at most ${t}s)"
	timeout -k 5 "$t" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	echo "$name: rc=$rc at $((SECONDS - START))s" | tee -a "$OUT/steps.txt"
	tail -n 8 "$OUT/$name.log"
	return $rc
}

: >"$OUT/steps.txt"
if [ "$DRY" = 1 ]; then # no GPU: the oom phase on the fake GPU, with gatekeeper when a binary is here
	GK="${GATEKEEPER_BIN:-}"
	[ -z "$GK" ] && [ -x "$ROOT/gatekeeper" ] && GK="$ROOT/gatekeeper"
	[ -z "$GK" ] && echo "gatekeeper: no binary; the dry run skips the run through it" | tee -a "$OUT/steps.txt"
	step oom-dry 90 "$PY" scripts/gpu/vllm_like.py --dry-run --out "$OUT" --gatekeeper "$GK"
	rc=$?
	cat "$OUT/steps.txt"
	exit $rc
fi
step env 60 bash -c "nvidia-smi; $PY -c 'import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0), \"transformers\", transformers.__version__)'; go version"

GK="${GATEKEEPER_BIN:-}"
[ -z "$GK" ] && [ -x "$ROOT/gatekeeper" ] && GK="$ROOT/gatekeeper"
if [ -z "$GK" ] && step build 150 go build -o "$OUT/gatekeeper" ./cmd/gatekeeper; then
	GK="$OUT/gatekeeper"
fi
[ -z "$GK" ] && echo "gatekeeper: no binary; the run goes on without it" | tee -a "$OUT/steps.txt"

PT="${PRESSURE_TEST_BIN:-}"
[ -z "$PT" ] && [ -x "$ROOT/pressure.test" ] && PT="$ROOT/pressure.test"
if [ -n "$PT" ]; then
	step nvml 90 bash -c "cd '$ROOT/pressure' && PRESSURE_REAL_NVML=1 '$PT' -test.run TestRealNVML -test.v -test.count=1"
else
	step nvml 150 env PRESSURE_REAL_NVML=1 go test -tags nvml -count=1 -run TestRealNVML -v ./internal/pressure/
fi

# The oom phase: two runs of at most 25 s start-up + 62 s each (vllm_like.py splits its budget).
step oom 200 "$PY" scripts/gpu/vllm_like.py --out "$OUT" --gatekeeper "$GK" --budget-s 185

# The main run gets what is left but the later steps' share (75 + 20 + 30 s).
budget=$(($(left) - 125))
[ "$budget" -gt 260 ] && budget=260
if [ "$budget" -ge 60 ]; then
	step serve $((budget + 30)) "$PY" scripts/gpu/serve_like.py --out "$OUT" --gatekeeper "$GK" --budget-s "$budget"
else
	echo "serve: skipped, only ${budget}s left" | tee -a "$OUT/steps.txt"
fi

step expandable 75 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
	"$PY" scripts/gpu/serve_like.py --phase expandable --out "$OUT" --budget-s 55

step recorded 20 env GATEKEEPER_RECORDED_DIR="$OUT/fixtures" \
	bash -c "cd '$ROOT/exporters/pytorch' && $PY -m unittest -v tests.test_recorded"
step bench 30 bash -c "$PY -m gatekeeper_exporter.bench --json --repeat 5 >'$OUT/bench_walk.json'"

echo "== done in $((SECONDS - START))s; $OUT:"
ls -la "$OUT" "$OUT/fixtures" 2>/dev/null
cat "$OUT/steps.txt"
[ -f "$OUT/summary.json" ] && cat "$OUT/summary.json"
[ -f "$OUT/GPU-RESULTS.md" ] && cat "$OUT/GPU-RESULTS.md"
exit 0
