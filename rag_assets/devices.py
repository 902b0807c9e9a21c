"""Where a stage's local model ran: a side table of its artifact (device -> items it computed), read back
when the config's MLflow run is logged, so what MLflow says is what the artifact holds, after any rerun."""

from __future__ import annotations

import polars as pl

DEVICES_PART = "devices"


def devices_part(counts: dict[str, int]) -> dict[str, pl.DataFrame]:
    """The side table of an artifact whose items `counts` says where each was computed."""
    frame = pl.DataFrame(
        {"device": list(counts), "items": list(counts.values())},
        schema={"device": pl.String, "items": pl.Int64},
    )
    return {DEVICES_PART: frame}


def devices_of(ref) -> str | None:
    """ "cpu · onnx: 812; cuda:0 (NVIDIA H200) · torch float16 · batch 256: 40" of an artifact, None for one
    without the table (a stage that ran no local model, or written before it was recorded)."""
    try:
        devices = ref.read(DEVICES_PART)
    except Exception:  # no side table: where it ran was not recorded
        return None
    return "; ".join(f"{d}: {n}" for d, n in devices.sort("items", descending=True).iter_rows())
