#!/usr/bin/env bash
# Installs Debian's chromium for the status page test (cmd/gatekeeper,
# TestStatusPageInChromium) when it is missing. Run as root.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	echo "chromium: $(chromium --version 2>/dev/null || echo present)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-dejavu-core
chromium --version
