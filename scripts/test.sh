#!/usr/bin/env bash
# Second command: set up and run the tests (unit, end-to-end on the real model and stores), then ruff.
# Usage: test.sh [--fast] [pytest arguments]. --fast: the default install and the test tools only (no extra,
# no server, no compiler), the fast tier (no servers, no end-to-end sweeps) and ruff; a test that needs an
# extra is skipped naming it. Without it, every extra and server, every tier but the soak (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
workers=${RAG_TEST_WORKERS:-$((cores < 4 ? cores : 4))}
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 DAGSTER_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true
if [ "${1:-}" = "--fast" ]; then
  shift
  bash scripts/bootstrap.sh --dev
  .venv/bin/ruff check .
  exec .venv/bin/python -m pytest -n "$workers" --dist loadfile -m "not slow and not stack" "$@"
fi
bash scripts/bootstrap.sh --test
# every extra is installed: a test that needs one fails where it is missing, rather than skipping
export RAG_TEST_EVERY_EXTRA=1
# Server binaries for the real-server tests (PostgreSQL from Debian, Weaviate built from Go, both cached).
eval "$(bash scripts/ensure_servers.sh)"
.venv/bin/ruff check .
# The docs site, built strictly into a temp dir (seconds): a broken link or anchor, a page missing from the
# nav or a nav entry without its page fails the command (mkdocs.yml).
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site" || { rm -rf "$site"; exit 1; }
rm -rf "$site"
# The lowest Dagster pyproject.toml supports (constraints/dagster-lowest.txt): a second environment from the
# same uv cache, and the tests of Dagster's API on it (the private names, the definitions, `dg check defs`, a
# toy sweep through the CLI); the whole suite runs on uv.lock's Dagster below.
bash scripts/lowest_dagster.sh
.venv-lowest/bin/python -m pytest -q tests/test_supported_dagster.py tests/test_dagster_private.py \
  tests/test_definitions.py::test_definitions_load "tests/test_definitions.py::test_dg_cli_on_the_project[command0]"
# One pytest worker per core (pytest-xdist), a test file to a worker: module fixtures stay shared, and each
# worker starts its own servers on free ports. Much of a stack test is waiting (daemon ticks, run workers,
# server start-up), so two workers on two cores overlap one's waiting with the other's work.
# At most 4 (each holds its own servers and model); RAG_TEST_WORKERS=0 runs in one process.
# The soak tier (the whole stack end to end, a quarter of an hour alone) only with RAG_TEST_SOAK=1; a -m
# given to this script replaces the filter.
soak=(-m "not soak")
[ "${RAG_TEST_SOAK:-0}" = 1 ] && soak=()
.venv/bin/python -m pytest -n "$workers" --dist loadfile \
  --no-loadscope-reorder "${soak[@]}" "$@"
