#!/usr/bin/env bash
# Installs Debian's nginx for interop/'s test of gatekeeper behind nginx
# (an ingress in front of it) when it is missing. Its packaged service is not
# used: the test runs nginx on its own configuration. Run as root.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
	echo "nginx: $( (nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1) | head -1)"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends nginx
/usr/sbin/nginx -v
