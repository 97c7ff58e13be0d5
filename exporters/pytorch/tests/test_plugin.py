"""The vLLM plugin: idle without its variable and outside GPU workers, one port per rank."""

from __future__ import annotations

import os
import sys
import types
import unittest
from typing import Any
from unittest import mock

from gatekeeper_exporter import vllm_plugin
from gatekeeper_exporter.vllm_plugin import Settings, install_hook, local_rank, settings_from_env


class Device:
    def __init__(self, type: str, index: int | None) -> None:  # noqa: A002 - torch.device's name
        self.type, self.index = type, index


class FakeWorker:
    """vLLM's Worker as far as the hook looks: device and local_rank after init_device."""

    def __init__(self, local_rank: int, device_type: str = "cuda") -> None:
        self.local_rank = local_rank
        self.device_type = device_type
        self.device = None

    def init_device(self) -> None:
        self.device = Device(self.device_type, self.local_rank)


def wrapper_class(with_init_device: bool = True) -> type:
    """A WorkerWrapperBase: init_worker builds the worker, init_device sets it up."""

    class WorkerWrapperBase:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def init_worker(self, local_rank: int, device_type: str = "cuda") -> None:
            self.worker = FakeWorker(local_rank, device_type)

        def __getattr__(self, attr: str) -> Any:  # like vLLM's: recurses before init_worker
            return getattr(self.worker, attr)

    if with_init_device:
        def init_device(self) -> str:
            self.calls.append("init_device")
            self.worker.init_device()
            return "done"

        WorkerWrapperBase.init_device = init_device
    return WorkerWrapperBase


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, **kwargs: Any) -> object:
        self.calls.append(kwargs)
        if self.fail:
            raise self.fail
        return object()


class PluginTest(unittest.TestCase):
    def setUp(self):
        vllm_plugin._started.clear()
        self.addCleanup(vllm_plugin._started.clear)
        self.settings = Settings(base_port=18000, host="127.0.0.1", interval=0.5)

    def test_settings_from_env(self):
        cases = [
            ({}, None),
            ({"GATEKEEPER_EXPORTER_PORT": ""}, None),
            ({"GATEKEEPER_EXPORTER_PORT": "x"}, None),
            ({"GATEKEEPER_EXPORTER_PORT": "0"}, None),
            ({"GATEKEEPER_EXPORTER_PORT": "70000"}, None),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_INTERVAL": "-1"}, None),
            ({"GATEKEEPER_EXPORTER_PORT": "8001"}, Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": " 9100 ", "GATEKEEPER_EXPORTER_HOST": "0.0.0.0",
              "GATEKEEPER_EXPORTER_INTERVAL": "2.5"}, Settings(9100, "0.0.0.0", 2.5)),
            # The bind address: blank is the loopback default; IPv6 as written.
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_HOST": "  "}, Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_HOST": " :: "}, Settings(8001, "::", 1.0)),
            ({"GATEKEEPER_EXPORTER_HOST": "0.0.0.0"}, None),  # no port: the plugin stays off
            # empty_cache: off unless asked; a bad flag or token keeps it off, the figures on.
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1"},
             Settings(8001, "127.0.0.1", 1.0, empty_cache=True)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": " True ",
              "GATEKEEPER_EXPORTER_TOKEN": " s3cret "}, Settings(8001, "127.0.0.1", 1.0, True, "s3cret")),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "0",
              "GATEKEEPER_EXPORTER_TOKEN": "s3cret"}, Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_TOKEN": "s3cret"}, Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "maybe"},
             Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1",
              "GATEKEEPER_EXPORTER_TOKEN": "two words"}, Settings(8001, "127.0.0.1", 1.0)),
            ({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1",
              "GATEKEEPER_EXPORTER_TOKEN": "  "}, Settings(8001, "127.0.0.1", 1.0, empty_cache=True)),
        ]
        for env, want in cases:
            with self.subTest(env=env), self.assertNoLogs("gatekeeper_exporter", "ERROR"):
                self.assertEqual(settings_from_env(env), want)

    def test_token_stays_out_of_logs(self):
        settings = settings_from_env({"GATEKEEPER_EXPORTER_PORT": "8001", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1",
                                      "GATEKEEPER_EXPORTER_TOKEN": "s3cret"})
        self.assertNotIn("s3cret", repr(settings))
        cls = wrapper_class()
        install_hook(cls, settings, Recorder())
        w = cls()
        w.init_worker(0)
        with self.assertLogs("gatekeeper_exporter", "INFO") as logs:
            w.init_device()
        self.assertIn("empty_cache", logs.output[0])
        self.assertNotIn("s3cret", "".join(logs.output))

    def test_port_per_rank(self):
        cls = wrapper_class()
        start = Recorder()
        self.assertTrue(install_hook(cls, self.settings, start))
        for rank in (0, 1, 3):
            w = cls()
            w.init_worker(rank)
            self.assertEqual(w.init_device(), "done")
        self.assertEqual([c["port"] for c in start.calls], [18000, 18001, 18003])
        self.assertEqual([c["devices"] for c in start.calls], [[0], [1], [3]])
        self.assertEqual(start.calls[0]["host"], "127.0.0.1")
        self.assertEqual(start.calls[0]["interval"], 0.5)

    def test_reentrant(self):
        cls = wrapper_class()
        start = Recorder()
        self.assertTrue(install_hook(cls, self.settings, start))
        self.assertFalse(install_hook(cls, self.settings, start))  # register() called twice
        w = cls()
        w.init_worker(2)
        w.init_device()
        w.init_device()  # init_device again (elastic scaling): same port, started once
        self.assertEqual(len(start.calls), 1)
        self.assertEqual(w.calls, ["init_device", "init_device"])

    def test_idle_outside_gpu_workers(self):
        cls = wrapper_class()
        start = Recorder()
        install_hook(cls, self.settings, start)
        # An API server or engine core process: the class is hooked, no worker ever set up.
        cls()
        # A worker on another platform.
        w = cls()
        w.init_worker(0, device_type="cpu")
        w.init_device()
        self.assertEqual(start.calls, [])

    def test_start_failure_does_not_break_vllm(self):
        cls = wrapper_class()
        install_hook(cls, self.settings, Recorder(fail=OSError("address in use")))
        w = cls()
        w.init_worker(0)
        with self.assertLogs("gatekeeper_exporter", "WARNING") as logs:
            self.assertEqual(w.init_device(), "done")
        self.assertIn("not started", logs.output[0])

    def test_older_wrapper_without_init_device(self):
        cls = wrapper_class(with_init_device=False)
        start = Recorder()
        install_hook(cls, self.settings, start)
        w = cls()
        w.init_worker(1)
        w.init_device()
        self.assertEqual(w.worker.device.index, 1)
        self.assertEqual(start.calls[0]["port"], 18001)

    def test_local_rank(self):
        self.assertEqual(local_rank(FakeWorker(2), {"LOCAL_RANK": "5"}, 0), 2)
        no_rank = types.SimpleNamespace()
        self.assertEqual(local_rank(no_rank, {"LOCAL_RANK": "5"}, 0), 5)
        self.assertEqual(local_rank(no_rank, {}, 7), 7)
        self.assertEqual(local_rank(no_rank, {"LOCAL_RANK": "x"}, 7), 7)


