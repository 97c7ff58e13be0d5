"""Reading the allocator: every call into torch lives here.

The reader never imports torch and never initialises CUDA: it uses the torch
the host process has already imported (``sys.modules``) and reads nothing
until ``torch.cuda.is_initialized()``. Each call is guarded; a failure becomes
an error string in the reading, never an exception in the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .figures import DeviceReading, change_key, segments_of

# Allocator configuration variables, newest name first (PyTorch ≥ 2.9 reads
# PYTORCH_ALLOC_CONF and still honours the older CUDA-specific name).
CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


# CUstreamCaptureMode: CU_STREAM_CAPTURE_MODE_RELAXED.
_CAPTURE_MODE_RELAXED = 2


class NotReady(Exception):
    """The process has no initialised CUDA (or no torch) to read yet."""


def driver_capture_exchange() -> Callable[[Any], int] | None:
    """Returns the driver's cuThreadExchangeStreamCaptureMode, or None where there is none."""
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    return fn


@contextlib.contextmanager
def relaxed_capture(exchange: Callable[[Any], int] | None) -> Iterator[None]:
    """Puts this thread in relaxed stream-capture mode for the block, then restores its mode.

    The host may be capturing a CUDA graph (vLLM does at start-up) in global
    mode, which forbids other threads "potentially unsafe" CUDA calls; the
    capture mode is per thread, so this changes nothing for the host's threads.
    """
    if exchange is None:
        yield
        return
    mode = ctypes.c_int(_CAPTURE_MODE_RELAXED)
    try:
        swapped = exchange(ctypes.byref(mode)) == 0
    except Exception:  # noqa: BLE001
        swapped = False
    try:
        yield
    finally:
        if swapped:
            exchange(ctypes.byref(mode))  # mode now holds the previous one


def expandable_from_conf(env: Mapping[str, str]) -> bool | None:
    """Reads expandable_segments from the allocator configuration variables.

    Returns None when neither variable says anything about it.
    """
    for var in CONF_VARS:
        conf = env.get(var)
        if not conf:
            continue
        for item in conf.split(","):
            key, _, value = item.partition(":")
            if key.strip() == "expandable_segments":
                return value.strip().lower() in ("true", "1")
    return None


