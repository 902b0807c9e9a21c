"""Small helpers shared by the asset modules."""

from __future__ import annotations

import dagster as dg

FORCE_TAG = "rag/force"
# Downstream stages follow their inputs under the automation sensor (see sensors/).
EAGER = dg.AutomationCondition.eager()


def forced(context: dg.AssetExecutionContext) -> bool:
    """Recompute even when a matching artifact exists (set by the nightly schedule and `--force`)."""
    return context.run.tags.get(FORCE_TAG, "").lower() == "true"


def base_metadata(fp: str, path, reused: bool) -> dict:
    return {
        "fingerprint": dg.MetadataValue.text(fp),
        "path": dg.MetadataValue.path(str(path)),
        "reused": dg.MetadataValue.bool(reused),
    }
