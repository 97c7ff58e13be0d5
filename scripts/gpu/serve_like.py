#!/usr/bin/env python3
"""Serving-like work on one GPU with the allocator exporter on; driven by check.sh.

    serve_like.py --out DIR [--gatekeeper BIN] [--budget-s 240]   the main run
    serve_like.py --out DIR --phase expandable [--budget-s 60]    a short run (set PYTORCH_CUDA_ALLOC_CONF first)
    serve_like.py --self-check [--gatekeeper BIN]                 the CPU-testable parts, against the fake torch

The main run, every loop bounded in count and time, only loopback addresses:
  1. a small random-weight Llama (transformers config) on cuda:0 in bf16, the
     exporter on 127.0.0.1 (port 0), a stand-in upstream (/health, /metrics)
     and gatekeeper reading the exporter's /memory_blocks;
  2. "mixed": batches of mixed prompt lengths, prefill + a few decode steps,
     some requests' KV caches kept alive, others dropped; at each moment
     (work paused) the exporter's figures are compared with torch's own
     (memory_stats, mem_get_info, a fresh snapshot) and gatekeeper's
     vllm_gpu_memory_fragmentation / gatekeeper_pressure_signal{,_per_second,_bytes}
     are read;
  3. "tight": set_per_process_memory_fraction leaves little headroom; same
     work, OOMs caught; the timeline shows how the ratio moves; at the end a
     bisection finds the largest allocation that really succeeds, to compare
     with largest_free_block_bytes;
  4. "cost": memory_snapshot's cost against the segment count;
  5. fixtures (memory_stats, mem_get_info, trimmed snapshot) for the CPU tests.
Everything lands in DIR: timeline.csv, timeline.json, compare.json,
snapshot_cost.json, probe.json, fixtures/*.json, gatekeeper/*, summary.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "exporters", "pytorch"))

import gatekeeper_exporter  # noqa: E402
from gatekeeper_exporter.figures import DeviceReading, compute_block, segments_of, summarize  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
HTTP_TIMEOUT = 5.0
FIXTURE_SEGMENT_CAP = 1500  # a fixture keeps at most this many segments (then "trimmed")

# ---------------------------------------------------------------- pure helpers (self-checked on the CPU)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gatekeeper_config(listen: str, admin: str, upstream: str, exporter_url: str) -> str:
    """A small policy: one upstream whose only pressure source is the exporter."""
    return f"""# written by scripts/gpu/serve_like.py
mode: observe
server:
  listen: "{listen}"
  admin_listen: "{admin}"
  drain_delay: 0s
  shutdown_timeout: 2s
upstreams:
  - name: gpu-check
    url: {upstream}
    max_inflight: 64
    min_inflight: 4
    gpus: ["0"]
    sources:
      - {{kind: memory_blocks, url: {exporter_url}}}
health_check:
  path: /health
  interval: 1s
  timeout: 500ms
pressure:
  interval: 500ms
  stale_after: 3s
"""


def parse_prom(text: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Returns the samples of the named metrics: {"name", "labels", "value"}."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        if name not in names:
            continue
        lab = {}
        for part in labels.rstrip("}").split(","):
            if "=" in part:
                k, _, v = part.partition("=")
                lab[k.strip()] = v.strip().strip('"')
        try:
            out.append({"name": name, "labels": lab, "value": float(value)})
        except ValueError:
            continue
    return out


def gatekeeper_view(metrics_text: str) -> dict[str, float]:
    """The numbers of gatekeeper's /metrics that the timeline keeps."""
    view: dict[str, float] = {}
    # A signal's value is under the family of its unit: dimensionless,
    # _per_second or _bytes.
    signal_families = ("gatekeeper_pressure_signal", "gatekeeper_pressure_signal_per_second",
                       "gatekeeper_pressure_signal_bytes")
    for s in parse_prom(metrics_text, ("vllm_gpu_memory_fragmentation", *signal_families,
                                       "gatekeeper_source_up", "gatekeeper_effective_utilization")):
        lab = s["labels"]
        if s["name"] == "vllm_gpu_memory_fragmentation":
            view[f"gk_classic_ratio_gpu{lab.get('gpu_id')}"] = s["value"]
        elif s["name"] in signal_families and lab.get("gpu_id"):
            view[f"gk_{lab.get('signal')}_gpu{lab.get('gpu_id')}"] = s["value"]
        elif s["name"] == "gatekeeper_source_up":
            view["gk_source_up"] = s["value"]
        elif s["name"] == "gatekeeper_effective_utilization":
            view[f"gk_effective_utilization_gpu{lab.get('gpu_id')}"] = s["value"]
    return view


