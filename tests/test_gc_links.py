"""`rag-sweep gc` never follows a link out of the data dir nor deletes what is not under it: a stage folder,
an artifact file, an embedding-cache folder and an embedded store's folder that are links are left, and
what they point at survives; an ordinary unneeded file beside them is still removed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import polars as pl

from tests.conftest import cli, write_sweep

OLD = time.time() - 90 * 86400


def _parquet(path: Path, df: pl.DataFrame) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(path)
    os.utime(path, (OLD, OLD))  # older than any --older-than
    return path


def _hex(n: int) -> str:
    return f"{n:02x}" * 32


def test_gc_leaves_links_and_what_they_point_at_and_deletes_only_under_the_data_dir(small_slice, tmp_path):
    from resources.vector_stores import VectorStores

    spec = write_sweep(
        tmp_path / "s.yaml",
        small_slice,
        name="linked",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2},
        generation={"model": "extractive"},
    )
    data, outside = tmp_path / "data", tmp_path / "outside"
    row = pl.DataFrame({"x": [1]})
    # a stage folder that is a link to a folder outside: its files are not gc's
    out_chunks = _parquet(outside / "chunks" / f"{_hex(1)}.parquet", row)
    data.mkdir()
    (data / "chunksets").symlink_to(outside / "chunks", target_is_directory=True)
    # an artifact file that is a link to a file outside
    out_file = _parquet(outside / "file.parquet", row)
    (data / "embeddings").mkdir()
    (data / "embeddings" / f"{_hex(2)}.parquet").symlink_to(out_file)
    # a stage folder that is a link to another folder of the data dir: not followed either
    inner = _parquet(data / "elsewhere" / f"{_hex(5)}.parquet", row)
    (data / "retrievals").symlink_to(data / "elsewhere", target_is_directory=True)
    # an embedding-cache folder that is a link to a folder outside, beside a real one
    cache_part = pl.DataFrame({"text_hash": ["not-a-kept-text"], "vector": [[0.0, 1.0]]})
    out_part = _parquet(outside / "cache" / "part-0.parquet", cache_part)
    (data / "embedding_cache").mkdir()
    (data / "embedding_cache" / "linked-model").symlink_to(outside / "cache", target_is_directory=True)
    real_part = _parquet(data / "embedding_cache" / "real-model" / "part-0.parquet", cache_part)
    # an embedded store's folder that is a link: the collection an unneeded index marker names is outside
    vectors = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)
    rows = [{"chunk_id": f"c{i}", "doc_id": f"d{i}", "text": t, "metadata": "{}"} for i, t in enumerate("ab")]
    VectorStores(data_dir=str(outside / "store")).get("lancedb").upsert("Rag_outside", rows, vectors)
    (data / "lancedb").symlink_to(outside / "store" / "lancedb", target_is_directory=True)
    marker = _parquet(
        data / "vector_index" / f"{_hex(3)}.parquet",
        pl.DataFrame({"store": ["lancedb"], "collection": ["Rag_outside"]}),
    )
    # an ordinary unneeded artifact: removed
    unneeded = _parquet(data / "answers" / f"{_hex(4)}.parquet", row)
    listing_before = sorted(str(p) for p in outside.rglob("*"))

    r = cli("gc", spec, "--data-dir", data, "--older-than", "0", "--apply")
    assert r.returncode == 0, r.stderr
    assert not unneeded.exists() and not real_part.exists()  # gc did its work
    assert out_chunks.exists() and out_file.exists() and out_part.exists() and inner.exists()
    assert sorted(str(p) for p in outside.rglob("*")) == listing_before  # nothing outside changed
    assert VectorStores(data_dir=str(outside / "store")).get("lancedb").info("Rag_outside")["exists"]
    for link in ("chunksets", "retrievals", f"embeddings/{_hex(2)}.parquet", "embedding_cache/linked-model"):
        assert (data / link).is_symlink(), link  # the links themselves are not removed either
    assert marker.exists()  # its collection was left, so its marker stays to find it again
    assert "left 4 link(s) and 1 collection(s) reached through one" in r.stdout, r.stdout
    assert f"{data / 'chunksets'} -> {outside / 'chunks'}" in r.stdout
    assert "lancedb collection Rag_outside" in r.stdout.split("left 4")[1]


def test_an_object_storage_path_is_inside_only_under_the_data_dirs_prefix():
    from upath import UPath

    from rag_assets.orchestration.contained import contained

    data = UPath("s3://bucket/data")
    assert contained(UPath("s3://bucket/data/answers/a.parquet"), data)
    assert not contained(UPath("s3://bucket/data2/answers/a.parquet"), data)  # a prefix, not a folder
    assert not contained(UPath("s3://bucket/other/a.parquet"), data)
    assert not contained(UPath("s3://bucket/data/../other/a.parquet"), data)


def test_a_marker_naming_a_collection_by_a_path_is_not_deleted_through_it(tmp_path):
    from rag_assets.orchestration.gc import _collection_contained

    (tmp_path / "lancedb").mkdir()
    assert _collection_contained("lancedb", "Rag_plain", tmp_path)
    for name in ("../outside", "a/b", ".."):
        assert not _collection_contained("lancedb", name, tmp_path), name
    alias = tmp_path / "lancedb" / "_aliases" / "Rag_x.json"
    alias.parent.mkdir()
    alias.write_text(json.dumps({"physical": "../../outside"}))
    assert not _collection_contained("lancedb", "Rag_x", tmp_path)
