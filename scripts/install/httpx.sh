#!/usr/bin/env bash
# Installs Debian's httpx (the HTTP client under the OpenAI Python SDK) and h2
# for interop/'s httpx test (interop/httpx_client.py) when they are missing.
# Nothing from PyPI. Run as root.
set -euo pipefail
check='import httpx, h2'
if /usr/bin/python3 -c "$check" >/dev/null 2>&1; then
	echo "httpx: $(/usr/bin/python3 -c 'import httpx, h2; print(httpx.__version__, "h2", h2.__version__)')"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3-httpx python3-h2
/usr/bin/python3 -c "$check"
