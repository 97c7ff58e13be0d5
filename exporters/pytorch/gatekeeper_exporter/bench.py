"""What a snapshot costs, as far as it can be measured without a GPU.

    python3 -m gatekeeper_exporter.bench [--segments 100,1000,10000] [--repeat 5] [--json]

A real torch.cuda.memory_snapshot() builds one Python dict per segment and
per block while it holds the allocator's lock and the GIL; then the exporter
walks them (figures.summarize). Without a GPU this measures both halves on
synthetic snapshots of the same shape: "build" (making the dicts in Python,
a stand-in for the C++ that makes them; not the real call) and "walk" (the
exporter's own work, exactly). scripts/gpu/check.sh measures the real call.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from .figures import MIB, summarize

STATES = ("active_allocated", "active_allocated", "inactive", "active_pending_free")


def synthetic_layout(segments: int, blocks_per_segment: int = 4, seed: int = 1) -> list[tuple[int, bool, list]]:
    """Returns (address, small, [(size, state), ...]) per segment: random, reproducible."""
    rng = random.Random(seed)
    out = []
    address = 0x7F0000000000
    for i in range(segments):
        small = i % 3 == 0
        n = rng.randint(1, 2 * blocks_per_segment - 1)
        blocks = []
        for _ in range(n):
            size = (rng.randint(1, 8) * 512) if small else rng.randint(1, 64) * MIB
            blocks.append((size, STATES[rng.randrange(len(STATES))] if n > 1 else "inactive"))
        out.append((address, small, blocks))
        address += sum(b[0] for b in blocks) + 2 * MIB
    return out


def build_snapshot(layout: list[tuple[int, bool, list]]) -> list[dict[str, Any]]:
    """Makes the snapshot's dicts, as torch does for every segment and block."""
    out = []
    for address, small, spec in layout:
        blocks, addr, allocated = [], address, 0
        for size, state in spec:
            blocks.append({"address": addr, "size": size, "requested_size": size, "state": state, "frames": []})
            addr += size
            if state == "active_allocated":
                allocated += size
        out.append({"device": 0, "address": address, "total_size": addr - address, "allocated_size": allocated,
                    "active_size": allocated, "requested_size": allocated, "stream": 0,
                    "segment_type": "small" if small else "large", "segment_pool_id": (0, 0),
                    "is_expandable": False, "frames": [], "blocks": blocks})
    return out


def synthetic_snapshot(segments: int, blocks_per_segment: int = 4, seed: int = 1) -> list[dict[str, Any]]:
    """Returns a snapshot of one device with this many segments, shaped like PyTorch's."""
    return build_snapshot(synthetic_layout(segments, blocks_per_segment, seed))


def measure(segment_counts: Sequence[int], repeat: int = 5) -> list[dict[str, Any]]:
    """Returns, per segment count, the median build and walk times in milliseconds."""
    rows = []
    for n in segment_counts:
        build, walk = [], []
        blocks = 0
        for r in range(repeat):
            layout = synthetic_layout(n, seed=r)
            t0 = time.perf_counter()
            snap = build_snapshot(layout)
            t1 = time.perf_counter()
            summarize(snap, 0, t1)
            t2 = time.perf_counter()
            build.append((t1 - t0) * 1e3)
            walk.append((t2 - t1) * 1e3)
            blocks = sum(len(s["blocks"]) for s in snap)
        rows.append({"segments": n, "blocks": blocks, "build_ms": round(statistics.median(build), 3),
                     "walk_ms": round(statistics.median(walk), 3)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--segments", default="100,1000,10000", help="comma-separated segment counts")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = p.parse_args(argv)
    rows = measure([int(x) for x in args.segments.split(",") if x], max(1, args.repeat))
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'segments':>9} {'blocks':>7} {'build ms':>9} {'walk ms':>8}")
    for r in rows:
        print(f"{r['segments']:>9} {r['blocks']:>7} {r['build_ms']:>9.3f} {r['walk_ms']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
