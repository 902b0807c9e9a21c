"""Prompt optimization: GEPA over a config's text components (adapter: GEPA's protocol over the stages; evolve: one run)."""
