"""The registries of the extension points whose components run in later layers (embedding models, vector
stores, retrieval modes, rerankers, answer generators): what planning validates and fingerprints without
importing them. A built-in reranker or reader registers from the module where it runs, which its registry
names and imports when first asked for; the built-in stores' and retrieval modes' facts are registered here
(a store's class is imported when it is opened). A plug-in registers under its point's entry-point group.
Chunking methods, metrics and search strategies keep their registries in their own packages, which come
before planning."""
