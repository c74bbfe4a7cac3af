"""Where and in what dtype a model runs: the device ("auto": cuda > mps > cpu), the dtype ("auto":
float32 on a CPU, the checkpoint's own half type on an accelerator), and a device map's marker.

Both are resolved when a model is described (they enter `ModelInfo`, and the dtype the cache key),
and read back when its weights are loaded.
"""

from __future__ import annotations

from typing import Any

import torch

from rbplab.catalog.models import ModelLoadError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEVICE_MAP_PREFIX = "device_map:"  # ModelInfo.device of a model placed by a device map


def select_device(device: str = "auto") -> torch.device:
    """cuda > mps > cpu for "auto"; anything else is passed to torch.device."""
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError as err:
            raise ModelLoadError(
                f"unknown device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:1', 'mps'"
            ) from err
        if chosen.type != "cpu":
            _check_present(chosen, device)
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _check_present(chosen: torch.device, device: str) -> None:
    """Refuse a device this machine does not have, before a model is placed on it (torch would
    fail there with a multi-line error, or not until the first tensor moves)."""
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError(f"device {device!r} requested but CUDA is not available; use device='auto'")
        if chosen.index is not None and chosen.index >= count:
            raise ModelLoadError(
                f"device {device!r} requested but this machine has {count} CUDA device(s) (cuda:0 to "
                f"cuda:{count - 1})"
            )
        return
    backend = (
        getattr(torch.backends, chosen.type, None)
        if chosen.type == "mps"
        else getattr(torch, chosen.type, None)
    )
    available = getattr(backend, "is_available", None)
    if not callable(available) or not available():
        raise ModelLoadError(
            f"device {device!r} requested but this machine has no {chosen.type} device; use device='auto' "
            "or 'cpu'"
        )


def resolve_dtype(dtype: str, device: torch.device, config: Any = None) -> str:
    """The dtype to run the model body in. "auto": float32 on CPU (exact and, without bf16
    matrix units, not slower); on accelerators the checkpoint's own half type if it has one."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; use 'auto' or one of {sorted(DTYPES)}")
        return dtype
    if device.type == "cpu" or config is None:
        return "float32"
    stored = getattr(config, "dtype", None)  # transformers >= 4.56 reads a config's torch_dtype into dtype
    stored = str(stored).replace("torch.", "") if stored is not None else None
    return stored if stored in ("bfloat16", "float16") else "float32"
