"""Which device the local models (embedders, cross-encoders) run on, and how fast each was measured to embed.

`$RAG_DEVICE` (resources/environment.py): `auto` (the default) takes the first CUDA device when torch sees one,
else the CPU; `cpu`; `cuda` or `cuda:N` insist on a GPU and are one clear error where there is none, before
any work. Whether a machine has a CUDA device at all is asked of the driver (libcuda) first: a machine
without one (every CI and laptop) never imports torch to learn that, so `auto` costs nothing there.

The device is never part of a fingerprint: an encoder is used on a device only when its vectors pass the
same check the ONNX export passes (resources/local_encoders.py), so a vector is the same vector wherever it
was computed and the embedding cache is shared by every device.

Throughput: each embedding call of at least MIN_TIMED texts records the characters (and texts) per second
its encoder measured on this machine (per model and device), so `rag-sweep plan` estimates time with the
device's measured speed, not a guess. Characters, because a model's time follows its texts' length: 242
questions embed at ~500 texts/s on 2 cores where chunks of ~170 tokens embed at ~50.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from rag_core.common.extras import install_hint, installed
from resources.environment import user_cache_dir

# all-MiniLM-L6-v2 on 2 cores: ~23 texts/s of ~170-token (~680-character) chunks, before any measurement
ASSUMED_CPU_CHARS = 23.0 * 680
MIN_TIMED = 64  # fewer texts time the start more than the model
_LOCK = threading.Lock()


class DeviceUnavailable(RuntimeError):
    """$RAG_DEVICE names a device this machine does not have."""


@dataclass(frozen=True)
class Device:
    name: str  # what torch is given: "cpu", "cuda:0"
    label: str  # what people read: "cpu", "cuda:0 (NVIDIA H200)"
    why: str  # how the setting resolved to it

    @property
    def is_cuda(self) -> bool:
        return self.name.startswith("cuda")

    @property
    def index(self) -> int:
        return int(self.name.split(":")[1]) if self.is_cuda else -1


CPU = Device("cpu", "cpu", "")


def driver_device_count() -> tuple[int, str]:
    """(CUDA devices the driver reports, why none when 0), asked of libcuda without importing torch. Honors
    CUDA_VISIBLE_DEVICES as torch does."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0, "no CUDA driver on this machine (libcuda.so.1 not found)"
    if cuda.cuInit(0) != 0:
        return 0, "the CUDA driver did not initialize (no device, or none visible: $CUDA_VISIBLE_DEVICES)"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return 0, "the CUDA driver reports no device (or none visible: $CUDA_VISIBLE_DEVICES)"
    return count.value, ""


def torch_device_count() -> tuple[int, str]:
    """(CUDA devices torch can use, why none when 0; none without the torch extra)."""
    if not installed("torch"):
        return 0, f"the GPU encoders need torch, not installed here: {install_hint('torch')}"
    import torch

    if not torch.cuda.is_available():
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return 0, f"torch {torch.__version__} ({built}) sees no CUDA device"
    return torch.cuda.device_count(), ""


@functools.lru_cache(maxsize=8)
def resolve_device(setting: str = "auto") -> Device:
    """The device `setting` means on this machine; `cuda`/`cuda:N` without it: DeviceUnavailable."""
    if setting == "cpu":
        return Device("cpu", "cpu", "RAG_DEVICE=cpu")
    count, why_none = driver_device_count()
    if count:
        count, why_none = torch_device_count()
    wanted = 0 if setting in ("auto", "cuda") else int(setting.split(":")[1])
    if wanted >= count:
        if setting == "auto":
            return Device("cpu", "cpu", f"auto: {why_none}")
        have = f"{count} CUDA device(s) (cuda:0..cuda:{count - 1})" if count else why_none
        raise DeviceUnavailable(
            f"$RAG_DEVICE={setting}: this machine has no such device: {have}; set RAG_DEVICE=auto (a GPU "
            "where there is one, else the CPU) or cpu"
        )
    import torch

    name = f"cuda:{wanted}"
    gpu = torch.cuda.get_device_name(wanted)
    return Device(name, f"{name} ({gpu})", f"{setting}: {gpu}, {count} CUDA device(s) visible")


# ---- measured throughput ---------------------------------------------------------------------------------


def _rates_path() -> Path:
    return user_cache_dir() / "throughput.json"


def _rates() -> dict:
    try:
        return json.loads(_rates_path().read_text())
    except (OSError, ValueError):
        return {}


def rate_key(model_version: str, device: Device) -> str:
    return f"{model_version} @ {device.label}"


def record_rate(
    model_version: str, device: Device, engine: str, texts: int, chars: int, seconds: float
) -> None:
    """Remember this machine's measured texts/s for a model on a device (the latest measurement of at least
    MIN_TIMED texts). A cache dir that cannot be written only loses the estimate."""
    if texts < MIN_TIMED or seconds <= 0:
        return
    with _LOCK:
        rates = _rates()
        rates[rate_key(model_version, device)] = {
            "texts_per_second": round(texts / seconds, 1),
            "chars_per_second": round(chars / seconds),
            "engine": engine,
            "texts": texts,
        }
        path = _rates_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".throughput-")
            with os.fdopen(fd, "w") as f:
                json.dump(rates, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass


def measured_rate(model_version: str, device: Device) -> dict | None:
    """{"chars_per_second", "texts_per_second", "engine", "texts"} last measured here for the model on the
    device, or None."""
    return _rates().get(rate_key(model_version, device))
