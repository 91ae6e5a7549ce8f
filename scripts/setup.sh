#!/usr/bin/env bash
# Create .venv and install rivumi-analysis with its extras (idempotent).
#   scripts/setup.sh            library + CLI + notebooks
#   scripts/setup.sh dev        also everything the test suite needs (incl. headless Chromium
#                               and the ray extra, ~20 s more on a cold pip cache)
#   scripts/setup.sh --check [dev]   exit 0 when .venv is current for that mode (installed by
#                               this script since pyproject.toml and this script last changed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp() {  # what the venv was installed from: the mode and the hash of the install inputs
  echo "${1:-lib} $(cat pyproject.toml scripts/setup.sh scripts/install_browser.sh | sha256sum | cut -d' ' -f1)"
}
if [ "${1:-}" = "--check" ]; then
  [ -x .venv/bin/python ] && [ -f .venv/.rivumi-setup ] && [ "$(cat .venv/.rivumi-setup)" = "$(stamp "${2:-}")" ]
  exit
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
rm -f .venv/.rivumi-setup
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev,notebooks,ray,otel,otel-test]'
  bash scripts/install_browser.sh
  # a Jupyter kernel that runs this venv's interpreter, for the notebook tests
  .venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
else
  .venv/bin/python -m pip install --quiet -e '.[notebooks]'
fi
stamp "${1:-}" > .venv/.rivumi-setup
echo "rivumi-analysis $(.venv/bin/rivumi-analysis --version | cut -d' ' -f2) installed in .venv" >&2
