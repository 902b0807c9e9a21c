#!/usr/bin/env bash
# Create ./.venv with the locked dependencies (uv; installed from PyPI if missing).
# Usage: bootstrap.sh [--test | --dev]   (--test: every extra and the test tools; --dev: the test tools alone)
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v uv >/dev/null 2>&1; then
  uv=(uv)
else
  python3 -m uv --version >/dev/null 2>&1 || {
    echo "[bootstrap] installing uv from PyPI" >&2
    python3 -m pip install --quiet --disable-pip-version-check uv >&2
  }
  uv=(python3 -m uv)  # works wherever pip put the package, on PATH or not
fi
extra=()
[ "${1:-}" = "--test" ] && extra=(--extra test)
[ "${1:-}" = "--dev" ] && extra=(--extra dev)
echo "[bootstrap] uv sync ${extra[*]:-} (cached in ${UV_CACHE_DIR:-~/.cache/uv})" >&2
# --compile-bytecode: every later start imports dagster, mlflow, torch ... from .pyc; without it a shell with
# PYTHONDONTWRITEBYTECODE compiles ~6,000 modules on every start (~10 s; only the first sync pays, ~1 min)
# --inexact: installs and pins what uv.lock names, removes nothing; an extra added since (`uv sync --inexact
# --extra qdrant`, as a refusal says) survives both README commands, which an exact sync would uninstall
"${uv[@]}" sync --quiet --frozen --inexact --compile-bytecode --python 3.11 "${extra[@]}" >&2