class RegisterTest(unittest.TestCase):
    """register() itself, the entry point vLLM calls, with a fake vllm package."""

    def setUp(self):
        vllm_plugin._started.clear()
        self.addCleanup(vllm_plugin._started.clear)
        self.saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
        self.addCleanup(self.restore)

    def restore(self):
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(self.saved)

    def fake_vllm(self) -> type:
        cls = wrapper_class()
        names = ["vllm", "vllm.v1", "vllm.v1.worker", "vllm.v1.worker.worker_base"]
        for name in names:
            sys.modules[name] = types.ModuleType(name)
        sys.modules["vllm.v1.worker.worker_base"].WorkerWrapperBase = cls
        return cls

    def test_without_env_does_nothing(self):
        cls = self.fake_vllm()
        original = cls.init_device
        with mock.patch.dict(os.environ, {"GATEKEEPER_EXPORTER_PORT": ""}):
            vllm_plugin.register()
        self.assertIs(cls.init_device, original)

    def test_without_env_imports_nothing(self):
        self.restore()
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        env = {k: v for k, v in os.environ.items() if k != "GATEKEEPER_EXPORTER_PORT"}
        with mock.patch.dict(os.environ, env, clear=True), \
                mock.patch("importlib.import_module", side_effect=AssertionError("imported")):
            vllm_plugin.register()
        self.assertNotIn("vllm", sys.modules)

    def test_without_vllm_logs(self):
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        with mock.patch.dict(os.environ, {"GATEKEEPER_EXPORTER_PORT": "18000"}), \
                mock.patch.dict(sys.modules, {"vllm": None}), \
                self.assertLogs("gatekeeper_exporter", "WARNING"):
            vllm_plugin.register()  # does not raise

    def test_with_env_hooks_the_worker(self):
        cases = [
            ({"GATEKEEPER_EXPORTER_PORT": "18100"}, "127.0.0.1", {}),
            # Kubernetes: gatekeeper is in another pod, so the worker binds every address.
            ({"GATEKEEPER_EXPORTER_PORT": "18100", "GATEKEEPER_EXPORTER_HOST": "0.0.0.0"}, "0.0.0.0", {}),
            # The relief action, with its token: passed only when turned on.
            ({"GATEKEEPER_EXPORTER_PORT": "18100", "GATEKEEPER_EXPORTER_HOST": "0.0.0.0",
              "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1", "GATEKEEPER_EXPORTER_TOKEN": "s3cret"}, "0.0.0.0",
             {"empty_cache": True, "token": "s3cret"}),
            ({"GATEKEEPER_EXPORTER_PORT": "18100", "GATEKEEPER_EXPORTER_EMPTY_CACHE": "1"}, "127.0.0.1",
             {"empty_cache": True, "token": None}),
        ]
        for env, want_host, want_relief in cases:
            with self.subTest(env=env):
                vllm_plugin._started.clear()
                cls = self.fake_vllm()
                start = Recorder()
                clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEKEEPER_EXPORTER_")}
                with mock.patch.dict(os.environ, {**clean, **env}, clear=True), \
                        mock.patch.object(vllm_plugin, "_start_exporter", start):
                    vllm_plugin.register()
                    vllm_plugin.register()
                    w = cls()
                    w.init_worker(1)
                    w.init_device()
                self.assertEqual(start.calls, [{"devices": [1], "port": 18101, "host": want_host, "interval": 1.0,
                                                **want_relief}])


if __name__ == "__main__":
    unittest.main()
