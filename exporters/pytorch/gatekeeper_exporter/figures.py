"""The arithmetic: pure functions from recorded allocator data to figures.

Nothing here imports torch. Inputs are plain dicts and numbers (what
``torch.cuda.memory_stats``, ``mem_get_info`` and ``memory_snapshot`` return),
so every definition is tested on recorded data. The definitions are
gatekeeper's (docs/sources.md, and docs/design.md on the fragmentation
ratio); the README of this package gives them field by field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20

# An expandable segment maps and unmaps physical memory in granules of this
# size (PyTorch's kSmallBuffer for the small pool, kLargeBuffer for the large
# one), so a free block gives memory back only in whole granules.
SMALL_GRANULE = 2 * MIB
LARGE_GRANULE = 20 * MIB

# The allocator backend whose statistics mean nothing for fragmentation.
ASYNC_BACKEND = "cudaMallocAsync"

# Field order of one memory_blocks object; gatekeeper reads the first ten.
FIELDS = (
    "gpu_id",
    "total_bytes",
    "used_bytes",
    "free_bytes",
    "largest_free_block_bytes",
    "reserved_bytes",
    "allocated_bytes",
    "block_count",
    "fragmentation_ratio",
    "alloc_retry_count",
    "inactive_split_bytes",
    "num_ooms",
    "segment_count",
    "private_pool_free_bytes",
    "snapshot_age_seconds",
    "expandable_segments",
    "allocator_backend",
    "memory_fraction",
    "error",
)


@dataclass(frozen=True)
class SnapshotSummary:
    """What one device's segments in a memory snapshot add up to.

    Private pools (CUDA graphs, vLLM's sleep mode) are counted apart: their
    free blocks serve only allocations made inside that pool.
    """

    device: int
    taken_at: float  # clock seconds when the snapshot was taken
    largest_inactive_block: int  # biggest inactive block outside private pools
    reclaimable_bytes: int  # freed by a cache flush: wholly free segments + whole granules of free expandable blocks
    inactive_bytes: int  # every inactive byte outside private pools
    free_block_count: int  # inactive blocks outside private pools
    segment_count: int  # segments outside private pools
    private_inactive_bytes: int  # inactive bytes inside private pools
    private_segment_count: int
    expandable: bool  # some segment of the device is expandable


@dataclass(frozen=True)
class DeviceReading:
    """What one poll read for one device (None: not read)."""

    device: int
    stats: Mapping[str, Any] | None = None  # torch.cuda.memory_stats(device)
    driver_free: int | None = None  # torch.cuda.mem_get_info(device)[0]
    driver_total: int | None = None  # torch.cuda.mem_get_info(device)[1]
    backend: str | None = None  # torch.cuda.get_allocator_backend()
    memory_fraction: float | None = None  # set_per_process_memory_fraction's value
    expandable_setting: bool | None = None  # from the allocator configuration
    errors: tuple[str, ...] = ()


def segments_of(snapshot: Any) -> list[Mapping[str, Any]]:
    """Returns the segment list of a snapshot: a list, or a dict with "segments"."""
    if snapshot is None:
        return []
    if isinstance(snapshot, Mapping):
        snapshot = snapshot.get("segments") or []
    return [s for s in snapshot if isinstance(s, Mapping)]


def is_private_pool(pool_id: Any) -> bool:
    """Reports whether segment_pool_id names a private pool ((0, 0) is the default)."""
    if pool_id is None or pool_id == (0, 0) or pool_id == [0, 0] or pool_id == 0:
        return False
    if isinstance(pool_id, str):
        pool_id = [p for p in pool_id.replace(",", "_").strip("()[] ").split("_") if p.strip()]
    if isinstance(pool_id, (list, tuple)):
        return any(_as_int(p, 1) != 0 for p in pool_id)
    return _as_int(pool_id, 1) != 0


def whole_granules(address: int, size: int, granule: int) -> int:
    """Bytes of the whole granules inside [address, address+size)."""
    start = -(-address // granule) * granule
    end = (address + size) // granule * granule
    return max(0, end - start)


def summarize(segments: Iterable[Mapping[str, Any]], device: int, taken_at: float) -> SnapshotSummary:
    """Adds up one device's segments of a memory snapshot.

    A non-expandable segment whose allocated_size is 0 is wholly free: a
    cache flush returns all of it to the driver, which is what PyTorch does
    before it fails an allocation. In an expandable segment the flush unmaps
    the whole granules inside every free block instead.
    """
    largest = reclaim = inactive = count = segs = 0
    priv_inactive = priv_segs = 0
    expandable_seen = False
    for seg in segments:
        if _as_int(seg.get("device", device), -1) != device:
            continue
        blocks = seg.get("blocks") or ()
        if is_private_pool(seg.get("segment_pool_id")):
            priv_segs += 1
            priv_inactive += sum(int(b.get("size") or 0) for b in blocks if b.get("state") == "inactive")
            continue
        segs += 1
        expandable = bool(seg.get("is_expandable"))
        if expandable:
            expandable_seen = True
            granule = SMALL_GRANULE if seg.get("segment_type") == "small" else LARGE_GRANULE
            address = int(seg.get("address") or 0)
            for b in blocks:
                size = int(b.get("size") or 0)
                addr = b.get("address")
                addr = address if addr is None else int(addr)
                address = addr + size
                if b.get("state") == "inactive":
                    inactive += size
                    count += 1
                    if size > largest:
                        largest = size
                    reclaim += whole_granules(addr, size, granule)
            continue
        for b in blocks:
            if b.get("state") == "inactive":
                size = int(b.get("size") or 0)
                inactive += size
                count += 1
                if size > largest:
                    largest = size
        if _allocated_size(seg, blocks) == 0:
            total = seg.get("total_size")
            reclaim += int(total) if total is not None else sum(int(b.get("size") or 0) for b in blocks)
    return SnapshotSummary(
        device=device,
        taken_at=taken_at,
        largest_inactive_block=largest,
        reclaimable_bytes=reclaim,
        inactive_bytes=inactive,
        free_block_count=count,
        segment_count=segs,
        private_inactive_bytes=priv_inactive,
        private_segment_count=priv_segs,
        expandable=expandable_seen,
    )


def change_key(stats: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """What must change before a new snapshot is worth its cost."""
    if not stats:
        return None
    return (
        _as_int(stats.get("inactive_split_bytes.all.current")),
        _as_int(stats.get("segment.all.current")),
    )


def compute_block(reading: DeviceReading, summary: SnapshotSummary | None, now: float,
                  snapshot_error: str | None = None) -> dict[str, Any]:
    """Returns one memory_blocks object (fields in FIELDS order, absent when unknown).

    free_bytes = driver free + cached free bytes outside private pools
    largest_free_block_bytes = max(biggest cached free block,
                                   driver free + what a cache flush returns)
    fragmentation_ratio = largest ÷ free (≤ 1; 1 when nothing is free)

    "Driver free" is capped by the per-process memory fraction when one is
    set: the allocator refuses to grow past it whatever the driver has.
    """
    out: dict[str, Any] = {"gpu_id": str(reading.device)}
    errors = list(reading.errors)
    stats = reading.stats if reading.stats is not None else {}
    caching = reading.backend != ASYNC_BACKEND
    total, driver_free = reading.driver_total, reading.driver_free
    if total is not None:
        out["total_bytes"] = int(total)
        if driver_free is not None:
            out["used_bytes"] = max(0, int(total) - int(driver_free))
    reserved = _stat(stats, "reserved_bytes.all.current")
    allocated = _stat(stats, "allocated_bytes.all.current")
    inactive_split = _stat(stats, "inactive_split_bytes.all.current") if caching else None
    if reading.stats is not None and not stats:
        errors.append("memory_stats is empty: the caching allocator holds nothing on this device yet")

    if driver_free is not None and reserved is not None and allocated is not None:
        headroom = int(driver_free)
        fraction = reading.memory_fraction
        if fraction is not None and 0 <= fraction < 1 and total is not None:
            headroom = min(headroom, max(0, int(fraction * int(total)) - reserved))
        cached_free = max(0, reserved - allocated)
        private_free = min(summary.private_inactive_bytes, cached_free) if caching and summary else 0
        usable_cached = cached_free - private_free
        free = headroom + usable_cached
        out["free_bytes"] = free
        if caching and summary is not None:
            reclaim = min(summary.reclaimable_bytes, usable_cached)
            if not summary.expandable and inactive_split is not None:
                # Today's statistics bound a snapshot that may be a second old.
                reclaim = min(reclaim, max(0, cached_free - inactive_split))
            block = min(summary.largest_inactive_block, usable_cached)
            largest = min(max(block, headroom + reclaim), free)
            out["largest_free_block_bytes"] = largest
    if reserved is not None:
        out["reserved_bytes"] = reserved
    if allocated is not None:
        out["allocated_bytes"] = allocated
    if caching and summary is not None:
        out["block_count"] = summary.free_block_count
    if "largest_free_block_bytes" in out:
        free = out["free_bytes"]
        out["fragmentation_ratio"] = round(out["largest_free_block_bytes"] / free, 6) if free > 0 else 1.0
    if caching:
        for field, key in (("alloc_retry_count", "num_alloc_retries"),
                           ("inactive_split_bytes", "inactive_split_bytes.all.current"),
                           ("num_ooms", "num_ooms"),
                           ("segment_count", "segment.all.current")):
            value = _stat(stats, key)
            if value is not None:
                out[field] = value
        if summary is not None:
            out["private_pool_free_bytes"] = summary.private_inactive_bytes
            out["snapshot_age_seconds"] = round(max(0.0, now - summary.taken_at), 3)
        expandable = bool(reading.expandable_setting) or bool(summary and summary.expandable)
        if reading.expandable_setting is not None or summary is not None:
            out["expandable_segments"] = expandable
        if snapshot_error:
            errors.append(snapshot_error)
    if reading.backend is not None:
        out["allocator_backend"] = reading.backend
    if reading.memory_fraction is not None and reading.memory_fraction < 1:
        out["memory_fraction"] = reading.memory_fraction
    if errors:
        out["error"] = "; ".join(errors)
    return {k: out[k] for k in FIELDS if k in out}


def _allocated_size(seg: Mapping[str, Any], blocks: Iterable[Mapping[str, Any]]) -> int:
    value = seg.get("allocated_size")
    if value is not None:
        return int(value)
    return sum(int(b.get("size") or 0) for b in blocks if b.get("state") == "active_allocated")


def _stat(stats: Mapping[str, Any], key: str) -> int | None:
    value = stats.get(key)
    if value is None:
        return None
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return v if v >= 0 else None


def _as_int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
