"""What `rag-sweep gc` may delete: a regular file (or a store's build folder) under the data dir, reached
from it without a link. A stage folder, cache folder or file that is a symbolic link is neither followed
nor removed: whatever it points at (inside the data dir or out of it) is not gc's to delete. Object
storage has no links: there a path is inside when its key lies under the data dir's prefix.

Each check is made again right before each delete (`contained`), so a folder swapped for a link after
the listing is still refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from resources.storage import is_remote


def contained(path: Path, data: Path, folder: bool = False) -> bool:
    """Whether `path` is under `data` with no link on the way (`data` itself may be one), and is a regular
    file (`folder`: a directory) itself, not a link."""
    if is_remote(data):
        root = str(data).rstrip("/") + "/"
        return str(path).startswith(root) and ".." not in str(path)[len(root) :].split("/")
    try:
        relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(data))
    except ValueError:
        return False
    if not relative.parts or ".." in relative.parts:
        return False
    real_root = os.path.realpath(data)
    # no link on the way: the path's real location is the data dir's real location plus the same names
    if os.path.realpath(path) != os.path.join(real_root, *relative.parts):
        return False
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)


def _entries(folder: Path, data: Path) -> tuple[list[os.DirEntry], list[Path]]:
    """(the entries directly in `folder`, []) for a real local folder under `data`; ([], [folder]) when it
    is a link or outside; ([], []) when it is missing."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return [], []
    if stat.S_ISLNK(mode) or not contained(folder, data, folder=True):
        return [], [folder]
    with os.scandir(folder) as entries:
        return list(entries), []


def listed_files(folder: Path, data: Path, suffix: str = ".parquet") -> tuple[list[Path], list[Path]]:
    """The regular files directly in `folder` ending in `suffix`, and the links met there (the folder
    itself, when it is one): those gc leaves alone, and names."""
    if is_remote(data):
        return (sorted(folder.glob(f"*{suffix}")) if folder.exists() else []), []
    entries, links = _entries(folder, data)
    files = []
    for entry in entries:
        if not entry.name.endswith(suffix):
            continue
        if entry.is_symlink():
            links.append(Path(entry.path))
        elif entry.is_file(follow_symlinks=False):
            files.append(Path(entry.path))
    return sorted(files), sorted(links)


def subfolders(folder: Path, data: Path) -> tuple[list[Path], list[Path]]:
    """The real folders directly in `folder` (on object storage: those holding Parquet files), and the
    links met there (`folder` itself, when it is one)."""
    if is_remote(data):
        return (sorted({p.parent for p in folder.glob("*/*.parquet")}) if folder.exists() else []), []
    entries, links = _entries(folder, data)
    found = []
    for entry in entries:
        if entry.is_symlink():
            links.append(Path(entry.path))
        elif entry.is_dir(follow_symlinks=False):
            found.append(Path(entry.path))
    return sorted(found), sorted(links)


def unlink_contained(path: Path, data: Path) -> bool:
    """Delete `path` only if it is a regular file under `data` reached without a link; False: left."""
    if not is_remote(data) and not os.path.lexists(path):
        return True  # gone already (another gc)
    if not contained(path, data):
        return False
    path.unlink(missing_ok=True)
    return True
