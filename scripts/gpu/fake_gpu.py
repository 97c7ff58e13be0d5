"""A fake torch for the dry run of vllm_like.py: one CUDA device with a byte budget.

It extends the exporter's fake (exporters/pytorch/tests/fake_torch.py:
FakeCuda, what the exporter reads) with what the engine calls:
torch.empty / torch.randn / matmul return tensors that only count bytes, a
model of PyTorch's CUDA caching allocator hands them out, and allocations
fail with torch.cuda.OutOfMemoryError when the device is full. Nothing here
touches real memory or needs torch.

The allocator's rules (SIM-FACTS.md; c10/cuda/CUDACachingAllocator.cpp):
sizes round up to 512 B; up to 1 MiB goes to the small pool (2 MiB
segments), larger to the large pool (a 20 MiB segment below 10 MiB, else
the size rounded up to 2 MiB); best fit inside the pool; a block is split
when at least 512 B (small) or more than 1 MiB (large) remain; a freed block
merges with free neighbours. No cached block fits: a new segment from the
driver; refused: every wholly free cached segment goes back to the driver
(num_alloc_retries) and it tries once more; refused again: out of memory
(num_ooms).

The driver is shared by the processes of one dry run through a directory
holding one file per process id (its segments plus a CUDA context), so a
second process's memory shows in mem_get_info, as NVML shows it, but not in
this process's allocator statistics. A dead process's file is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "exporters", "pytorch"))

from tests.fake_torch import FakeCuda, stats_from  # noqa: E402

MIB = 1 << 20
MIN_BLOCK = 512
SMALL_SIZE = 1 * MIB
SMALL_BUFFER = 2 * MIB
LARGE_BUFFER = 20 * MIB
MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError of the fake."""


