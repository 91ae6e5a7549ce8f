#!/usr/bin/env bash
# Set everything up from scratch and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check rivumi_analysis tests benchmarks
.venv/bin/lint-imports --no-cache   # the package layout (pyproject [tool.importlinter])
.venv/bin/python -m pytest "$@"
