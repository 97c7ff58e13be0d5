#!/usr/bin/env bash
# Installs Debian's prometheus package (the server and promtool) for deploy's
# tests, unless both are there already. The tests start their own server on
# a loopback port with their own storage; a packaged service, where the
# machine starts one, is not used.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
	exit 0
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
promtool --version 2>&1 | sed -n 1p
