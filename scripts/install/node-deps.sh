#!/usr/bin/env bash
# Installs the OpenAI Node SDK pinned in interop/package-lock.json for the
# interop test (interop/interop_test.go). Needs node >= 20 and npm; installs
# Debian's nodejs and npm when they are missing (run as root then).
set -euo pipefail
cd "$(dirname "$0")/../../interop"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends nodejs npm
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "node-deps: node $(node --version) is too old; the interop test needs node >= 20" >&2
	exit 1
fi
npm ci --no-audit --no-fund
node -p '"openai " + require("./node_modules/openai/package.json").version'
