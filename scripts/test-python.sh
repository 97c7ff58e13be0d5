#!/usr/bin/env bash
# The Python exporter's checks (exporters/pytorch), without torch or a GPU:
#   1. its unittest suite (a fake torch stands in; it includes the in-tree
#      build backend's tests), and the GPU script's CPU-testable parts
#      (scripts/gpu/serve_like.py --self-check) and syntax;
#   1b. the GPU run's oom phase on the CPU: scripts/gpu's unit tests and
#      `scripts/gpu/vllm_like.py --dry-run` (the whole orchestration against
#      a fake GPU, about 15 s), with a gatekeeper built here when go is on
#      PATH (without go that run is skipped, and says so);
#   2. the documented install, word for word, from the repository root:
#        pip install --no-index --no-build-isolation --no-deps ./exporters/pytorch
#      with the pip of a fresh virtual environment made without
#      --system-site-packages (pip and perhaps setuptools, no wheel), then
#      `import gatekeeper_exporter` there with a torch that refuses to be
#      imported and vLLM's entry point resolved; the source tree must be left
#      as it was. (tests/test_build.py checks the editable wheel.)
# scripts/test.sh calls it; PYTHON picks the interpreter (>= 3.10, with venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PKG=exporters/pytorch
PY="${PYTHON:-python3}"
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONPYCACHEPREFIX="$tmp/pycache"
poison="$PWD/$PKG/tests/poison" # a torch package whose import fails

echo "== python unittest ($("$PY" --version 2>&1))"
(cd "$PKG" && "$PY" -m unittest discover -s . -t . -p 'test_*.py')

echo "== gpu script: syntax and CPU self-check"
bash -n scripts/gpu/check.sh
"$PY" -m py_compile scripts/gpu/serve_like.py
"$PY" scripts/gpu/serve_like.py --self-check

echo "== gpu script: the oom phase's unit tests and dry run (a fake GPU, CPU only)"
for f in scripts/gpu/*.py; do "$PY" -m py_compile "$f"; done
gk=""
if command -v go >/dev/null 2>&1; then
	CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}" go build -o "$tmp/gatekeeper" ./cmd/gatekeeper
	gk="$tmp/gatekeeper"
else
	echo "go is not on PATH: the dry run skips the run through gatekeeper"
fi
GATEKEEPER_BIN="$gk" "$PY" -m unittest discover -s scripts/gpu -t scripts/gpu -p 'test_*.py'
timeout 120 "$PY" scripts/gpu/vllm_like.py --dry-run --out "$tmp/oom-dry" --gatekeeper "$gk"

echo "== the documented install, in a fresh venv without system site packages"
# Nothing from the machine's pip configuration: no index, no find-links, no --user.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^PIP_')
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
if ! "$PY" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1; then
	echo "'$PY -m venv' failed (Debian: apt-get install python3-venv, or scripts/install/python.sh):"
	sed 's/^/  /' "$tmp/venv.log"
	exit 1
fi
grep -qx 'include-system-site-packages = false' "$tmp/venv/pyvenv.cfg"
echo "venv $tmp/venv: $("$tmp/venv/bin/python" --version 2>&1), $("$tmp/venv/bin/pip" --version | cut -d' ' -f1-2)"

listing() { find "$PKG" -name __pycache__ -prune -o -print | LC_ALL=C sort; }
# install ARGS...: pip install ARGS with the venv's pip first on PATH, as after activating it,
# and no PYTHONPATH (it could lend the build what a fresh venv lacks, such as wheel).
install() { (unset PYTHONPATH && export PATH="$tmp/venv/bin:$PATH" && set -x && pip install "$@"); }
# verify DIR: gatekeeper_exporter imports from DIR without torch; the entry point is there.
verify() {
	(cd "$tmp" && PYTHONPATH="$poison" "$tmp/venv/bin/python" - "$1" <<'EOF'
import importlib.metadata as md
import os
import sys

import gatekeeper_exporter

where = os.path.realpath(sys.argv[1])
assert os.path.realpath(gatekeeper_exporter.__file__).startswith(where + os.sep), gatekeeper_exporter.__file__
assert "torch" not in sys.modules, "importing gatekeeper_exporter imported torch"
eps = [e for e in md.entry_points(group="vllm.general_plugins") if e.name == "gatekeeper_exporter"]
assert eps, "entry point vllm.general_plugins:gatekeeper_exporter not installed"
register = eps[0].load()
os.environ.pop("GATEKEEPER_EXPORTER_PORT", None)
register()  # no variable: does nothing, imports nothing
assert "vllm" not in sys.modules and "torch" not in sys.modules
print(f"ok: gatekeeper-torch-exporter {md.version('gatekeeper-torch-exporter')} from {where}, "
      f"imports without torch, entry point {eps[0].value}")
EOF
	)
}

listing >"$tmp/tree.before"
install --no-index --no-build-isolation --no-deps ./exporters/pytorch
verify "$tmp/venv"
listing >"$tmp/tree.after"
if ! diff -u "$tmp/tree.before" "$tmp/tree.after"; then
	echo "installing wrote into $PKG (above): the build backend must build elsewhere"
	exit 1
fi
echo "python checks: ok"
