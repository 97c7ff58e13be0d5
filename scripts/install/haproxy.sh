#!/usr/bin/env bash
# Installs Debian's haproxy for interop/'s h2c test (HAProxy in front of
# gatekeeper, speaking HTTP/2 to it) when it is missing. Run as root.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
	echo "haproxy: $( (haproxy -v 2>/dev/null || /usr/sbin/haproxy -v) | head -1)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends haproxy
/usr/sbin/haproxy -v | head -1