def round_size(n: int) -> int:
    return max(MIN_BLOCK, -(-n // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


# ---------------------------------------------------------------- the driver


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Driver:
    """The device's memory as the driver sees it. Safe for concurrent use (threads and processes)."""

    def __init__(self, total: int, context: int, directory: str | None = None) -> None:
        self.total = int(total)
        self.dir = directory
        self._mine = int(context)
        self._lock = threading.Lock()
        if directory:
            os.makedirs(directory, exist_ok=True)
        with self._locked():
            self._publish()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if not self.dir:
                yield
                return
            with open(os.path.join(self.dir, ".lock"), "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)

    def _publish(self) -> None:
        if not self.dir:
            return
        path = os.path.join(self.dir, str(os.getpid()))
        with open(path + ".tmp", "w") as f:
            f.write(str(self._mine))
        os.replace(path + ".tmp", path)

    def _others(self) -> int:
        if not self.dir:
            return 0
        me, total = os.getpid(), 0
        for name in os.listdir(self.dir):
            if not name.isdigit() or int(name) == me or not _alive(int(name)):
                continue
            try:
                with open(os.path.join(self.dir, name)) as f:
                    total += int(f.read() or 0)
            except (OSError, ValueError):
                continue
        return total

    def malloc(self, n: int) -> bool:
        with self._locked():
            if self._others() + self._mine + n > self.total:
                return False
            self._mine += n
            self._publish()
            return True

    def release(self, n: int) -> None:
        with self._locked():
            self._mine -= n
            self._publish()

    def free(self) -> int:
        with self._locked():
            return max(0, self.total - self._others() - self._mine)


# ---------------------------------------------------------------- the caching allocator


@dataclass(eq=False)
class Block:
    seg: Segment
    addr: int
    size: int
    allocated: bool = False
    requested: int = 0


@dataclass(eq=False)
class Segment:
    addr: int
    size: int
    small: bool
    blocks: list[Block] = field(default_factory=list)


class Allocator:
    """PyTorch's caching allocator on one fake device. Safe for concurrent use (one lock)."""

    def __init__(self, driver: Driver, device: int = 0) -> None:
        self.driver = driver
        self.device = device
        self._lock = threading.RLock()
        # Guarded by _lock:
        self.segments: list[Segment] = []
        self.allocated = 0
        self.peak = 0
        self.retries = 0
        self.ooms = 0
        self._next_addr = 0x7F0000000000

    def malloc(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        with self._lock:
            b = self._best_fit(size, small)
            if b is None:
                b = self._new_segment(size, small, nbytes)
            self._split(b, size, small)
            b.allocated, b.requested = True, nbytes
            self.allocated += b.size
            self.peak = max(self.peak, self.allocated)
            return b

    def _best_fit(self, size: int, small: bool) -> Block | None:
        best = None
        for s in self.segments:
            if s.small != small:
                continue
            for b in s.blocks:
                if not b.allocated and b.size >= size and (best is None or b.size < best.size):
                    best = b
        return best

    def _new_segment(self, size: int, small: bool, asked: int) -> Block:
        seg = segment_size(size)
        if not self.driver.malloc(seg):
            self._release_free_segments()
            self.retries += 1
            if not self.driver.malloc(seg):
                self.ooms += 1
                raise OutOfMemoryError(self._oom_message(asked))
        s = Segment(self._next_addr, seg, small)
        self._next_addr += -(-seg // ROUND_LARGE) * ROUND_LARGE + ROUND_LARGE
        s.blocks.append(Block(s, s.addr, seg))
        self.segments.append(s)
        return s.blocks[0]

    def _split(self, b: Block, size: int, small: bool) -> None:
        rest = b.size - size
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            s = b.seg
            i = s.blocks.index(b)
            b.size = size
            s.blocks.insert(i + 1, Block(s, b.addr + size, rest))

    def free(self, b: Block) -> None:
        with self._lock:
            if not b.allocated:
                return
            b.allocated = False
            self.allocated -= b.size
            s = b.seg
            i = s.blocks.index(b)
            if i + 1 < len(s.blocks) and not s.blocks[i + 1].allocated:
                b.size += s.blocks.pop(i + 1).size
            if i > 0 and not s.blocks[i - 1].allocated:
                prev = s.blocks[i - 1]
                prev.size += s.blocks.pop(i).size

    def _release_free_segments(self) -> None:
        keep = []
        for s in self.segments:
            if len(s.blocks) == 1 and not s.blocks[0].allocated:
                self.driver.release(s.size)
            else:
                keep.append(s)
        self.segments = keep

    def empty_cache(self) -> None:
        with self._lock:
            self._release_free_segments()

    def reserved(self) -> int:
        with self._lock:
            return sum(s.size for s in self.segments)

    def _oom_message(self, asked: int) -> str:
        reserved = sum(s.size for s in self.segments)
        gib = 1 << 30
        return (f"CUDA out of memory. Tried to allocate {asked / gib:.2f} GiB. GPU {self.device} has a total "
                f"capacity of {self.driver.total / gib:.2f} GiB of which {self.driver.free() / MIB:.2f} MiB is "
                f"free. Of the allocated memory {self.allocated / gib:.2f} GiB is allocated by PyTorch, and "
                f"{(reserved - self.allocated) / MIB:.2f} MiB is reserved by PyTorch but unallocated. (fake GPU)")

    def snapshot(self) -> list[dict[str, Any]]:
        """The segments in torch.cuda.memory_snapshot()'s shape."""
        with self._lock:
            out = []
            for s in self.segments:
                blocks = [{"address": b.addr, "size": b.size, "requested_size": b.requested if b.allocated else 0,
                           "state": "active_allocated" if b.allocated else "inactive", "frames": []}
                          for b in s.blocks]
                alloc = sum(b.size for b in s.blocks if b.allocated)
                out.append({"device": self.device, "address": s.addr, "total_size": s.size,
                            "allocated_size": alloc, "active_size": alloc, "requested_size": alloc, "stream": 0,
                            "segment_type": "small" if s.small else "large", "segment_pool_id": (0, 0),
                            "is_expandable": False, "frames": [], "blocks": blocks})
            return out

    def stats(self) -> dict[str, Any]:
        """torch.cuda.memory_stats() of this device (the exporter's fake counts them from the snapshot)."""
        with self._lock:
            st = stats_from(self.snapshot(), self.device, retries=self.retries, ooms=self.ooms)
            st["allocated_bytes.all.peak"] = self.peak
            return st


# ---------------------------------------------------------------- tensors and the module


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int

    def __repr__(self) -> str:
        return f"torch.{self.name}"


DTYPES = {n: DType(n, b) for n, b in (("bfloat16", 2), ("float16", 2), ("float32", 4), ("int64", 8),
                                       ("int32", 4), ("bool", 1), ("uint8", 1))}


class Tensor:
    """An empty tensor: its bytes are held in the fake allocator until it is dropped."""

    def __init__(self, alloc: Allocator, shape: tuple[int, ...], dtype: DType) -> None:
        self._block: Block | None = None
        self._alloc = alloc
        self.shape = tuple(int(x) for x in shape)
        self.dtype = dtype
        n = self.numel() * dtype.itemsize
        if n > 0:
            self._block = alloc.malloc(n)

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __matmul__(self, other: Tensor) -> Tensor:
        return Tensor(self._alloc, self.shape[:-1] + other.shape[-1:], self.dtype)

    def __del__(self) -> None:
        b = getattr(self, "_block", None)
        if b is not None:
            try:
                self._alloc.free(b)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


class FakeGpuCuda(FakeCuda):
    """torch.cuda of the fake: FakeCuda's counting, read from the allocator and the driver."""

    OutOfMemoryError = OutOfMemoryError

    def __init__(self, alloc: Allocator, name: str, sms: int) -> None:
        super().__init__()
        self.alloc = alloc
        self.name = name
        self.sms = sms
        self.count = 1

    def memory_stats(self, device: int | None = None) -> dict[str, Any]:
        self._call("memory_stats")
        return self.alloc.stats()

    def mem_get_info(self, device: int | None = None) -> tuple[int, int]:
        self._call("mem_get_info")
        return self.alloc.driver.free(), self.alloc.driver.total

    def _snapshot(self) -> Any:
        self._call("memory_snapshot")
        self.snapshot_event.set()
        return self.alloc.snapshot()

    def memory_reserved(self, device: int | None = None) -> int:
        return self.alloc.reserved()

    def memory_allocated(self, device: int | None = None) -> int:
        return self.alloc.allocated

    def max_memory_allocated(self, device: int | None = None) -> int:
        return self.alloc.peak

    def reset_peak_memory_stats(self, device: int | None = None) -> None:
        with self.alloc._lock:
            self.alloc.peak = self.alloc.allocated

    def empty_cache(self) -> None:
        self.alloc.empty_cache()

    def synchronize(self, device: int | None = None) -> None:
        pass

    def get_device_name(self, device: int | None = None) -> str:
        return self.name

    def get_device_properties(self, device: int | None = None) -> types.SimpleNamespace:
        """What the engine reads of torch's _CudaDeviceProperties: the SM count sizes the Triton buffer."""
        return types.SimpleNamespace(name=self.name, total_memory=self.alloc.driver.total,
                                     multi_processor_count=self.sms)


def build(total: int, context: int, directory: str | None, name: str = "fake GPU", sms: int = 132) -> types.ModuleType:
    """A torch module whose only device is a fake one of total bytes (context: this process's CUDA context)
    with sms streaming multiprocessors (an H100 SXM's 132 by default)."""
    alloc = Allocator(Driver(total, context, directory))
    mod = types.ModuleType("torch")
    mod.cuda = FakeGpuCuda(alloc, name, sms)  # type: ignore[attr-defined]
    mod.__fake__ = True  # type: ignore[attr-defined]
    mod.__version__ = "fake"  # type: ignore[attr-defined]
    mod.version = types.SimpleNamespace(cuda=None)  # type: ignore[attr-defined]
    mod.Tensor = Tensor  # type: ignore[attr-defined]
    for n, d in DTYPES.items():
        setattr(mod, n, d)

    def empty(*size: Any, dtype: DType = DTYPES["float32"], device: Any = None) -> Tensor:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        return Tensor(alloc, shape, dtype)

    mod.empty = empty  # type: ignore[attr-defined]
    mod.randn = empty  # type: ignore[attr-defined]
    mod.matmul = lambda a, b: a @ b  # type: ignore[attr-defined]
    mod.manual_seed = lambda seed: None  # type: ignore[attr-defined]
    return mod


def install(mod: types.ModuleType) -> None:
    """Makes mod the process's torch (the exporter reads sys.modules["torch"])."""
    sys.modules["torch"] = mod
