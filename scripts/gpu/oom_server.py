"""The vLLM-like server process: enough of the OpenAI API, /health, /metrics, the exporter in-process.

    vllm_like.py serve --out DIR [--dry-run ...]

Boots the engine (oom_engine.boot), starts gatekeeper_exporter on
127.0.0.1 (port 0), serves on 127.0.0.1 (port 0) and prints one JSON line
{"ready": true, "port": ..., "exporter_url": ..., "plan": ...} on stdout.
POST /v1/completions takes prompt (text, counted as ceil(UTF-8 bytes / 4)
tokens like gatekeeper's estimate, or a list of token ids), max_tokens
(default 16), n, top_p, logprobs, prompt_logprobs; every sequence generates
exactly max_tokens tokens (random weights, EOS ignored). When the engine
dies, requests in flight get 500, /health turns 503, DIR/death.json is
written and the process exits (status 3 for an out-of-memory, 4 otherwise)
two seconds later, as vLLM's server does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from oom_engine import Engine, EngineDead, Request, boot
from oom_plan import LLAMA3_8B, EngineSettings, ModelSpec, gpu_spec

MAX_BODY = 8 << 20
REQUEST_TIMEOUT_S = 120.0  # a handler waits at most this long for its request (the load's clients: 60 s)
EXIT_GRACE_S = 2.0  # between the engine's death and the process's exit
DEATH_FILE = "death.json"


class ParseError(ValueError):
    """A request body this server refuses with 400."""


def parse_completion(body: dict[str, Any], max_model_len: int) -> Request:
    """A completion body as the engine's Request; raises ParseError like vLLM's 400s."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        tokens = math.ceil(len(prompt.encode()) / 4)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        tokens = len(prompt)
    else:
        raise ParseError("prompt must be a string or a list of token ids")
    max_tokens = body.get("max_tokens", 16)
    n = body.get("n", 1)
    top_p = body.get("top_p", 1.0)
    for name, v in (("max_tokens", max_tokens), ("n", n)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ParseError(f"{name} must be an integer >= 1")
    if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ParseError("top_p must be in (0, 1]")
    if body.get("stream"):
        raise ParseError("stream is not supported by this stand-in")
    if tokens < 1:
        raise ParseError("prompt is empty")
    if tokens + max_tokens > max_model_len:
        raise ParseError(f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                         f"{tokens + max_tokens} tokens ({tokens} in the messages, {max_tokens} in the completion).")
    return Request(prompt=tokens, max_tokens=max_tokens, n=n, top_p=top_p < 1,
                   logprobs=body.get("logprobs") is not None, prompt_logprobs=body.get("prompt_logprobs") is not None)


def metrics_text(model: str, m: dict[str, Any]) -> str:
    """vLLM's names for the figures gatekeeper's vllm source reads."""
    lab = f'{{model_name="{model}"}}'
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{lab} {m['running']}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{lab} {m['waiting']}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{lab} {m['kv_usage']}\n"
            f"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{lab} {m['preemptions']}\n")


def completion_json(rid: int, model: str, req: Request) -> dict[str, Any]:
    choices = [{"index": i, "text": " x" * req.max_tokens, "logprobs": None, "finish_reason": "length"}
               for i in range(req.n)]
    out = req.max_tokens * req.n
    return {"id": f"cmpl-{rid}", "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": {"prompt_tokens": req.prompt, "completion_tokens": out,
                                          "total_tokens": req.prompt + out}}


