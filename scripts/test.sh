#!/usr/bin/env bash
# Second command: set up and run the tests (unit, end-to-end on the real model and stores), then ruff.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test
# Server binaries for the real-server tests (PostgreSQL from Debian, Weaviate built from Go, both cached).
eval "$(bash scripts/ensure_servers.sh)"
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 DAGSTER_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
