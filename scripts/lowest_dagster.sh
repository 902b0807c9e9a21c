#!/usr/bin/env bash
# Build ./.venv-lowest: the project on the lowest Dagster it supports (constraints/dagster-lowest.txt), every
# other package at its uv.lock version where Dagster allows it (a copy of the lock re-resolved with the
# Dagster pins: uv keeps each locked version it can), from the same uv cache as ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=(python3 -m uv)
command -v uv >/dev/null 2>&1 && uv=(uv)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp pyproject.toml uv.lock "$work/"
python3 - "$work/pyproject.toml" constraints/dagster-lowest.txt <<'PY'
import re
import sys
from pathlib import Path

project, pins = Path(sys.argv[1]), Path(sys.argv[2])
text = project.read_text()
for line in pins.read_text().splitlines():
    if line.strip() and not line.startswith("#"):
        name, version = line.split("==")
        # `"dagster>=1.12,<1.14"` -> `"dagster==1.12.0"` (a name followed by its version specifier only)
        text, n = re.subn(rf'"{re.escape(name)}[<>=!~][^"]*"', f'"{name}=={version}"', text)
        if n == 0:
            sys.exit(f"{pins}: {name} is not a requirement in pyproject.toml")
project.write_text(text)
PY
"${uv[@]}" lock --quiet --project "$work" --python 3.11
pytest_pin=$(grep -A1 '^name = "pytest"$' "$work/uv.lock" | sed -n 's/^version = "\(.*\)"/pytest==\1/p')
"${uv[@]}" export --quiet --project "$work" --frozen --no-hashes --no-emit-project >"$work/requirements.txt"
[ -x .venv-lowest/bin/python ] || "${uv[@]}" venv --quiet --python 3.11 .venv-lowest
"${uv[@]}" pip install --quiet --python .venv-lowest/bin/python -r "$work/requirements.txt" "$pytest_pin"
"${uv[@]}" pip install --quiet --python .venv-lowest/bin/python --no-deps -e .
