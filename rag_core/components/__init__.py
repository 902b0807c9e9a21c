"""The registries of the extension points whose components run in later layers (embedding models, vector
stores, retrieval modes, rerankers, answer generators): what planning validates and fingerprints without
importing them. Each built-in registers from where it runs, named here by module; a plug-in registers under
its point's entry-point group. Chunking methods, metrics and search strategies keep their registries in
their own packages, which come before planning."""
