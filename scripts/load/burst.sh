#!/usr/bin/env bash
# burst.sh: the long load test of issue 7 (DESIGN §2's promise that nothing is
# lost under load). It runs on loopback in about two minutes:
#
#   1. builds gatekeeper and the driver (scripts/load), starts a fake pod with
#      a fixed service time (SERVICE, 100ms) behind gatekeeper with a window of
#      WINDOW (16) slots, so the pod's capacity is WINDOW / SERVICE;
#   2. calibrates: a closed loop of WINDOW workers for CALIBRATE (10s), which
#      never queues, measures the admitted throughput C;
#   3. bursts: an open loop at MULT (10) × C for DURATION (60s);
#   4. checks: every request got a status line (a stream, its [DONE]); every
#      refusal is 429/503 with Retry-After; gatekeeper_requests_total grew by
#      exactly what was sent; admitted throughput ≥ 90 % of C; gatekeeper's
#      peak RSS ≤ RSS_MAX_MIB (256).
#
#   scripts/load/burst.sh                       # the 60 s version
#   DURATION=10s CALIBRATE=5s scripts/load/burst.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
SERVICE="${SERVICE:-100ms}"
WINDOW="${WINDOW:-16}"
CALIBRATE="${CALIBRATE:-10s}"
DURATION="${DURATION:-60s}"
MULT="${MULT:-10}"
RSS_MAX_MIB="${RSS_MAX_MIB:-256}"
LOG_LEVEL="${LOG_LEVEL:-warn}" # debug logs one line per request
LOG_OUT="${LOG_OUT:-}"         # if set, gatekeeper's log is copied there
# Free loopback ports from the kernel, so nothing else on the machine shares them.
read -r POD_PORT GK_PORT ADMIN_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -z "$LOG_OUT" ] || cp "$work/gatekeeper.log" "$LOG_OUT" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/gatekeeper" ./cmd/gatekeeper
go build -o "$work/load" ./scripts/load

cat >"$work/policy.yaml" <<YAML
server:
  listen: 127.0.0.1:$GK_PORT
  admin_listen: 127.0.0.1:$ADMIN_PORT
  drain_delay: 0s
upstreams:
  - {name: pod, url: "http://127.0.0.1:$POD_PORT", max_inflight: $WINDOW, min_inflight: 1}
fast_breaker: {qps: 0}
queue: {max_length: 64, max_wait: 1s, starvation_after: 500ms}
health_check: {interval: 5s, timeout: 1s}
log: {level: $LOG_LEVEL}
YAML

"$work/load" pod -listen "127.0.0.1:$POD_PORT" -service "$SERVICE" &
pids+=($!)
"$work/gatekeeper" -config "$work/policy.yaml" 2>"$work/gatekeeper.log" &
gk=$!
pids+=($gk)
for _ in $(seq 100); do
	curl -fsS "http://127.0.0.1:$GK_PORT/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS "http://127.0.0.1:$GK_PORT/readyz" >/dev/null

echo "# calibration: closed loop, $WINDOW workers, $CALIBRATE"
cal=$("$work/load" run -url "http://127.0.0.1:$GK_PORT" -admin "http://127.0.0.1:$ADMIN_PORT" \
	-concurrency "$WINDOW" -duration "$CALIBRATE" -pid "$gk")
echo "$cal"
capacity=$(echo "$cal" | sed -E 's/.*"admitted_per_s":([0-9.]+).*/\1/')
rate=$(awk -v c="$capacity" -v m="$MULT" 'BEGIN { printf "%.0f", c * m }')

echo "# burst: open loop at ${MULT}x = $rate req/s for $DURATION"
status=0
burst=$("$work/load" run -url "http://127.0.0.1:$GK_PORT" -admin "http://127.0.0.1:$ADMIN_PORT" \
	-rate "$rate" -duration "$DURATION" -pid "$gk") || status=1
echo "$burst"
admitted=$(echo "$burst" | sed -E 's/.*"admitted_per_s":([0-9.]+).*/\1/')
rss=$(echo "$burst" | sed -E 's/.*"max_rss_mib":([0-9.]+).*/\1/')

awk -v a="$admitted" -v c="$capacity" -v r="$rss" -v max="$RSS_MAX_MIB" 'BEGIN {
	printf "# admitted %.1f req/s = %.1f%% of calibrated %.1f req/s; peak RSS %.1f MiB (limit %d)\n", a, 100 * a / c, c, r, max
	exit !(a >= 0.9 * c && r <= max)
}' || status=1
if grep -q '"level":"ERROR"' "$work/gatekeeper.log"; then
	echo "# gatekeeper logged errors:"; grep '"level":"ERROR"' "$work/gatekeeper.log" | head
	status=1
fi
[ "$status" = 0 ] && echo "# PASS" || echo "# FAIL"
exit "$status"
