#!/usr/bin/env bash
# Installs Debian's redis-server for the cluster/ tests (a real Redis on a
# loopback port, started and stopped by each test) when it is missing. Run as
# root.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
	echo "redis-server: $(redis-server --version 2>/dev/null || echo present)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends redis-server
redis-server --version