def torch_own(torch: Any, device: int) -> dict[str, Any]:
    """torch's own figures at this moment: statistics, the driver and a fresh snapshot."""
    cuda = torch.cuda
    stats = dict(cuda.memory_stats(device))
    free, total = (int(x) for x in cuda.mem_get_info(device))
    t0 = time.perf_counter()
    segs = segments_of(_snapshot(cuda))
    snap_ms = (time.perf_counter() - t0) * 1e3
    fraction = None
    getter = getattr(cuda, "get_per_process_memory_fraction", None)
    if getter is not None:
        try:
            fraction = float(getter(device))
        except Exception:  # noqa: BLE001
            fraction = None
    reading = DeviceReading(device=device, stats=stats, driver_free=free, driver_total=total,
                            backend=str(cuda.get_allocator_backend()), memory_fraction=fraction)
    fresh = compute_block(reading, summarize(segs, device, 0.0), 0.0)
    return {"stats": stats, "free": free, "total": total, "segments": segs, "snapshot_ms": snap_ms,
            "fresh": fresh}


def compare(exported: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """Differences between what the exporter served and torch's own figures at one moment."""
    st = own["stats"]
    want = {
        "reserved_bytes": st.get("reserved_bytes.all.current"),
        "allocated_bytes": st.get("allocated_bytes.all.current"),
        "inactive_split_bytes": st.get("inactive_split_bytes.all.current"),
        "alloc_retry_count": st.get("num_alloc_retries"),
        "segment_count": st.get("segment.all.current"),
        "total_bytes": own["total"],
        "used_bytes": own["total"] - own["free"],
    }
    row: dict[str, Any] = {}
    for k, v in want.items():
        row[f"diff_{k}"] = None if v is None or k not in exported else exported[k] - v
    fresh = own["fresh"]
    for k in ("free_bytes", "largest_free_block_bytes", "fragmentation_ratio"):
        if k in exported and k in fresh:
            row[f"diff_{k}_vs_fresh_snapshot"] = round(exported[k] - fresh[k], 6)
    row["snapshot_age_seconds"] = exported.get("snapshot_age_seconds")
    return row


def trim_snapshot(segs: list[dict[str, Any]], device: int, cap: int = FIXTURE_SEGMENT_CAP) -> tuple[list, bool]:
    """Keeps one device's segments without stack frames; at most cap of them."""
    mine = []
    for s in segs:
        if s.get("device", device) != device:
            continue
        seg = {k: v for k, v in s.items() if k != "frames"}
        if isinstance(seg.get("segment_pool_id"), tuple):
            seg["segment_pool_id"] = list(seg["segment_pool_id"])
        seg["blocks"] = [{k: v for k, v in b.items() if k != "frames"} for b in s.get("blocks", [])]
        mine.append(seg)
    return mine[:cap], len(mine) > cap


def fixture(torch: Any, device: int, own: dict[str, Any], exported: dict[str, Any] | None, phase: str) -> dict:
    """A recorded fixture for exporters/pytorch/tests/test_recorded.py."""
    segs, trimmed = trim_snapshot(own["segments"], device)
    return {
        "phase": phase,
        "torch_version": str(getattr(torch, "__version__", "?")),
        "device": device,
        "backend": str(torch.cuda.get_allocator_backend()),
        "memory_stats": own["stats"],
        "mem_get_info": [own["free"], own["total"]],
        "snapshot": segs,
        "trimmed": trimmed,
        "torch_view": {"memory_reserved": own["stats"].get("reserved_bytes.all.current"),
                       "memory_allocated": own["stats"].get("allocated_bytes.all.current")},
        "exported": exported,
        "fresh": own["fresh"],
    }


def _snapshot(cuda: Any) -> Any:
    try:
        return cuda.memory_snapshot(include_traces=False)
    except TypeError:
        return cuda.memory_snapshot()


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as r:
        return r.read()


# ---------------------------------------------------------------- the stand-in upstream


class _Upstream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"ok\n" if self.path.startswith("/health") else b""
        code = 200 if self.path.startswith(("/health", "/metrics")) else 404
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def start_upstream() -> tuple[ThreadingHTTPServer, str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="stand-in-upstream", daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


# ---------------------------------------------------------------- gatekeeper


class Gatekeeper:
    """gatekeeper as a child process reading the exporter; stopped at exit."""

    def __init__(self, binary: str, out: str, upstream: str, exporter_url: str) -> None:
        self.dir = os.path.join(out, "gatekeeper")
        os.makedirs(self.dir, exist_ok=True)
        self.admin = f"127.0.0.1:{free_port()}"
        cfg = os.path.join(self.dir, "policy.yaml")
        with open(cfg, "w") as f:
            f.write(gatekeeper_config(f"127.0.0.1:{free_port()}", self.admin, upstream, exporter_url))
        check = subprocess.run([binary, "-config", cfg, "-check"], capture_output=True, text=True, timeout=30)
        with open(os.path.join(self.dir, "check.txt"), "w") as f:
            f.write(f"rc={check.returncode}\n{check.stdout}{check.stderr}")
        self.log = open(os.path.join(self.dir, "gatekeeper.log"), "w")
        self.proc = subprocess.Popen([binary, "-config", cfg], stdout=self.log, stderr=subprocess.STDOUT)

    def metrics(self) -> str:
        try:
            return http_get(f"http://{self.admin}/metrics").decode()
        except Exception as e:  # noqa: BLE001
            return f"# error: {e}\n"

    def state(self, name: str) -> None:
        try:
            body = http_get(f"http://{self.admin}/admin/state")
        except Exception as e:  # noqa: BLE001
            body = json.dumps({"error": str(e)}).encode()
        with open(os.path.join(self.dir, f"state-{name}.json"), "wb") as f:
            f.write(body)

    def stop(self) -> None:
        with open(os.path.join(self.dir, "metrics-final.txt"), "w") as f:
            f.write(self.metrics())
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()


# ---------------------------------------------------------------- the GPU run


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.out = args.out
        self.deadline = time.monotonic() + args.budget_s
        self.device = 0
        self.rng = random.Random(7)
        self.rows: list[dict[str, Any]] = []
        self.compares: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {"phase_set": args.phase, "ooms_caught": 0, "steps": 0}
        self.kept: list[Any] = []  # in-flight requests' KV caches
        self.exporter = None
        self.gatekeeper: Gatekeeper | None = None
        self.t0 = time.monotonic()
        os.makedirs(os.path.join(self.out, "fixtures"), exist_ok=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    # -- setup

    def setup(self) -> None:
        torch = self.torch
        torch.cuda.set_device(self.device)
        torch.ones(1, device="cuda")  # CUDA initialised before the exporter reads anything
        self.exporter = gatekeeper_exporter.start(port=0, devices=[self.device], interval=0.5)
        self.summary["exporter_url"] = self.exporter.url
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
                          num_key_value_heads=8, vocab_size=32000, max_position_embeddings=8192,
                          attn_implementation="sdpa")
        torch.manual_seed(0)
        with torch.device("cuda"):  # random weights made on the GPU: seconds, not minutes
            self.model = LlamaForCausalLM(cfg).to(dtype=torch.bfloat16).eval()
        torch.cuda.empty_cache()
        self.vocab = cfg.vocab_size
        self.summary["model"] = {"params": sum(p.numel() for p in self.model.parameters()),
                                 "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size}
        self.summary["env"] = {
            "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
            "backend": torch.cuda.get_allocator_backend(),
            "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "PYTORCH_ALLOC_CONF": os.environ.get("PYTORCH_ALLOC_CONF"),
        }
        if self.args.gatekeeper and self.args.phase == "main":
            self.upstream, upstream_url = start_upstream()
            self.gatekeeper = Gatekeeper(self.args.gatekeeper, self.out, upstream_url, self.exporter.url)

    # -- work

    def step(self, long_bias: float) -> None:
        torch = self.torch
        batch = self.rng.choice([1, 2, 4, 8, 16, 24])
        lengths = [self.rng.choice([32, 96, 200, 512, 1000, 1800]) for _ in range(batch)]
        if self.rng.random() < long_bias:
            lengths[0] = self.rng.choice([3000, 4000, 6000])
        seq = max(lengths)
        try:
            with torch.inference_mode():
                ids = torch.randint(0, self.vocab, (batch, seq), device="cuda")
                out = self.model.model(input_ids=ids, use_cache=True)
                cache = out.past_key_values
                nxt = self.model.lm_head(out.last_hidden_state[:, -1:]).argmax(-1)
                for _ in range(self.rng.randint(2, 6)):  # a few decode steps: the KV cache grows
                    out = self.model.model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
                    nxt = self.model.lm_head(out.last_hidden_state[:, -1:]).argmax(-1)
            self.kept.append(cache)
        except torch.cuda.OutOfMemoryError:
            self.summary["ooms_caught"] += 1
            self.kept.clear()
        while len(self.kept) > 6 or (self.kept and self.rng.random() < 0.3):
            self.kept.pop(self.rng.randrange(len(self.kept)))
        self.summary["steps"] += 1

    # -- a moment: work paused, everyone's figures side by side

    def moment(self, phase: str, step: int) -> dict[str, Any]:
        torch = self.torch
        torch.cuda.synchronize()
        paused = time.monotonic()
        exported = self._exported_after(paused)
        own = torch_own(torch, self.device)
        row: dict[str, Any] = {"t": round(time.monotonic() - self.t0, 3), "phase": phase, "step": step,
                               "ooms_caught": self.summary["ooms_caught"], "kept": len(self.kept),
                               "snapshot_ms": round(own["snapshot_ms"], 3), "segments_fresh": len(own["segments"])}
        for k in ("free_bytes", "largest_free_block_bytes", "fragmentation_ratio", "reserved_bytes",
                  "allocated_bytes", "inactive_split_bytes", "segment_count", "alloc_retry_count", "num_ooms",
                  "snapshot_age_seconds"):
            row[k] = exported.get(k)
        if exported.get("largest_free_block_bytes"):
            row["gatekeeper_ratio"] = round(exported["free_bytes"] / exported["largest_free_block_bytes"], 6)
        row["fresh_fragmentation_ratio"] = own["fresh"].get("fragmentation_ratio")
        if self.gatekeeper is not None:
            row.update(gatekeeper_view(self.gatekeeper.metrics()))
        self.rows.append(row)
        c = compare(exported, own)
        c.update({"phase": phase, "step": step})
        self.compares.append(c)
        return own | {"exported": exported}

    def _exported_after(self, paused: float) -> dict[str, Any]:
        """The exporter's block once its sampler has looked at the paused allocator.

        Either its snapshot is younger than the pause, or a sampler round
        (interval 0.5 s) has passed since and found nothing changed.
        """
        block: dict[str, Any] = {}
        for _ in range(30):
            doc = json.loads(http_get(self.exporter.url))
            block = (doc.get("memory_blocks") or [{}])[0]
            age = block.get("snapshot_age_seconds")
            since = time.monotonic() - paused
            if (age is not None and age <= since) or since >= 0.6:
                break
            time.sleep(0.05)
        return block

    # -- phases

    def phase_work(self, name: str, seconds: float, long_bias: float, every: int) -> None:
        end = time.monotonic() + min(seconds, max(0.0, self.left() - 5))
        for i in range(100000):
            if time.monotonic() >= end:
                break
            self.step(long_bias)
            if i % every == 0:
                self.moment(name, i)

    def phase_tight(self, seconds: float) -> None:
        torch = self.torch
        total = torch.cuda.mem_get_info(self.device)[1]
        reserved = torch.cuda.memory_reserved(self.device)
        fraction = min(0.95, (reserved + 3 * GIB) / total)
        torch.cuda.set_per_process_memory_fraction(fraction, self.device)
        self.summary["tight_fraction"] = round(fraction, 4)
        try:
            self.phase_work("tight", seconds, long_bias=0.5, every=3)
            self.probe()
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def probe(self) -> None:
        """Bisects the largest allocation that succeeds now; compares it with what was exported."""
        torch = self.torch
        torch.cuda.synchronize()
        before = self.moment("probe", 0)["exported"]
        predicted = before.get("largest_free_block_bytes") or 0
        lo, hi = 0, max(predicted * 2, 64 * MIB)
        tries = []
        for _ in range(16):
            if hi - lo <= 2 * MIB:
                break
            mid = (lo + hi) // 2 // (2 * MIB) * (2 * MIB)
            try:
                x = torch.empty(mid, dtype=torch.uint8, device="cuda")
                del x
                lo = mid
                tries.append([mid, True])
            except torch.cuda.OutOfMemoryError:
                hi = mid
                tries.append([mid, False])
        result = {"predicted_largest": predicted, "found_largest": lo, "tries": tries,
                  "relative_error": round((lo - predicted) / predicted, 4) if predicted else None,
                  "exported_before": before}
        self.summary["probe"] = {k: result[k] for k in ("predicted_largest", "found_largest", "relative_error")}
        with open(os.path.join(self.out, "probe.json"), "w") as f:
            json.dump(result, f, indent=1)

    def phase_capture(self, guarded: bool, seconds: float, name: str) -> None:
        """CUDA-graph captures (global mode, as vLLM's) while another thread reads like a request.

        guarded: the reader puts its thread in relaxed capture mode around
        mem_get_info (what the exporter does); unguarded: it does not.
        """
        from gatekeeper_exporter.reader import TorchReader

        torch = self.torch
        reader = TorchReader(devices=[self.device]) if guarded else \
            TorchReader(devices=[self.device], capture_exchange=lambda: None)
        stop = threading.Event()
        polls, errors = [0], []

        def poll() -> None:
            for _ in range(1_000_000):
                if stop.is_set():
                    return
                for r in reader.read():
                    polls[0] += 1
                    errors.extend(r.errors)

        poller = threading.Thread(target=poll, name="capture-poller", daemon=True)
        poller.start()
        w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
        ok, failed, messages, graph = 0, 0, [], None
        end = time.monotonic() + max(0.0, seconds)
        for _ in range(20):
            if time.monotonic() >= end:
                break
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                (x @ w).relu()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):  # capture_error_mode "global", the default
                    y = x
                    for _ in range(400):
                        y = (y @ w).relu()
                graph.replay()
                torch.cuda.synchronize()
                ok += 1
            except Exception as e:  # noqa: BLE001
                failed += 1
                messages.append(str(e)[:300])
                graph = None
        stop.set()
        poller.join(10)
        result = {"guarded": guarded, "captures_ok": ok, "captures_failed": failed, "polls": polls[0],
                  "poll_errors": errors[:5], "messages": messages[:3]}
        if graph is not None and guarded:
            self.record_fixture("graph-pool")  # a live graph: its private pool is in the snapshot
        del graph
        self.summary[name] = result

    def phase_cost(self) -> None:
        """memory_snapshot's cost against the segment count (small-pool segments of 2 MiB)."""
        torch = self.torch
        self.kept.clear()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        held, rows = [], []
        for target in (100, 1000, 3000, 10000):
            if self.left() < 15:
                break
            for _ in range(400):  # 100 tensors (about 50 small segments) a round
                if torch.cuda.memory_stats(self.device).get("segment.all.current", 0) >= target or self.left() < 10:
                    break
                held.extend(torch.empty(700 * 1024, dtype=torch.uint8, device="cuda") for _ in range(100))
            torch.cuda.synchronize()
            n = torch.cuda.memory_stats(self.device).get("segment.all.current", 0)
            timing = {"segments": n}
            for label, fn in (("snapshot_no_traces_ms", lambda: _snapshot(torch.cuda)),
                              ("snapshot_default_ms", torch.cuda.memory_snapshot),
                              ("memory_stats_ms", lambda: torch.cuda.memory_stats(self.device))):
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    res = fn()
                    times.append((time.perf_counter() - t0) * 1e3)
                timing[label] = round(sorted(times)[len(times) // 2], 3)
                del res
            segs = segments_of(_snapshot(torch.cuda))
            t0 = time.perf_counter()
            summarize(segs, self.device, 0.0)
            timing["walk_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            timing["blocks"] = sum(len(s.get("blocks", [])) for s in segs)
            rows.append(timing)
        del held
        torch.cuda.empty_cache()
        self.summary["snapshot_cost"] = rows
        with open(os.path.join(self.out, "snapshot_cost.json"), "w") as f:
            json.dump(rows, f, indent=1)

    def record_fixture(self, name: str) -> None:
        own = self.moment(name, -1)
        fx = fixture(self.torch, self.device, own, own["exported"], name)
        with open(os.path.join(self.out, "fixtures", f"{name}.json"), "w") as f:
            json.dump(fx, f)

    # -- driver

    def run(self) -> int:
        try:
            self.setup()
            if self.args.phase == "expandable":
                self.phase_work("expandable", min(25, self.left() - 25), long_bias=0.2, every=4)
                self.record_fixture("expandable")
                self.phase_tight(min(10, max(0, self.left() - 10)))
            else:
                if self.gatekeeper:
                    time.sleep(2)  # let gatekeeper read a few times
                    self.gatekeeper.state("start")
                # What each phase leaves for the later ones was sized for a 260 s budget; a shorter
                # one (check.sh runs the oom phase first) shrinks them alike.
                k = min(1.0, self.args.budget_s / 260)
                self.record_fixture("idle")
                self.phase_work("mixed", min(60, self.left() - 150 * k), long_bias=0.1, every=4)
                self.record_fixture("mixed")
                if self.gatekeeper:
                    self.gatekeeper.state("mixed")
                self.phase_tight(min(60, self.left() - 90 * k))
                self.record_fixture("tight")
                if self.gatekeeper:
                    self.gatekeeper.state("tight")
                self.kept.clear()
                self.phase_capture(True, min(20, self.left() - 60 * k), "capture_guarded")
                self.phase_cost()
                if self.left() > 25 * k:  # last: a failed capture must not spoil the rest
                    self.phase_capture(False, min(15, self.left() - 8), "capture_unguarded")
        finally:
            self.write()
            if self.gatekeeper:
                self.gatekeeper.stop()
            if self.exporter:
                self.exporter.stop()
        return 0

    def write(self) -> None:
        prefix = "" if self.args.phase == "main" else f"{self.args.phase}-"
        with open(os.path.join(self.out, f"{prefix}timeline.json"), "w") as f:
            json.dump(self.rows, f, indent=1)
        keys = sorted({k for r in self.rows for k in r})
        with open(os.path.join(self.out, f"{prefix}timeline.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(self.rows)
        with open(os.path.join(self.out, f"{prefix}compare.json"), "w") as f:
            json.dump(self.compares, f, indent=1)
        worst: dict[str, float] = {}
        for c in self.compares:
            for k, v in c.items():
                if k.startswith("diff_") and isinstance(v, (int, float)):
                    worst[k] = max(worst.get(k, 0), abs(v))
        self.summary["compare_worst_abs"] = worst
        ratios = [r["gatekeeper_ratio"] for r in self.rows if r.get("gatekeeper_ratio")]
        if ratios:
            self.summary["gatekeeper_ratio"] = {"min": min(ratios), "max": max(ratios), "last": ratios[-1]}
        self.summary["moments"] = len(self.rows)
        self.summary["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        with open(os.path.join(self.out, f"{prefix}summary.json"), "w") as f:
            json.dump(self.summary, f, indent=1)


# ---------------------------------------------------------------- self-check on the CPU


def self_check(gatekeeper: str | None) -> int:
    """Runs the CPU-testable parts against exporters/pytorch/tests' fake torch."""
    sys.path.insert(0, os.path.join(REPO, "exporters", "pytorch"))
    import types

    from tests import scenario
    from tests.fake_torch import Installed
    from tests.test_recorded import check_fixture
    import unittest

    cuda = scenario.cuda()
    with Installed(cuda):
        torch = types.SimpleNamespace(cuda=cuda, __version__="fake")
        own = torch_own(torch, 1)
        exporter = gatekeeper_exporter.start(port=0, devices=[1], interval=3600)
        try:
            assert exporter.sampler.wait_first(10), "no snapshot"
            exported = json.loads(http_get(exporter.url))["memory_blocks"][0]
        finally:
            exporter.stop()
    c = compare(exported, own)
    bad = {k: v for k, v in c.items() if k.startswith("diff_") and v not in (0, 0.0)}
    assert not bad, f"exporter and torch's own figures differ on the fake: {bad}"
    fx = json.loads(json.dumps(fixture(torch, 1, own, exported, "self-check")))
    tc = unittest.TestCase()
    block = check_fixture(tc, fx)
    assert block["largest_free_block_bytes"] == exported["largest_free_block_bytes"]
    segs, trimmed = trim_snapshot(own["segments"], 1, cap=3)
    assert trimmed and len(segs) == 3 and all("frames" not in s for s in segs)
    sample = ('# HELP x\nvllm_gpu_memory_fragmentation{gpu_id="0"} 0.5\n'
              'gatekeeper_pressure_signal{upstream="u",gpu_id="0",signal="fragmentation"} 2\n'
              'gatekeeper_pressure_signal{upstream="u",gpu_id="",signal="kv_cache_usage"} 0.3\n'
              'gatekeeper_pressure_signal_per_second{upstream="u",gpu_id="0",signal="alloc_retry_rate"} 0.25\n'
              'gatekeeper_pressure_signal_bytes{upstream="u",gpu_id="0",signal="free_memory_bytes"} 1024\n'
              'gatekeeper_pressure_signal_age_seconds{upstream="u",gpu_id="0",signal="fragmentation"} 9\n'
              'gatekeeper_source_up{source="memory_blocks:x"} 1\n')
    view = gatekeeper_view(sample)
    assert view == {"gk_classic_ratio_gpu0": 0.5, "gk_fragmentation_gpu0": 2.0, "gk_alloc_retry_rate_gpu0": 0.25,
                    "gk_free_memory_bytes_gpu0": 1024.0, "gk_source_up": 1.0}, view
    cfg = gatekeeper_config("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4/memory_blocks")
    if gatekeeper:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(cfg)
        try:
            chk = subprocess.run([gatekeeper, "-config", f.name, "-check"], capture_output=True, text=True, timeout=30)
        finally:
            os.unlink(f.name)
        assert chk.returncode == 0, f"gatekeeper -check refused the policy: {chk.stdout}{chk.stderr}"
    srv, url = start_upstream()
    try:
        assert http_get(url + "/health") == b"ok\n" and http_get(url + "/metrics") == b""
    finally:
        srv.shutdown()
        srv.server_close()
    print("serve_like self-check: ok" + (" (policy checked by gatekeeper -check)" if gatekeeper else ""))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "./gpu-out"))
    p.add_argument("--gatekeeper", default="", help="gatekeeper binary (main phase)")
    p.add_argument("--phase", choices=("main", "expandable"), default="main")
    p.add_argument("--budget-s", type=float, default=240.0, help="wall-clock budget of the run")
    p.add_argument("--self-check", action="store_true", help="check the CPU parts against the fake torch")
    args = p.parse_args()
    if args.self_check:
        return self_check(args.gatekeeper or None)
    os.makedirs(args.out, exist_ok=True)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # so the run's finally writes what it has

    signal.signal(signal.SIGTERM, on_term)
    return Run(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
