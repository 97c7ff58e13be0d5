#!/usr/bin/env bash
# The Python exporter's checks (exporters/pytorch), without torch or a GPU:
#   1. its unittest suite (a fake torch stands in), and the GPU script's
#      CPU-testable parts (scripts/gpu/serve_like.py --self-check) and syntax;
#   2. an offline install (pip --no-index --no-build-isolation --no-deps) into
#      a fresh virtual environment, then `import gatekeeper_exporter` there with
#      a torch that refuses to be imported, and vLLM's entry point resolved.
# scripts/test.sh calls it; PYTHON picks the interpreter for step 1.
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

echo "== offline install into a fresh environment"
# setuptools builds the wheel; below 70.1 it needs the separate wheel package.
can_build='import sys, importlib.util as u, setuptools as s
v = tuple(int(x) for x in s.__version__.split(".")[:2])
sys.exit(0 if sys.version_info >= (3, 10) and v >= (61, 0) and (v >= (70, 1) or u.find_spec("wheel")) else 1)'
builder=""
for candidate in "$PY" python3 /usr/bin/python3; do
	if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$can_build" 2>/dev/null; then
		builder=$(command -v "$candidate")
		break
	fi
done
if [ -z "$builder" ]; then
	echo "no python3 >= 3.10 with setuptools >= 61 and wheel (or setuptools >= 70.1) to build offline;"
	echo "on Debian: apt-get install python3-setuptools python3-wheel python3-venv"
	exit 1
fi
cp -r "$PKG" "$tmp/src" # setuptools writes build/ and *.egg-info next to the sources
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
pip_flags=(--no-deps --no-build-isolation --no-index --quiet)
# --system-site-packages: the environment sees the builder's setuptools and wheel.
if "$builder" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
	echo "builder: $builder ($("$builder" --version 2>&1)), venv $tmp/venv"
	"$tmp/venv/bin/python" -m pip install "${pip_flags[@]}" "$tmp/src"
	run=("$tmp/venv/bin/python")
	where="$tmp/venv"
else
	echo "NOTE: '$builder -m venv' is unavailable here (Debian: apt-get install python3-venv):"
	sed 's/^/  /' "$tmp/venv.log"
	echo "falling back to pip install --target"
	"$builder" -m pip install "${pip_flags[@]}" --target "$tmp/target" "$tmp/src"
	run=(env "PYTHONPATH=$tmp/target" "$builder")
	where="$tmp/target"
fi
(cd "$tmp" && PYTHONPATH="$poison${PYTHONPATH:+:$PYTHONPATH}" "${run[@]}" - "$where" <<'EOF'
import importlib.metadata as md
import os
import sys

import gatekeeper_exporter

where = os.path.realpath(sys.argv[1])
assert os.path.realpath(gatekeeper_exporter.__file__).startswith(where), gatekeeper_exporter.__file__
assert "torch" not in sys.modules, "importing gatekeeper_exporter imported torch"
eps = [e for e in md.entry_points(group="vllm.general_plugins") if e.name == "gatekeeper_exporter"]
assert eps, "entry point vllm.general_plugins:gatekeeper_exporter not installed"
register = eps[0].load()
os.environ.pop("GATEKEEPER_EXPORTER_PORT", None)
register()  # no variable: does nothing, imports nothing
assert "vllm" not in sys.modules and "torch" not in sys.modules
print(f"installed gatekeeper-torch-exporter {md.version('gatekeeper-torch-exporter')}: imports without torch, "
      f"entry point {eps[0].value}")
EOF
)
echo "python checks: ok"
