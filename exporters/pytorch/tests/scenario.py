"""The fixed two-GPU scenario behind testdata/memory_blocks.golden.json.

GPU 0 is healthy: its cached free memory is mostly whole segments that a
cache flush returns to the driver. GPU 1 has memory stranded in split
segments: 5 GiB free in 256 MiB holes, 2.5 GiB usable in one piece.
"""

from __future__ import annotations

from .fake_torch import GIB, MIB, FakeCuda, block, segment

TOTAL = 80 * GIB
SNAPSHOT_AT = 100.0  # fake clock when the sampler takes its snapshot
SERVED_AT = 100.25  # fake clock when /memory_blocks is served


def gpu0() -> list:
    return [
        segment(0, 0x7F0000000000, [block(60 * GIB, "active_allocated")]),  # KV cache
        segment(0, 0x7F1000000000, [block(4 * GIB, "active_allocated")]),  # weights
        segment(0, 0x7F2000000000, [block(2 * GIB)]),  # wholly free
        segment(0, 0x7F2100000000, [block(1536 * MIB)]),  # wholly free
        segment(0, 0x7F2200000000, [block(512 * MIB, "active_allocated"), block(512 * MIB)]),  # split
        segment(0, 0x7F3000000000, [block(400 * MIB, "active_allocated"), block(600 * MIB)],
                pool=(1, 0)),  # a CUDA-graph pool: private
        segment(0, 0x7F4000000000, [block(1 * MIB, "active_allocated"), block(1 * MIB)], kind="small"),
    ]


def gpu1() -> list:
    segs = [segment(1, 0x7E0000000000, [block(60 * GIB, "active_allocated")])]
    for i in range(8):  # 1 GiB each: 384 MiB in use, 640 MiB free in holes of 256/256/128 MiB
        segs.append(segment(1, 0x7E1000000000 + i * 0x100000000, [
            block(128 * MIB, "active_allocated"), block(256 * MIB),
            block(128 * MIB, "active_allocated"), block(256 * MIB),
            block(128 * MIB, "active_allocated"), block(128 * MIB),
        ]))
    segs.append(segment(1, 0x7E2000000000, [block(512 * MIB)]))  # wholly free
    return segs


def cuda() -> FakeCuda:
    c = FakeCuda()
    c.load_device(0, gpu0(), free=8 * GIB, total=TOTAL)
    c.load_device(1, gpu1(), free=2 * GIB, total=TOTAL, retries=3)
    return c
