"""httpx_client.py drives gatekeeper with httpx, the HTTP client under the
OpenAI Python SDK (Debian's python3-httpx, with python3-h2 for HTTP/2). It
is run by httpx_test.go:

    python3 httpx_client.py BASE_URL http1|http2 SCENARIO

http2 speaks HTTP/2 with prior knowledge (h2c), as httpx does with
http1=False. It prints one JSON object on stdout with what it saw.
Scenarios:
  relay   a completion, a chat stream read line by line
  large   a body over gatekeeper's max_body_bytes (12 MiB), sent whole
          before the answer is read, as the SDK sends one
  leave   a stream closed after its first event (X-Request-Id: the third
          argument's id), then one more completion on the same client
"""

import json
import sys

import httpx


def main():
    base, version, scenario = sys.argv[1:4]
    kw = {"http1": version == "http1", "http2": version == "http2"}
    with httpx.Client(base_url=base, timeout=30, **kw) as client:
        out = {"relay": relay, "large": large, "leave": leave}[scenario](client, *sys.argv[4:])
    json.dump(out, sys.stdout)


def answer(r):
    return {"status": r.status_code, "version": r.http_version, "id": r.headers.get("x-request-id", ""),
            "reason": r.headers.get("x-gatekeeper-reason", "")}


def relay(client):
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "Once upon a time", "max_tokens": 8})
    out = {"completion": dict(answer(r), text=r.json()["choices"][0]["text"])}
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as s:
        # httpx 0.23's iter_lines yields the blank line between events as "\n"
        out["stream"] = dict(answer(s), events=[line.strip() for line in s.iter_lines() if line.strip()])
    return out


def large(client):
    body = b'{"model":"test-model","prompt":"' + b"a" * (12 << 20) + b'"}'
    try:
        r = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    except httpx.HTTPError as e:  # what the SDK would retry, body and all
        return {"error": type(e).__name__ + ": " + str(e)}
    out = dict(answer(r), code=r.json()["error"]["code"])
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "x", "max_tokens": 2})
    out["after"] = answer(r)
    return out


def leave(client, request_id):
    body = {"model": "test-model", "prompt": "leave", "max_tokens": 1000, "stream": True}
    headers = {"x-request-id": request_id, "x-test-token-delay-ms": "20"}
    with client.stream("POST", "/v1/completions", json=body, headers=headers) as s:
        first = next(line for line in s.iter_lines() if line.strip())
    # leaving the block closed the stream after one event
    r = client.post("/v1/completions", json={"model": "test-model", "prompt": "x", "max_tokens": 2})
    return {"first": first, "after": answer(r)}


if __name__ == "__main__":
    main()
