"""The second process on the same GPU: it takes memory beside the engine in steps.

    vllm_like.py neighbour [--dry-run ...]

Two engines on one GPU: NVML sees this process's memory, the first
process's allocator does not. It creates its CUDA context, prints one JSON
line {"ready": true, ...}, waits for a line on stdin, then at start_s +
k × every_s (k < steps) takes min(step, NVML free − floor) bytes with
torch.empty when that is at least MIN_TAKE, holds them, and prints one JSON
line per step. It exits when its stdin closes or after --max-s seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
MIN_TAKE = 64 * MIB
GRAIN = 2 * MIB


@dataclass(frozen=True)
class NeighbourSpec:
    """When and how much the neighbour takes; step and floor are fractions of the device's total."""

    start_s: float
    every_s: float
    step_frac: float
    floor_frac: float
    steps: int


def take_bytes(free: int, total: int, spec: NeighbourSpec) -> int:
    """What one step takes: min(step, free − floor), in whole 2 MiB, or 0 below MIN_TAKE."""
    want = min(int(spec.step_frac * total), free - int(spec.floor_frac * total))
    want = want // GRAIN * GRAIN
    return want if want >= MIN_TAKE else 0


def neighbour_main(args: argparse.Namespace, spec: NeighbourSpec, load_torch: Any) -> int:
    torch = load_torch(args)
    torch.cuda.set_device(0)
    free, total = (int(x) for x in torch.cuda.mem_get_info(0))  # the CUDA context exists from here
    print(json.dumps({"ready": True, "free": free, "total": total}), flush=True)
    if not sys.stdin.readline():
        return 0
    t0 = time.monotonic()
    closed = threading.Event()

    def watch() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch, name="neighbour-stdin", daemon=True).start()
    held: list[Any] = []
    held_bytes = 0
    for k in range(spec.steps):
        at = t0 + spec.start_s + k * spec.every_s
        if at - t0 > args.max_s or closed.wait(max(0.0, at - time.monotonic())):
            break
        free, total = (int(x) for x in torch.cuda.mem_get_info(0))
        n = take_bytes(free, total, spec)
        err = None
        if n:
            try:
                held.append(torch.empty((n,), dtype=torch.uint8, device="cuda:0"))
                held_bytes += n
            except Exception as e:  # noqa: BLE001 - the engine took it first
                err, n = str(e)[:200], 0
        after = int(torch.cuda.mem_get_info(0)[0])
        print(json.dumps({"t": round(time.monotonic() - t0, 3), "step": k, "took": n, "held": held_bytes,
                          "free_before": free, "free_after": after, "total": total, "error": err}), flush=True)
    closed.wait(max(0.0, args.max_s - (time.monotonic() - t0)))
    return 0
