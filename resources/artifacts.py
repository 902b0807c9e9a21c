"""Where artifacts live: one data directory, Parquet files keyed by stage and content fingerprint.

Writes are atomic (temp file in the same directory, then rename), so a crashed run never leaves a file
that a later run would trust.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import dagster as dg
import polars as pl


def default_data_dir() -> str:
    return os.environ.get("RAG_DATA_DIR", str(Path.cwd() / ".rag_data"))


def atomic_write_parquet(df: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class ArtifactStore(dg.ConfigurableResource):
    """The data directory; every stage's artifacts sit under `<data_dir>/<stage>/<fingerprint>.parquet`."""

    data_dir: str

    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    def path(self, stage: str, fp: str) -> Path:
        return self.root / stage / f"{fp}.parquet"

    def exists(self, stage: str, fp: str) -> bool:
        return self.path(stage, fp).exists()

    def write(self, stage: str, fp: str, df: pl.DataFrame) -> Path:
        return atomic_write_parquet(df, self.path(stage, fp))

    def read(self, stage: str, fp: str, what: str) -> pl.DataFrame:
        path = self.path(stage, fp)
        if not path.exists():
            raise FileNotFoundError(f"{what} is not materialized yet ({path} missing): materialize it first")
        return pl.read_parquet(path)
