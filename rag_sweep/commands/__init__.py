"""One module per `rag-sweep` command that has grown past a few lines: its arguments and what it runs."""
