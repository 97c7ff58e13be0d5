"""A pod on vLLM's own serving stack, for interop/uvicorn_test.go.

vLLM's OpenAI server is a FastAPI app under uvicorn, its /metrics
prometheus_client's ASGI app mounted on it. gatekeeper's pod transport
(internal/proxy/podconn) is an HTTP/1.1 client of its own, and its pressure
sources parse what prometheus_client writes, so this pod runs that same
stack (Debian's python3-fastapi, python3-uvicorn with h11 or httptools,
python3-prometheus-client) and shapes what it serves as vLLM does
(vllm/entrypoints/openai/api_server.py): the completion routes with
`with_cancellation` (a client that leaves cancels the handler), streams as
StreamingResponse (Starlette cancels the generator when the client leaves),
errors as vLLM's ErrorResponse, the /metrics mount without its redirect,
keep-alive as uvicorn's timeout_keep_alive.

The model is not a model: a completion is max_tokens words "w0 w1 ...", each
after x-test-token-delay-ms; x-test-fail-after N raises after N of them (the
engine dying mid-stream). What the pod saw is at GET /test/state, for the
test to compare with what gatekeeper did: the requests by X-Request-Id
(started, completed, aborted: the client went away before the end), the
client port each came on, the body bytes each carried, those that came
with an Expect header (uvicorn answers it with a 100), and the requests in
the engine now and at most (Flight). POST /test/reset starts the most over
from now; POST /test/kv?value=F sets vllm:kv_cache_usage_perc.

    python3 vllm_app.py --http h11|httptools --timeout-keep-alive S [--port N]

It prints {"port": N} once listening on 127.0.0.1 and stops when stdin
closes.
"""

import argparse
import asyncio
import json
import re
import socket
import sys
import threading

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CollectorRegistry, Gauge, make_asgi_app
from starlette.routing import Mount

MODEL = "test-model"
MAX_MODEL_LEN = 4096

app = FastAPI()
registry = CollectorRegistry()
labels = {"engine": "0", "model_name": MODEL}
running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                list(labels), registry=registry).labels(**labels)
waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                list(labels), registry=registry).labels(**labels)
kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                 list(labels), registry=registry).labels(**labels)
waiting.set(0)
kv_usage.set(0)

state = {"inflight": 0, "max_inflight": 0, "started": [], "completed": [], "aborted": [],
         "clients": {}, "body_bytes": {}, "expected": []}

# vLLM mounts prometheus_client's app and widens the mount's pattern so that
# /metrics answers without Starlette's 307 to /metrics/.
metrics_route = Mount("/metrics", make_asgi_app(registry=registry))
metrics_route.path_regex = re.compile("^/metrics(?P<path>.*)$")
app.routes.append(metrics_route)


def dumps(v):
    return json.dumps(v, separators=(",", ":"))  # pydantic's model_dump_json, as vLLM writes


def error(status, kind, message):
    """vLLM's ErrorResponse."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status)


async def listen_for_disconnect(request):
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def with_cancellation(handler):
    """vLLM's decorator: the handler is cancelled when the client leaves.
    The body is read first, as FastAPI does for vLLM's typed handlers, so
    that listen_for_disconnect's receive cannot take it."""
    async def wrapper(request: Request):  # FastAPI reads this signature, not the handler's
        flight = Flight(request)
        try:
            raw = await request.body()
        except BaseException:
            flight.end(False)
            raise
        task = asyncio.create_task(handler(request, flight, raw))
        gone = asyncio.create_task(listen_for_disconnect(request))
        done, pending = await asyncio.wait([task, gone], return_when=asyncio.FIRST_COMPLETED)
        for p in pending:
            p.cancel()
        if task in done:
            return task.result()
        return None
    return wrapper


class Flight:
    """One request in the engine: from its handler's start (before the body
    is read; vLLM's engine has it no sooner) until its generation ends
    (completed: after its last event is out, before the stream's end;
    aborted: its client left or the engine died; vLLM's engine lets it go
    no later). The in-flight count never reads lower than what an engine
    would be running."""

    def __init__(self, request):
        self.id = request.headers.get("x-request-id", "")
        state["started"].append(self.id)
        state["clients"][self.id] = request.scope.get("peer", ("", 0))[1]
        if "expect" in request.headers:
            state["expected"].append(self.id)
        state["inflight"] += 1
        state["max_inflight"] = max(state["max_inflight"], state["inflight"])
        running.set(state["inflight"])
        self.open = True

    def end(self, completed):
        if not self.open:
            return
        self.open = False
        state["completed" if completed else "aborted"].append(self.id)
        state["inflight"] -= 1
        running.set(state["inflight"])


