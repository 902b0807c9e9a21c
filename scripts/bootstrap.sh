#!/usr/bin/env bash
# Create ./.venv with the locked dependencies (uv; installed from PyPI if missing). Usage: bootstrap.sh [--test]
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
echo "[bootstrap] uv sync ${extra[*]:-} (cached in ${UV_CACHE_DIR:-~/.cache/uv})" >&2
"${uv[@]}" sync --quiet --frozen --python 3.11 "${extra[@]}" >&2
