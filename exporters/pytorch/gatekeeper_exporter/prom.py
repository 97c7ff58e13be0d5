"""The same figures in Prometheus text exposition format (version 0.0.4).

For a Prometheus that scrapes the pod directly; gatekeeper reads the JSON.
A field absent from a memory_blocks object is absent here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PREFIX = "torch_cuda_allocator_"

# (field, metric name without prefix, type, help)
_SERIES = (
    ("total_bytes", "total_bytes", "gauge", "Device memory the driver reports in total."),
    ("used_bytes", "used_bytes", "gauge", "Device memory in use by every process (total - driver free)."),
    ("free_bytes", "free_bytes", "gauge",
     "Driver free (capped by the per-process memory fraction) + cached free bytes outside private pools."),
    ("largest_free_block_bytes", "largest_free_block_bytes", "gauge",
     "Largest single allocation that can succeed, counting the allocator's flush-and-retry."),
    ("reserved_bytes", "reserved_bytes", "gauge", "Bytes the caching allocator holds (reserved_bytes.all.current)."),
    ("allocated_bytes", "allocated_bytes", "gauge", "Bytes in live tensors (allocated_bytes.all.current)."),
    ("inactive_split_bytes", "inactive_split_bytes", "gauge",
     "Free bytes inside split segments, not releasable (inactive_split_bytes.all.current)."),
    ("block_count", "free_blocks", "gauge", "Free (inactive) blocks outside private pools in the latest snapshot."),
    ("segment_count", "segments", "gauge", "Segments the caching allocator holds (segment.all.current)."),
    ("private_pool_free_bytes", "private_pool_free_bytes", "gauge",
     "Free bytes inside private pools (CUDA graphs, sleep mode) in the latest snapshot."),
    ("fragmentation_ratio", "fragmentation_ratio", "gauge",
     "Largest free block / free bytes (1 = all free memory is one block)."),
    ("alloc_retry_count", "alloc_retries_total", "counter",
     "Allocations that failed once and were retried after a cache flush (num_alloc_retries)."),
    ("num_ooms", "ooms_total", "counter", "Out-of-memory errors the allocator raised (num_ooms)."),
    ("snapshot_age_seconds", "snapshot_age_seconds", "gauge", "Age of the memory snapshot behind the block figures."),
    ("expandable_segments", "expandable_segments", "gauge", "1 when expandable segments are on."),
)


def render(blocks: Iterable[Mapping[str, Any]]) -> str:
    """Returns the exposition text for a list of memory_blocks objects."""
    blocks = list(blocks)
    lines: list[str] = []
    for field, name, kind, help_text in _SERIES:
        samples = [(b["gpu_id"], b[field]) for b in blocks if field in b]
        if not samples:
            continue
        lines.append(f"# HELP {PREFIX}{name} {help_text}")
        lines.append(f"# TYPE {PREFIX}{name} {kind}")
        for gpu, value in samples:
            lines.append(f'{PREFIX}{name}{{gpu_id="{_label(gpu)}"}} {_number(value)}')
    info = [b for b in blocks if "allocator_backend" in b]
    if info:
        lines.append(f"# HELP {PREFIX}info The allocator backend of each device.")
        lines.append(f"# TYPE {PREFIX}info gauge")
        for b in info:
            lines.append(f'{PREFIX}info{{gpu_id="{_label(b["gpu_id"])}",backend="{_label(b["allocator_backend"])}"}} 1')
    lines.append(f"# HELP {PREFIX}read_ok 1 when every figure of the device could be read (no error).")
    lines.append(f"# TYPE {PREFIX}read_ok gauge")
    for b in blocks:
        lines.append(f'{PREFIX}read_ok{{gpu_id="{_label(b["gpu_id"])}"}} {0 if "error" in b else 1}')
    return "\n".join(lines) + "\n"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))
