"""vLLM glue: a ``vllm.general_plugins`` entry point that starts the exporter
in every GPU worker, one port per worker.

vLLM calls every general plugin in each of its processes (API server, engine
core, GPU workers); in a worker it does so from WorkerWrapperBase.init_worker,
before the worker exists and before its device is chosen. So register() only
wraps WorkerWrapperBase.init_device: the exporter starts right after a worker
has set its CUDA device, which happens only in processes that run a worker.
Elsewhere the wrapper is never called and nothing starts. Without
GATEKEEPER_EXPORTER_PORT, register() does nothing at all.

Environment:
  GATEKEEPER_EXPORTER_PORT      base port; the worker with local rank r serves base + r
  GATEKEEPER_EXPORTER_HOST      address to bind (default 127.0.0.1, this pod only; 0.0.0.0
                                or :: when gatekeeper runs in another pod, as in Kubernetes)
  GATEKEEPER_EXPORTER_INTERVAL  seconds between snapshot checks (default 1.0)
  GATEKEEPER_EXPORTER_EMPTY_CACHE  1 serves POST /v1/internal/empty_cache (off by default;
                                its cost is in relief.py)
  GATEKEEPER_EXPORTER_TOKEN     bearer token that POST requires; unset, only loopback callers
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("gatekeeper_exporter")

ENV_PORT = "GATEKEEPER_EXPORTER_PORT"
ENV_HOST = "GATEKEEPER_EXPORTER_HOST"
ENV_INTERVAL = "GATEKEEPER_EXPORTER_INTERVAL"
ENV_EMPTY_CACHE = "GATEKEEPER_EXPORTER_EMPTY_CACHE"
ENV_TOKEN = "GATEKEEPER_EXPORTER_TOKEN"

WORKER_MODULE = "vllm.v1.worker.worker_base"
_HOOK_MARK = "_gatekeeper_exporter_hook"

# Exporters this process started, by port: init_device may run more than once
# and register() may be called more than once (vLLM asks plugins to be
# re-entrant). Guarded by _started_lock.
_started: dict[int, Any] = {}
_started_lock = threading.Lock()


@dataclass(frozen=True)
class Settings:
    """The plugin's configuration, read from the environment."""

    base_port: int
    host: str = "127.0.0.1"
    interval: float = 1.0
    empty_cache: bool = False
    token: str | None = field(default=None, repr=False)  # a secret: kept out of reprs and logs


def settings_from_env(env: Mapping[str, str]) -> Settings | None:
    """Returns the settings, or None when the plugin must stay idle.

    A bad GATEKEEPER_EXPORTER_EMPTY_CACHE or GATEKEEPER_EXPORTER_TOKEN only
    keeps empty_cache off (with a warning): the figures are still served.
    """
    raw = env.get(ENV_PORT, "").strip()
    if not raw:
        return None
    try:
        port = int(raw)
        interval = float(env.get(ENV_INTERVAL, "") or 1.0)
    except ValueError:
        logger.warning("gatekeeper_exporter: %s=%r or %s is not a number; exporter off", ENV_PORT, raw, ENV_INTERVAL)
        return None
    if not 0 < port < 65536 or not interval > 0:
        logger.warning("gatekeeper_exporter: %s=%r / %s out of range; exporter off", ENV_PORT, raw, ENV_INTERVAL)
        return None
    empty_cache, token = relief_from_env(env)
    return Settings(base_port=port, host=env.get(ENV_HOST, "").strip() or "127.0.0.1", interval=interval,
                    empty_cache=empty_cache, token=token)


def relief_from_env(env: Mapping[str, str]) -> tuple[bool, str | None]:
    """Returns (empty_cache on, token) from the environment; off on a bad value."""
    raw = env.get(ENV_EMPTY_CACHE, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False, None
    if raw not in ("1", "true", "yes", "on"):
        logger.warning("gatekeeper_exporter: %s=%r is not 1 or 0; empty_cache off", ENV_EMPTY_CACHE, raw)
        return False, None
    from .relief import valid_token

    token = env.get(ENV_TOKEN, "").strip() or None
    if token is not None and not valid_token(token):
        logger.warning("gatekeeper_exporter: %s is not a bearer token (visible ASCII, no spaces); empty_cache off",
                       ENV_TOKEN)
        return False, None
    return True, token


def register() -> None:
    """The vllm.general_plugins entry point. Never raises."""
    try:
        settings = settings_from_env(os.environ)
        if settings is None:
            return
        module = importlib.import_module(WORKER_MODULE)
        install_hook(module.WorkerWrapperBase, settings, _start_exporter)
    except Exception:  # noqa: BLE001 - a plugin must not break vLLM
        logger.warning("gatekeeper_exporter: vLLM plugin not installed", exc_info=True)


def install_hook(cls: type, settings: Settings, start: Callable[..., Any]) -> bool:
    """Wraps cls.init_device so a worker starts the exporter once its device is set.

    Returns False when cls is already wrapped. start(devices=[index],
    port=..., host=..., interval=...) is called after the original
    init_device returns.
    """
    current = cls.__dict__.get("init_device")
    if current is not None and getattr(current, _HOOK_MARK, False):
        return False
    if current is None:
        # Older wrappers delegate init_device to the worker through __getattr__.
        def current(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self.__dict__["worker"].init_device(*args, **kwargs)

    original = current

    @functools.wraps(original)
    def init_device(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        after_init_device(self, settings, start)
        return result

    setattr(init_device, _HOOK_MARK, True)
    cls.init_device = init_device
    return True


def after_init_device(wrapper: Any, settings: Settings, start: Callable[..., Any]) -> None:
    """Starts the exporter for the wrapper's worker when it runs on CUDA. Never raises."""
    try:
        worker = wrapper.__dict__.get("worker")  # not getattr: the wrapper's __getattr__ recurses
        device = getattr(worker, "device", None)
        if device is None or getattr(device, "type", None) != "cuda":
            return  # not a GPU worker
        index = device.index if device.index is not None else _current_device()
        rank = local_rank(worker, os.environ, index)
        port = settings.base_port + rank
        kwargs: dict[str, Any] = {"devices": [index], "port": port, "host": settings.host,
                                  "interval": settings.interval}
        if settings.empty_cache:
            kwargs.update(empty_cache=True, token=settings.token)
        with _started_lock:
            if port in _started:
                return
            _started[port] = start(**kwargs)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        logger.info("gatekeeper_exporter: GPU worker (local rank %d, cuda:%d) serves http://%s:%d/memory_blocks%s",
                    rank, index, host, port, " and POST /v1/internal/empty_cache" if settings.empty_cache else "")
    except Exception:  # noqa: BLE001 - a port in use, an odd worker: vLLM goes on
        logger.warning("gatekeeper_exporter: exporter not started in this worker", exc_info=True)


def local_rank(worker: Any, env: Mapping[str, str], fallback: int) -> int:
    """The worker's rank on this node: worker.local_rank, else LOCAL_RANK, else fallback."""
    rank = getattr(worker, "local_rank", None)
    if isinstance(rank, int) and rank >= 0:
        return rank
    try:
        return int(env["LOCAL_RANK"])
    except (KeyError, ValueError):
        return int(fallback)


def _current_device() -> int:
    import torch  # a GPU worker has imported it long before

    return int(torch.cuda.current_device())


def _start_exporter(**kwargs: Any) -> Any:
    from .server import start

    return start(**kwargs)
