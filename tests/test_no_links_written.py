"""Nothing the product writes in a data dir goes through a link a co-writer planted there (resources/no_links.py).

The class test takes every path a sweep's run wrote in one data dir, plants a link at the same path in a
fresh data dir (to a file outside, to a folder outside, dangling), runs every command that takes a data dir,
and asserts that nothing outside changed: not a byte, not a new file where a dangling link pointed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import cli, write_sweep


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (links not followed) with a hash of its bytes."""
    out = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            if path.is_file() and not path.is_symlink():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = "link" if path.is_symlink() else "dir"
    return out


def test_a_lock_is_never_opened_through_a_link_nor_written_into(tmp_path):
    from resources.locks import shared_lock
    from resources.no_links import PlantedLink

    key = tmp_path / "signing.key"
    key.write_text("SECRET")
    folder = tmp_path / "outside"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = tmp_path / "data"
    data.mkdir()
    for name, target in [("to-file", key), ("to-folder", folder), ("dangling", tmp_path / "nothing-yet")]:
        lock = data / f"{name}.lock"
        lock.symlink_to(target)
        with pytest.raises(PlantedLink, match="symbolic link"):
            with shared_lock("x", lock):
                pass
    (data / "hard.lock").hardlink_to(key)  # a second name of the user's file
    with pytest.raises(PlantedLink, match="2 names"):
        with shared_lock("x", data / "hard.lock"):
            pass
    (data / "fifo.lock").symlink_to(fifo)
    with pytest.raises(PlantedLink):
        with shared_lock("x", data / "fifo.lock"):
            pass
    assert (
        key.read_text() == "SECRET" and not (tmp_path / "nothing-yet").exists() and not list(folder.iterdir())
    )
    # a plain lock: held, its holder said in a file beside it made anew, the lock file itself left empty
    with shared_lock("x", data / "plain.lock"):
        assert (data / "plain.lock.holder").read_text() == f"pid {os.getpid()}"
        fd = os.open(data / "plain.lock", os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    assert (data / "plain.lock").read_bytes() == b""


def test_a_file_written_in_a_data_dir_replaces_a_planted_link_and_a_linked_folder_is_refused(tmp_path):
    from resources.no_links import PlantedLink
    from resources.storage import atomic_write_bytes, data_root

    key = tmp_path / "signing.key"
    key.write_text("SECRET")
    data = data_root(str(tmp_path / "data"))
    (data / "leaderboards").mkdir(parents=True)
    (data / "leaderboards" / "x.csv").symlink_to(key)
    atomic_write_bytes(
        data / "leaderboards" / "x.csv", b"board"
    )  # the name is replaced, the link's target kept
    assert key.read_text() == "SECRET" and (data / "leaderboards" / "x.csv").read_bytes() == b"board"
    outside = tmp_path / "outside"
    outside.mkdir()
    (data / "answers").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PlantedLink, match="answers is a symbolic link"):
        atomic_write_bytes(data / "answers" / "a.parquet", b"x")
    assert not list(outside.iterdir())
    # a data dir that is itself a link is the user's choice: resolved, then written in
    (tmp_path / "alias").symlink_to(tmp_path / "data", target_is_directory=True)
    atomic_write_bytes(data_root(str(tmp_path / "alias")) / "ok.txt", b"ok")
    assert (tmp_path / "data" / "ok.txt").read_bytes() == b"ok"


@pytest.fixture(scope="module")
def written(small_slice, tmp_path_factory) -> tuple[Path, list[Path]]:
    """A small sweep run once: its spec and every file its run wrote in the data dir."""
    spec = write_sweep(
        tmp_path_factory.mktemp("spec") / "s.yaml",
        small_slice,
        name="planted",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 2},
        generation={"model": "extractive"},
    )
    first = tmp_path_factory.mktemp("first")
    r = cli("run", spec, "--data-dir", first)
    assert r.returncode == 0, r.stderr
    paths = sorted(
        p.relative_to(first) for p in first.rglob("*") if p.is_file() and not p.name.endswith(".holder")
    )
    assert len(paths) > 10 and Path(".rag-sweep.lock") in paths and Path("mlflow.db") in paths
    return spec, paths


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "folder", "dangling"])
def test_links_planted_at_every_written_path_change_nothing_outside(written, tmp_path, kind):
    spec, paths = written
    tmp = tmp_path
    outside = tmp / "outside"
    outside.mkdir()
    data = tmp / "data"
    for i, rel in enumerate(paths):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            target = outside / f"file-{i}"
            target.write_text(f"the user's file {i}")
        elif kind == "folder":
            target = outside / f"folder-{i}"
            target.mkdir()
        else:
            target = outside / f"never-{i}"
        (data / rel).symlink_to(target)
    before = _snapshot(outside)
    commands = [
        ("run", spec, "--data-dir", data, "--force"),
        ("plan", spec, "--data-dir", data),
        ("gc", spec, "--data-dir", data, "--older-than", "0"),
        ("gc", spec, "--data-dir", data, "--older-than", "0", "--apply"),
        ("export", spec, "--data-dir", data, "--out", tmp / "export"),
    ]
    for command in commands:
        r = cli(*command)
        assert "Traceback" not in r.stderr, (command, r.stderr)
        assert _snapshot(outside) == before, (command, r.stderr)
    r = cli("run", spec, "--data-dir", data)
    assert r.returncode == 2 and "is a symbolic link" in r.stderr, r.stderr
