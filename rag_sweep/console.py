"""The `rag-sweep` command (the project's console entry point): the CLI, in this process."""

from rag_sweep.cli import console as main

__all__ = ["main"]
