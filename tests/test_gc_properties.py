"""A property of `rag-sweep gc --apply`: whatever sweeps ran on a data dir (two files over the same data,
under one name or two), however they changed since, whatever the files' ages and --older-than, and whichever
of the files gc is given (it refuses, deleting nothing, unless given every one), every sweep's rerun computes
nothing afterwards, every registered champion loads and answers, and a folder outside the data dir linked
into it keeps its files.

Few examples, each a fresh data dir: a sweep run is seconds of Dagster runs even with the hashed bag of
words as the embedding model (no model to load) and the extractive reader."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import write_sweep
from tests.test_plugins import embedder_site, plugin_path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

CHUNKINGS = [
    {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
]
RETRIEVALS = [{"mode": "vector", "top_k": 2}, {"mode": "bm25", "top_k": 2}, {"mode": "vector", "top_k": 3}]

sweep_configs = st.fixed_dictionaries(
    {
        "chunking": st.sampled_from(CHUNKINGS),
        "retrieval": st.lists(st.sampled_from(RETRIEVALS), min_size=1, max_size=2, unique_by=str),
    }
)
# a gc: the age in days every file has by then, --older-than, and which sweep files it is given
gcs = st.tuples(
    st.sampled_from([0, 2, 45]),
    st.sampled_from(["0", "1d", "30d"]),
    st.sampled_from([(0, 1), (0,), (1,)]),
)


@pytest.fixture(scope="module")
def hashed_words_site(tmp_path_factory) -> Path:
    return embedder_site(tmp_path_factory.mktemp("plugin"))


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    configs=st.lists(sweep_configs, min_size=2, max_size=2),
    one_name=st.booleans(),
    changes=st.lists(st.tuples(st.integers(0, 1), sweep_configs, st.none() | gcs), max_size=1),
    final=gcs,
)
def test_after_gc_every_sweep_reruns_with_nothing_to_compute_and_its_champion_answers(
    plugin_path,  # noqa: F811
    hashed_words_site,
    small_slice,
    monkeypatch,
    configs,
    one_name,
    changes,
    final,
):
    """`changes`: (which sweep, its new configs, a gc after it or none); `final`: the last gc, given every
    file (after gcs that may have been refused)."""
    from rag_sweep.cli import main
    from rag_sweep.runner import bill, run_sweep
    from resources.shipping.registry import load_champion

    if str(hashed_words_site) not in sys.path:  # once for every example
        plugin_path(hashed_words_site)
    with tempfile.TemporaryDirectory(prefix="gc-property-") as folder:
        root = Path(folder)
        data = root / "data"
        names = ["shared", "shared"] if one_name else ["first", "second"]
        files = [root / f"sweep{i}.yaml" for i in range(2)]

        def run(i: int, config: dict):
            write_sweep(files[i], small_slice, name=names[i], **_sections(config))
            return run_sweep(str(files[i]), str(data), progress=False)

        # a stage folder no sweep here uses, linked to a folder outside holding an artifact-named file: planted
        # for each gc only, as a run refuses any link in its data dir
        outside = root / "outside" / f"{'ab' * 32}.parquet"
        outside.parent.mkdir(parents=True)
        pl.DataFrame({"x": [1]}).write_parquet(outside)
        os.utime(outside, (time.time() - 90 * 86400,) * 2)  # old enough for any --older-than drawn
        link = data / "prompt_optimizations"

        def gc(age_days: int, older: str, given: tuple[int, ...]) -> None:
            link.symlink_to(outside.parent, target_is_directory=True)
            then = time.time() - age_days * 86400
            for path in data.rglob("*.parquet"):  # every artifact and cache part written that long ago
                os.utime(path, (then, then), follow_symlinks=False)
            before = sorted(data.rglob("*.parquet"))
            code = main(
                [
                    "gc",
                    *(str(files[i]) for i in given),
                    "--data-dir",
                    str(data),
                    "--older-than",
                    older,
                    "--apply",
                ]
            )
            assert code == (0 if len(given) == len(files) else 2), given
            assert code == 0 or sorted(data.rglob("*.parquet")) == before  # a refusal deletes nothing
            assert outside.exists() and link.is_symlink()
            link.unlink()

        runs = [run(i, c) for i, c in enumerate(configs)]
        for i, config, gc_after in changes:
            runs[i] = run(i, config)
            if gc_after is not None:
                gc(*gc_after)
        gc(*final[:2], (0, 1))

        for path in files:
            _, left = bill(str(path), str(data))
            assert all(new == 0 for _, new in left.partitions.values()), (path, left.partitions)
            assert left.texts_to_embed == 0, path
        with monkeypatch.context() as env:  # this example's registry only: the next has its own
            env.setenv("MLFLOW_TRACKING_URI", runs[0].defs.resources["tracking"].resolved_uri())
            models = {n: load_champion(f"models:/{n}@champion", root / f"champion-{n}") for n in set(names)}
        for name, model in sorted(models.items()):
            answers = model.predict(pd.DataFrame({"question": ["Who directed Ed Wood?"]}))
            assert len(answers) == 1 and answers["error"][0] is None, (name, answers.to_dict())
            assert len(answers["doc_ids"][0]) > 0, name  # it searched its index


def _sections(config: dict) -> dict:
    return {
        "chunking": config["chunking"],
        "embedding": {"model": "hashed_words"},
        "retrieval": config["retrieval"],
        "generation": {"model": "extractive"},
    }
