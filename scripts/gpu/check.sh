#!/usr/bin/env bash
# The allocator exporter on a real GPU (issue 12, part 5). Never part of CI.
#
# Needs: one CUDA GPU, PyTorch with CUDA, transformers, python3; no vLLM, no
# network; only loopback addresses are used. Runs in under 8 minutes (every
# step has a time cap, the whole a budget of GPU_CHECK_LIMIT_S, default 450 s)
# and writes everything into $OUT (default ./gpu-out):
#   steps.txt            each step's exit status and time
#   env.log              nvidia-smi, torch / CUDA / transformers versions
#   nvml.log             PRESSURE_REAL_NVML=1 TestRealNVML
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
#   go test -c -o pressure.test ./pressure/
# Without them the script tries an offline `go build` / `go test`.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
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
	step nvml 150 env PRESSURE_REAL_NVML=1 go test -count=1 -run TestRealNVML -v ./pressure/
fi

# The main run gets what is left but the later steps' share (90 + 40 s).
budget=$(($(left) - 140))
[ "$budget" -gt 260 ] && budget=260
if [ "$budget" -ge 60 ]; then
	step serve $((budget + 30)) "$PY" scripts/gpu/serve_like.py --out "$OUT" --gatekeeper "$GK" --budget-s "$budget"
else
	echo "serve: skipped, only ${budget}s left" | tee -a "$OUT/steps.txt"
fi

step expandable 90 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
	"$PY" scripts/gpu/serve_like.py --phase expandable --out "$OUT" --budget-s 65

step recorded 20 env GATEKEEPER_RECORDED_DIR="$OUT/fixtures" \
	bash -c "cd '$ROOT/exporters/pytorch' && $PY -m unittest -v tests.test_recorded"
step bench 30 bash -c "$PY -m gatekeeper_exporter.bench --json --repeat 5 >'$OUT/bench_walk.json'"

echo "== done in $((SECONDS - START))s; $OUT:"
ls -la "$OUT" "$OUT/fixtures" 2>/dev/null
cat "$OUT/steps.txt"
[ -f "$OUT/summary.json" ] && cat "$OUT/summary.json"
exit 0
