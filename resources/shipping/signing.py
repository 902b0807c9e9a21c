"""The anchor a registered model is checked against: an HMAC-SHA256 signature over the sha256 of every file
of its folder, made when it is registered with a key this user keeps outside the data dir and the tracking
store (default `~/.config/rag-sweep/signing.key`, created on first use, mode 0600; `$RAG_SWEEP_SIGNING_KEY`
names another file). One who can rewrite a version's folder and its registry tags (`mlflow.db`) cannot make
a signature that key verifies; one who can read the key can.

What is signed is the model's identity with its files (`IDENTITY`: the registered name, the sweep, the
config key and the evaluation fingerprint): a signed version of another sweep, another name or another
config registered under this name (by a writer of the tracking store) does not verify as what is asked for.
What it cannot tell: an alias moved to an older version this key signed for the same name and sweep
(docs/concepts/trust.md)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

KEY_ENV = "RAG_SWEEP_SIGNING_KEY"
CONTEXT = b"rag-sweep model v2\n"  # what the key signs: never mistaken for another use of it (v1: files only)
IDENTITY = ("registered_name", "sweep", "config_key", "evaluation_fingerprint")
SIGNATURE_VERSION = "2"  # the registry tag `signature_version` of a version signed so


class SigningKeyError(RuntimeError):
    """The signing key cannot be used: missing, unreadable, not this user's, or open to others."""


def key_path() -> Path:
    """$RAG_SWEEP_SIGNING_KEY, else `signing.key` in the user's config dir ($XDG_CONFIG_HOME/rag-sweep)."""
    if named := os.environ.get(KEY_ENV):
        return Path(named).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "rag-sweep" / "signing.key"


def _read(path: Path) -> bytes:
    """The key in `path`: a file of this user's that no one else can read or write (as ssh asks of a key)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SigningKeyError(f"signing key {path}: cannot be read ({e.strerror})") from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise SigningKeyError(
                f"signing key {path}: not a file of this user's that only it can read and write "
                f"(mode {stat.S_IMODE(info.st_mode):o}): chmod 600 it, or set ${KEY_ENV} to another"
            )
        try:
            key = bytes.fromhex(f.read().strip())
        except ValueError:
            key = b""
    if len(key) < 32:
        raise SigningKeyError(f"signing key {path}: not a key (64 hex digits or more)")
    return key


def signing_key(create: bool) -> bytes:
    """This user's signing key; `create`: made (32 random bytes, mode 0600) when there is none yet."""
    path = key_path()
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            raise SigningKeyError(
                f"no signing key at {path}: the key that signed the model was elsewhere (set ${KEY_ENV} "
                "to its file)"
            ) from None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process made it meanwhile
        return _read(path)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return _read(path)


def _mac(key: bytes, files: dict[str, str], identity: dict[str, str]) -> str:
    if sorted(identity) != sorted(IDENTITY) or not all(isinstance(v, str) and v for v in identity.values()):
        raise ValueError(
            f"a model's identity is {', '.join(IDENTITY)}, each a non-empty text: got {identity}"
        )
    text = json.dumps({"files": files, "identity": identity}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, CONTEXT + text.encode(), hashlib.sha256).hexdigest()


def sign(files: dict[str, str], identity: dict[str, str]) -> str:
    """The signature of a model folder's files (path -> sha256) as the model `identity` names (IDENTITY),
    with this user's key (made if none yet)."""
    return _mac(signing_key(create=True), files, identity)


def signed(files: dict[str, str], identity: dict[str, str], signature: str) -> bool:
    """Whether `signature` is this user's key's signature of `files` as `identity`; SigningKeyError when there
    is no key."""
    return hmac.compare_digest(_mac(signing_key(create=False), files, identity), signature)
