#!/usr/bin/env bash
# First command: set up and run the example sweep end to end on embedded defaults (no servers, no LLM key).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 DAGSTER_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true
exec .venv/bin/rag-sweep run examples/sweeps/example.yaml --output .rag_data/leaderboard.csv "$@"
