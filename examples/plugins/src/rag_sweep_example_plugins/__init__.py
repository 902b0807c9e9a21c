"""Example rag-sweep plug-ins: the `lines` chunking method and the `answer_in_context` metric."""