async def generate(request, flight, raw, chat):
    handed = False

    def answer(response):
        flight.end(True)
        return response

    try:
        state["body_bytes"][flight.id] = len(raw)
        try:
            body = json.loads(raw)
        except ValueError as e:
            return answer(error(400, "BadRequestError", "Failed to parse the request body: %s" % e))
        if body.get("model", MODEL) != MODEL:
            return answer(error(404, "NotFoundError", "The model `%s` does not exist." % body.get("model")))
        max_tokens = int(body.get("max_tokens") or 16)
        prompt = json.dumps(body.get("messages")) if chat else str(body.get("prompt", ""))
        prompt_tokens = len(prompt) // 4 + 1
        if prompt_tokens + max_tokens > MAX_MODEL_LEN:
            return answer(error(400, "BadRequestError",
                         "This model's maximum context length is %d tokens. However, you requested %d tokens."
                         % (MAX_MODEL_LEN, prompt_tokens + max_tokens)))
        delay = int(request.headers.get("x-test-token-delay-ms", "0")) / 1000
        fail_after = int(request.headers.get("x-test-fail-after", "-1"))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        kind = "chat.completion" if chat else "text_completion"
        rid = ("chatcmpl-" if chat else "cmpl-") + flight.id

        async def words():
            for i in range(max_tokens):
                if i == fail_after:
                    raise RuntimeError("engine dead")
                if delay:
                    await asyncio.sleep(delay)
                yield "w%d " % i

        if not body.get("stream"):
            text = "".join([w async for w in words()])
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "finish_reason": "length"})
            return answer(JSONResponse({"id": rid, "object": kind, "model": MODEL, "choices": [choice],
                                        "usage": usage}))

        include_usage = (body.get("stream_options") or {}).get("include_usage", False)

        async def events():
            try:
                async for w in words():
                    delta = {"index": 0, "delta": {"content": w}} if chat else {"index": 0, "text": w}
                    yield "data: %s\n\n" % dumps({"id": rid, "object": kind + ".chunk" if chat else kind,
                                                       "model": MODEL, "choices": [delta]})
                if include_usage:
                    yield "data: %s\n\n" % dumps({"id": rid, "object": kind, "model": MODEL,
                                                       "choices": [], "usage": usage})
                yield "data: [DONE]\n\n"
                flight.end(True)
            finally:
                flight.end(False)  # no-op after a completed stream

        handed = True
        return StreamingResponse(events(), media_type="text/event-stream")
    finally:
        if not handed:
            flight.end(False)  # no-op after a completed answer


@app.post("/v1/completions")
@with_cancellation
async def completions(request, flight, raw):
    return await generate(request, flight, raw, chat=False)


@app.post("/v1/chat/completions")
@with_cancellation
async def chat_completions(request, flight, raw):
    return await generate(request, flight, raw, chat=True)


@app.get("/v1/models")
async def models():
    return {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm",
                                        "max_model_len": MAX_MODEL_LEN}]}


@app.get("/health")
async def health():
    return JSONResponse(None)


@app.get("/test/state")
async def get_state():
    return state


@app.post("/test/reset")
async def reset():
    state["max_inflight"] = state["inflight"]
    return state


@app.post("/test/kv")
async def set_kv(value: float):
    kv_usage.set(value)
    return {"kv_cache_usage_perc": value}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="h11", choices=["h11", "httptools"])
    ap.add_argument("--timeout-keep-alive", type=int, default=5)  # vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE
    ap.add_argument("--port", type=int, default=0)  # 0: any free port (the test's); 8000 is vLLM's
    args = ap.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    config = uvicorn.Config(app, http=args.http, timeout_keep_alive=args.timeout_keep_alive,
                            log_level="warning", lifespan="off")
    config.load()
    # uvicorn's proxy_headers (on, as in vLLM) rewrites the scope's client
    # from gatekeeper's X-Forwarded-For; keep the connection's own peer.
    inner = config.loaded_app

    async def keep_peer(scope, receive, send):
        scope["peer"] = scope.get("client") or ("", 0)
        await inner(scope, receive, send)

    config.loaded_app = keep_peer
    server = uvicorn.Server(config)

    def stop_on_eof():
        sys.stdin.read()
        server.should_exit = True

    threading.Thread(target=stop_on_eof, daemon=True).start()
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
