"""The product: the Dagster deployment of every sweep (`definitions.py`, one `RagSweep` component per folder of
`defs/`) and the `rag-sweep` CLI."""

import os as _os

# the environment this process was started with, before any import added to it (polars, the runner and
# `resources.environment` set variables): what names a warm process (rag_sweep/warm_process.py)
STARTING_ENVIRONMENT = dict(_os.environ)
