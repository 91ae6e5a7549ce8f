#!/usr/bin/env bash
# The core install as a user gets it (issue 30.1): a fresh venv with the package and NO extras
# runs audit, report, store, export, replay and fork-seed on sample_runs/. Fails on an import
# error, a non-zero exit, a traceback or any warning (every Python warning is an error:
# PYTHONWARNINGS=error; a fallback such as StoreWarning prints "Warning" on stderr).
#   bash scripts/clean_install.sh            (CI runs it from .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# a copy of the tree, so the build leaves nothing in the checkout
git ls-files -z | tar --null -T - -cf - | (mkdir "$tmp/src" && tar -xf - -C "$tmp/src")
"$tmp/venv/bin/python" -m pip install --quiet "$tmp/src"
extras=$("$tmp/venv/bin/python" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("pandas", "numpy", "ray", "duckdb", "jupyterlab", "pytest")
               if importlib.util.find_spec(m)))
EOF
)
echo "clean install: $("$tmp/venv/bin/rivumi-analysis" --version); optional packages present: ${extras:-none}"

export PYTHONWARNINGS=error
export RIVUMI_ANALYSIS_STORE_DIR="$tmp/store" XDG_CACHE_HOME="$tmp/cache"
RA="$tmp/venv/bin/rivumi-analysis"
EXAMPLE=sample_runs/example/a66038f97f204cb3aaa96339f195c37e
failed=0
check() {  # check EXPECTED_EXIT ARGS...: run a command, judge exit code and stderr
  local want=$1; shift
  local code=0
  "$RA" "$@" >"$tmp/out" 2>"$tmp/err" || code=$?
  if [ "$code" != "$want" ] || grep -Eq "Traceback|Warning|ModuleNotFoundError|ImportError" "$tmp/err"; then
    echo "FAILED: rivumi-analysis $* (exit $code, expected $want)" >&2
    tail -n 30 "$tmp/err" >&2
    failed=1
  else
    echo "ok: rivumi-analysis $* (exit $code, $(wc -c <"$tmp/out") bytes out)"
  fi
}
check 0 audit sample_runs --format json
check 0 report sample_runs --out "$tmp/report.html"
check 0 store sample_runs
check 0 export sample_runs --out "$tmp/export"
check 0 replay "$EXAMPLE" --json
check 0 replay "$EXAMPLE"
check 0 fork-seed "$EXAMPLE" --sequence 49
if [ "$failed" != 0 ]; then
  echo "clean install: FAILED (see above)" >&2
  exit 1
fi
echo "clean install: every command ran with no extras, no import error and no warning"
