"""Component types of the project (listed by `dg list components`)."""

from rag_sweep.lib.rag_sweep import RagSweep

__all__ = ["RagSweep"]