class App:
    """What the handlers share: the engine, the model's name and limits, a request counter."""

    def __init__(self, engine: Engine, model: str, max_model_len: int) -> None:
        self.engine, self.model, self.max_model_len = engine, model, max_model_len
        self._lock = threading.Lock()
        self._next = 0

    def next_id(self) -> int:
        with self._lock:
            self._next += 1
            return self._next


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bursts open many connections at once
    app: App


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    timeout = 60

    def do_GET(self) -> None:  # noqa: N802
        app = self.server.app
        m = app.engine.metrics()
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(503 if m["dead"] else 200, "text/plain", b"" if not m["dead"] else b"engine dead\n")
        elif path == "/metrics":
            self._send(200, "text/plain; version=0.0.4", metrics_text(app.model, m).encode())
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": app.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self) -> None:  # noqa: N802
        app = self.server.app
        n = int(self.headers.get("Content-Length") or 0)
        if self.path.split("?", 1)[0] != "/v1/completions":
            self._json(404, {"error": {"message": "not found", "code": 404}})
            return
        if n > MAX_BODY:
            self._json(413, {"error": {"message": "body too large", "code": 413}})
            return
        try:
            req = parse_completion(json.loads(self.rfile.read(n) or b"{}"), app.max_model_len)
        except (ParseError, ValueError) as e:
            self._json(400, {"error": {"message": str(e), "type": "BadRequestError", "code": 400}})
            return
        try:
            app.engine.submit(req)
        except EngineDead as e:
            self._json(500, {"error": {"message": f"EngineDeadError: {e}", "type": "InternalServerError", "code": 500}})
            return
        if not req.done.wait(REQUEST_TIMEOUT_S):
            req.aborted = True
            self._json(504, {"error": {"message": "timed out in the engine", "code": 504}})
        elif req.error:
            self._json(500, {"error": {"message": f"EngineDeadError: {req.error}", "type": "InternalServerError",
                                       "code": 500}})
        else:
            self._json(200, completion_json(app.next_id(), app.model, req))

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        self._send(status, "application/json", json.dumps(doc).encode())

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client left

    def log_message(self, *args: Any) -> None:
        pass


def load_torch(args: argparse.Namespace) -> Any:
    """The real torch, or the fake GPU of the dry run (installed as sys.modules["torch"])."""
    if not args.dry_run:
        import torch

        return torch
    import fake_gpu

    mod = fake_gpu.build(int(args.fake_total), int(args.fake_context), args.fake_dir, name="fake H100 (dry run)")
    fake_gpu.install(mod)
    return mod


def nvidia_smi() -> dict[str, Any] | None:
    """GPU 0's memory.used/total from nvidia-smi (MiB), or None where there is none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=5).stdout
        used, total = (float(x) for x in out.strip().splitlines()[0].split(","))
        return {"used_mib": used, "total_mib": total, "used_frac": round(used / total, 6)}
    except Exception:  # noqa: BLE001
        return None


def serve_main(args: argparse.Namespace, model: ModelSpec = LLAMA3_8B) -> int:
    """The server process: boot, exporter, HTTP, engine loop on the main thread until death or the deadline."""
    deadline = time.monotonic() + args.max_s
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    torch = load_torch(args)
    settings = EngineSettings(gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs,
                              max_num_batched_tokens=args.max_num_batched_tokens)
    b = boot(torch, model, settings)
    name = str(torch.cuda.get_device_name(0))
    import gatekeeper_exporter

    exporter = gatekeeper_exporter.start(port=0, devices=[0], interval=0.5)
    died = threading.Event()
    code = [0]

    def on_death(info: dict[str, Any]) -> None:
        info["at_monotonic"] = time.monotonic()
        info["at_unix"] = time.time()
        try:
            info["exporter_at_death"] = (exporter.memory_blocks().get("memory_blocks") or [{}])[0]
        except Exception as e:  # noqa: BLE001
            info["exporter_at_death"] = {"error": str(e)}
        if not args.dry_run:
            info["nvidia_smi"] = nvidia_smi()
        with open(os.path.join(args.out, DEATH_FILE + ".tmp"), "w") as f:
            json.dump(info, f, indent=1)
        os.replace(os.path.join(args.out, DEATH_FILE + ".tmp"), os.path.join(args.out, DEATH_FILE))
        code[0] = 3 if info["kind"] == "oom" else 4
        died.set()

    engine = Engine(torch, model, settings, gpu_spec(name if not args.dry_run else "H100"), b.lm_head,
                    b.plan["kv_blocks"], on_death)
    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.app = App(engine, model.name, model.max_model_len)
    threading.Thread(target=httpd.serve_forever, name="vllm-like-http", daemon=True).start()
    ready = {"ready": True, "port": httpd.server_address[1], "exporter_url": exporter.url, "plan": b.plan,
             "device": name, "torch": str(torch.__version__), "cuda": getattr(torch.version, "cuda", None),
             "model": model.name, "settings": asdict(settings),
             "alloc_conf": {v: os.environ.get(v) for v in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}}
    print(json.dumps(ready), flush=True)
    engine.run(deadline)
    if died.is_set():
        time.sleep(EXIT_GRACE_S)  # handlers answer their 500s; /health answers 503
        sys.stdout.flush()
        os._exit(code[0])
    exporter.stop(2)
    httpd.shutdown()
    return 0
