"""A fake ``torch`` with just the torch.cuda calls the exporter makes.

Installed into sys.modules by the tests (torch is never installed in CI). It
is fed segments in the shape of torch.cuda.memory_snapshot() (PyTorch's
torch/cuda/memory.py and the C++ that builds it) and memory_stats in the flat
shape of torch.cuda.memory_stats(), and it counts every call.
empty_cache() releases the wholly free segments as PyTorch's native
allocator does, and records which thread called it inside which
torch.cuda.device() block.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

MIB = 1 << 20
GIB = 1 << 30


def block(size: int, state: str = "inactive") -> dict[str, Any]:
    """One snapshot block: state is active_allocated, active_pending_free or inactive."""
    return {"size": size, "requested_size": size if state == "active_allocated" else 0,
            "state": state, "frames": []}


def segment(device: int, address: int, blocks: list[dict[str, Any]], *, pool: Any = (0, 0),
            expandable: bool = False, kind: str = "large") -> dict[str, Any]:
    """One snapshot segment with its blocks' addresses filled in."""
    addr = address
    for b in blocks:
        b["address"] = addr
        addr += b["size"]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": device, "address": address, "total_size": addr - address,
            "allocated_size": allocated, "active_size": active, "requested_size": allocated,
            "stream": 0, "segment_type": kind, "segment_pool_id": pool,
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def stats_from(segments: list[dict[str, Any]], device: int, *, retries: int = 0,
               ooms: int = 0) -> dict[str, Any]:
    """memory_stats as the caching allocator would count these segments.

    A free block is 'inactive split' when its segment holds other blocks
    (PyTorch's Block::is_split()); expandable segments chain every block.
    """
    mine = [s for s in segments if s["device"] == device]
    reserved = sum(s["total_size"] for s in mine)
    allocated = sum(s["allocated_size"] for s in mine)
    split = sum(b["size"] for s in mine for b in s["blocks"]
                if b["state"] == "inactive" and (len(s["blocks"]) > 1 or s["is_expandable"]))
    n = len(mine)
    out: dict[str, Any] = {}
    for stat, value in (("reserved_bytes", reserved), ("allocated_bytes", allocated),
                        ("inactive_split_bytes", split), ("segment", n),
                        ("active_bytes", sum(s["active_size"] for s in mine)),
                        ("requested_bytes", allocated),
                        ("allocation", sum(1 for s in mine for b in s["blocks"] if b["state"] != "inactive"))):
        for pool in ("all", "large_pool", "small_pool"):
            v = value if pool == "all" else 0
            out[f"{stat}.{pool}.current"] = v
            out[f"{stat}.{pool}.peak"] = v
            out[f"{stat}.{pool}.allocated"] = v
            out[f"{stat}.{pool}.freed"] = 0
    out["num_alloc_retries"] = retries
    out["num_ooms"] = ooms
    out["num_sync_all_streams"] = 0
    out["num_device_alloc"] = n
    out["num_device_free"] = 0
    out["max_split_size"] = -1
    return dict(sorted(out.items()))


def flushable(seg: dict[str, Any]) -> bool:
    """Whether empty_cache returns seg to the driver: wholly free, in the default pool.

    Expandable segments (which empty_cache unmaps granule by granule) are
    kept whole here: the fake does not model the unmapping.
    """
    return (seg["allocated_size"] == 0 and seg["active_size"] == 0 and not seg["is_expandable"]
            and tuple(seg["segment_pool_id"]) == (0, 0))


