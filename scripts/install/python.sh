#!/usr/bin/env bash
# Installs what the Python exporter's checks (scripts/test-python.sh) need
# when it is missing: Debian's python3 (≥ 3.10) with venv and ensurepip, so a
# fresh virtual environment comes with pip. Nothing else: the exporter builds
# with its own standard-library backend (no setuptools, no wheel). Run as root.
set -euo pipefail
ok='import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 10) else 1)'
if /usr/bin/python3 -c "$ok" >/dev/null 2>&1; then
	echo "python3: $(/usr/bin/python3 --version) with venv and ensurepip"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv
/usr/bin/python3 -c "$ok"
/usr/bin/python3 --version