class TorchReader:
    """Reads memory statistics and snapshots of the host process's torch.

    devices: the CUDA device indexes to report; None means every device the
    caching allocator has ever allocated on in this process (or the current
    device when there is none), so no CUDA context is created on a device the
    process does not use. Safe for concurrent use: it keeps no mutable state
    but a cached allocator backend.
    """

    def __init__(self, devices: Sequence[int] | None = None, env: Mapping[str, str] | None = None,
                 capture_exchange: Callable[[], Callable[[Any], int] | None] = driver_capture_exchange) -> None:
        self._devices = None if devices is None else [int(d) for d in devices]
        self._expandable = expandable_from_conf(os.environ if env is None else env)
        self._backend: str | None = None
        self._find_exchange = capture_exchange
        self._exchange: Callable[[Any], int] | None = None
        self._exchange_looked = False

    def _cuda(self) -> Any:
        torch = sys.modules.get("torch")
        if torch is None:
            raise NotReady("torch is not imported in this process")
        cuda = getattr(torch, "cuda", None)
        if cuda is None:
            raise NotReady("torch.cuda is not available")
        try:
            ready = bool(cuda.is_initialized())
        except Exception as e:  # noqa: BLE001 - a half-imported torch
            raise NotReady(f"torch.cuda.is_initialized: {e}") from e
        if not ready:
            raise NotReady("CUDA is not initialised in this process yet")
        return cuda

    def cuda(self) -> Any:
        """Returns the host's torch.cuda once CUDA is initialised there (raises NotReady)."""
        return self._cuda()

    def backend(self) -> str | None:
        """Returns the allocator backend ("native" or "cudaMallocAsync"), or None."""
        if self._backend is None:
            try:
                fn = getattr(self._cuda(), "get_allocator_backend", None)
                self._backend = str(fn()) if fn is not None else "native"
            except Exception:  # noqa: BLE001
                return None
        return self._backend

    def stats(self) -> dict[int, tuple[dict[str, Any] | None, str | None]]:
        """Returns (memory_stats, error) for every device to report (raises NotReady)."""
        cuda = self._cuda()
        if self._devices is not None:
            return {d: _stats(cuda, d) for d in self._devices}
        found: dict[int, tuple[dict[str, Any] | None, str | None]] = {}
        try:
            count = int(cuda.device_count())
        except Exception as e:  # noqa: BLE001
            raise NotReady(f"torch.cuda.device_count: {e}") from e
        for d in range(count):
            s, err = _stats(cuda, d)
            if s and (s.get("segment.all.allocated", 0) or s.get("reserved_bytes.all.current", 0)
                      or s.get("allocation.all.allocated", 0)):
                found[d] = (s, err)
        if not found:
            try:
                d = int(cuda.current_device())
            except Exception as e:  # noqa: BLE001
                raise NotReady(f"torch.cuda.current_device: {e}") from e
            found[d] = _stats(cuda, d)
        return found

    def change_keys(self) -> dict[int, tuple[int, int] | None]:
        """Returns (inactive_split_bytes, segment count) per device (raises NotReady)."""
        return {d: change_key(s) for d, (s, _) in self.stats().items()}

    def read(self) -> list[DeviceReading]:
        """Reads every device to report: statistics and the driver's free and total."""
        cuda = self._cuda()
        backend = self.backend()
        out = []
        found = self.stats()
        _pin_thread(cuda, next(iter(found), None))
        for d, (stats, err) in found.items():
            errors = [err] if err else []
            free = total = None
            try:
                with relaxed_capture(self._capture_exchange()):
                    free, total = (int(v) for v in cuda.mem_get_info(d))
            except Exception as e:  # noqa: BLE001
                errors.append(f"mem_get_info: {e}")
            out.append(DeviceReading(
                device=d, stats=stats, driver_free=free, driver_total=total, backend=backend,
                memory_fraction=_fraction(cuda, d), expandable_setting=self._expandable,
                errors=tuple(errors),
            ))
        return out

    def _capture_exchange(self) -> Callable[[Any], int] | None:
        if not self._exchange_looked:  # CUDA (so libcuda) is loaded by now
            self._exchange_looked = True
            try:
                self._exchange = self._find_exchange()
            except Exception:  # noqa: BLE001
                self._exchange = None
        return self._exchange

    def snapshot(self) -> list[Mapping[str, Any]]:
        """Takes a memory snapshot of every device, without traces.

        It holds the allocator's lock (and the GIL) while it copies every
        block: call it only off the request path, rate-limited.
        """
        fn = self._cuda().memory_snapshot
        try:
            takes_traces = "include_traces" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_traces = False
        raw = fn(include_traces=False) if takes_traces else fn()
        return segments_of(raw)


def _pin_thread(cuda: Any, device: int | None) -> None:
    """Makes device this thread's current CUDA device before mem_get_info.

    mem_get_info switches to its device and back; a new thread's current
    device is 0, and switching back to a device without a context could make
    one there (hundreds of MiB on a GPU the process does not use). The
    current device is per thread: the host's own threads are not touched.
    """
    set_device = getattr(cuda, "set_device", None)
    if device is None or set_device is None:
        return
    try:
        set_device(device)
    except Exception:  # noqa: BLE001 - mem_get_info will report its own error
        pass


def _stats(cuda: Any, device: int) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return dict(cuda.memory_stats(device)), None
    except Exception as e:  # noqa: BLE001 - becomes the reading's error
        return None, f"memory_stats: {e}"


def _fraction(cuda: Any, device: int) -> float | None:
    fn = getattr(cuda, "get_per_process_memory_fraction", None)
    if fn is None:
        return None
    try:
        return float(fn(device))
    except Exception:  # noqa: BLE001 - older torch, or no limit API
        return None