class FakeCuda:
    """torch.cuda as far as the exporter uses it. Counts calls in .calls."""

    def __init__(self) -> None:
        self.initialized = True
        self.available = True
        self.current = 0
        self.backend = "native"
        self.fraction = 1.0
        self.snapshot_as_dict = False
        self.segments: list[dict[str, Any]] = []
        self.stats: dict[int, dict[str, Any]] = {}
        self.mem: dict[int, tuple[int, int]] = {}
        self.count = 0
        self.fail: dict[str, Exception] = {}
        self.calls: Counter[str] = Counter()
        self.set_devices: list[tuple[str, int]] = []
        self.snapshot_event = threading.Event()  # set by every memory_snapshot call
        # One (thread name, device of the enclosing torch.cuda.device block or
        # None) per empty_cache call, failed ones included.
        self.empty_cache_calls: list[tuple[str, int | None]] = []
        # Runs inside empty_cache before it releases anything: tests block
        # there, or advance a fake clock.
        self.on_empty_cache: Callable[[], None] | None = None
        self._context = threading.local()  # per thread, as CUDA's current device
        self._lock = threading.Lock()

    def load_device(self, device: int, segments: list[dict[str, Any]], free: int, total: int,
                   retries: int = 0, ooms: int = 0) -> None:
        """Replaces one device's segments, statistics and driver figures."""
        with self._lock:
            self.segments = [s for s in self.segments if s["device"] != device] + segments
            self.stats[device] = stats_from(self.segments, device, retries=retries, ooms=ooms)
            self.mem[device] = (free, total)
            self.count = max(self.count, device + 1)

    def _call(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
        if name in self.fail:
            raise self.fail[name]

    def is_available(self) -> bool:
        self._call("is_available")
        return self.available

    def is_initialized(self) -> bool:
        self._call("is_initialized")
        return self.initialized

    def device_count(self) -> int:
        self._call("device_count")
        return self.count

    def set_device(self, device: int) -> None:
        """Records which device a thread made current (per thread in CUDA)."""
        self._call("set_device")
        with self._lock:
            self.set_devices.append((threading.current_thread().name, device))

    @contextlib.contextmanager
    def device(self, device: int) -> Iterator[None]:
        """torch.cuda.device(idx): device is this thread's current one inside the block."""
        self._call("device")
        stack = self._context.__dict__.setdefault("stack", [])
        stack.append(int(device))
        try:
            yield
        finally:
            stack.pop()

    def context_device(self) -> int | None:
        """The device of this thread's innermost device() block, or None."""
        stack = getattr(self._context, "stack", None)
        return stack[-1] if stack else None

    def current_device(self) -> int:
        self._call("current_device")
        return self.current

    def get_allocator_backend(self) -> str:
        self._call("get_allocator_backend")
        return self.backend

    def get_per_process_memory_fraction(self, device: int | None = None) -> float:
        self._call("get_per_process_memory_fraction")
        return self.fraction

    def memory_stats(self, device: int | None = None) -> dict[str, Any]:
        self._call("memory_stats")
        if not self.initialized:
            return {}
        return dict(self.stats.get(self.current if device is None else device, {}))

    def memory_reserved(self, device: int | None = None) -> int:
        self._call("memory_reserved")
        stats = self.stats.get(self.current if device is None else device, {})
        return int(stats.get("reserved_bytes.all.current", 0))

    def empty_cache(self) -> None:
        """Releases every wholly free segment of every device, as PyTorch's
        native allocator does (its emptyCache walks every device's cache,
        whatever the current device); the driver's free grows by as much."""
        with self._lock:
            self.empty_cache_calls.append((threading.current_thread().name, self.context_device()))
        self._call("empty_cache")
        if self.on_empty_cache is not None:
            self.on_empty_cache()
        with self._lock:
            released: Counter[int] = Counter()
            for s in self.segments:
                if flushable(s):
                    released[s["device"]] += s["total_size"]
            self.segments = [s for s in self.segments if not flushable(s)]
            for d, old in list(self.stats.items()):
                self.stats[d] = stats_from(self.segments, d, retries=old.get("num_alloc_retries", 0),
                                           ooms=old.get("num_ooms", 0))
                if d in self.mem:
                    free, total = self.mem[d]
                    self.mem[d] = (free + released[d], total)

    def mem_get_info(self, device: int | None = None) -> tuple[int, int]:
        self._call("mem_get_info")
        return self.mem[self.current if device is None else device]

    def _snapshot(self) -> Any:
        self._call("memory_snapshot")
        self.snapshot_event.set()
        segs = copy.deepcopy(self.segments)
        return {"segments": segs, "device_traces": []} if self.snapshot_as_dict else segs

    def memory_snapshot(self, mempool_id: Any = None, include_traces: bool = True) -> Any:
        self.last_include_traces = include_traces
        return self._snapshot()


class OldCuda(FakeCuda):
    """An older torch: memory_snapshot() takes no arguments and the fraction getter is missing."""

    get_per_process_memory_fraction = None  # type: ignore[assignment]

    def memory_snapshot(self) -> Any:  # type: ignore[override]
        return self._snapshot()


class Installed:
    """Context manager: sys.modules["torch"] is a fake for the duration."""

    def __init__(self, cuda: FakeCuda | None) -> None:
        self.cuda = cuda
        self._saved: Any = None

    def __enter__(self) -> FakeCuda | None:
        self._saved = sys.modules.get("torch")
        if self.cuda is None:
            sys.modules.pop("torch", None)
        else:
            mod = types.ModuleType("torch")
            mod.cuda = self.cuda  # type: ignore[attr-defined]
            mod.__fake__ = True  # type: ignore[attr-defined]
            sys.modules["torch"] = mod
        return self.cuda

    def __exit__(self, *exc: Any) -> None:
        if self._saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self._saved
