#!/usr/bin/env bash
# Installs vLLM's serving stack from Debian for interop/'s uvicorn pod
# (interop/vllm_app.py): FastAPI under uvicorn with both of its HTTP/1.1
# implementations (httptools, which vLLM installs, and h11), and
# prometheus_client for /metrics. Nothing from PyPI. Run as root.
set -euo pipefail
check='import fastapi, uvicorn, httptools, h11, prometheus_client'
if /usr/bin/python3 -c "$check" >/dev/null 2>&1; then
	echo "uvicorn pod: $(/usr/bin/python3 -c 'import uvicorn, fastapi; print("uvicorn", uvicorn.__version__, "fastapi", fastapi.__version__)')"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3-fastapi python3-uvicorn python3-httptools python3-h11 \
	python3-prometheus-client
/usr/bin/python3 -c "$check"
