#!/usr/bin/env bash
# Run the test suite.
#   bash scripts/test.sh           everything (what CI runs): lint, import layers, every test
#   bash scripts/test.sh --fast    the inner loop: no browser, Ray, notebooks, real kills,
#                                  corpus generation or large differentials (pytest markers,
#                                  pyproject [tool.pytest]); hypothesis "dev" profile
# Extra arguments go to pytest. The venv is (re)installed only when it is missing or
# pyproject.toml / scripts/setup.sh changed since (scripts/setup.sh stamps .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
if ! bash scripts/setup.sh --check dev; then
  bash scripts/setup.sh dev
fi
.venv/bin/ruff check rivumi_analysis tests benchmarks
.venv/bin/lint-imports --no-cache   # the package layout (pyproject [tool.importlinter])
if [ "$FAST" = 1 ]; then
  export HYPOTHESIS_PROFILE=dev
  exec .venv/bin/python -m pytest -p no:cacheprovider \
    -m "not (slow or browser or ray or notebook or crash or corpus or differential)" "$@"
fi
.venv/bin/python -m pytest "$@"
