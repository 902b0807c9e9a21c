"""The product: the Dagster deployment of every sweep (`definitions.py`, one `RagSweep` component per folder of
`defs/`) and the `rag-sweep` CLI."""
