"""IEEE float32 arithmetic pinned while rbplab ranks: the error bound of `rbplab.extraction.exact`
assumes it.

TF32 (10-bit mantissa) in float32 matmuls or convolutions changes logits by ~1e-3 relative, enough
to reorder near-tied tokens and change ranks. Several things switch it on without the caller of
rbplab asking: `torch.backends.cuda.matmul.allow_tf32 = True`, `torch.set_float32_matmul_precision`
("high"/"medium", the latter also bfloat16 for oneDNN matmuls on CPU), the environment variable
`TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1` (read once, when torch's global context is built: it makes the
initial matmul precision "high"), and transformers' `enable_tf32`, which sets the generic
`torch.backends.fp32_precision = "tf32"`.

How torch 2.13 resolves these (ATen/Context.h): every (backend, op) pair has an fp32 precision
("ieee", "tf32", "bf16" or "none"); "none" falls back to the backend's "all" entry, then to the
generic entry, then to IEEE. The legacy knobs write the same table (`set_float32_matmul_precision`
writes cuda.matmul and mkldnn.matmul; `cudnn.allow_tf32` writes cudnn conv and rnn) and keep a
legacy value of their own that torch checks against the table (a mix raises on reading). So
`pinned_precision` sets the legacy knobs first ("highest", cuDNN TF32 off) and then every per-op
entry to "ieee" explicitly, so no generic or environment setting can reach them; on exit it puts
back every value it read, legacy ones first, so the caller finds exactly the flags it had.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


# (name in the record, object holding `fp32_precision`): every per-op entry torch 2.13 consults.
def _precision_holders() -> dict[str, Any]:
    backends = torch.backends
    return {
        "generic": backends,
        "cuda.matmul": backends.cuda.matmul,
        "cudnn": backends.cudnn,
        "cudnn.conv": backends.cudnn.conv,
        "cudnn.rnn": backends.cudnn.rnn,
        "mkldnn": backends.mkldnn,
        "mkldnn.matmul": backends.mkldnn.matmul,
        "mkldnn.conv": backends.mkldnn.conv,
        "mkldnn.rnn": backends.mkldnn.rnn,
    }


def _read(getter: Any) -> Any:
    # torch raises on reading a legacy flag that disagrees with the per-op table (a mixed state):
    # such a flag cannot be put back as it was, and the per-op values (which always read) decide.
    try:
        return getter()
    except RuntimeError:
        return None


def precision_flags() -> dict[str, Any]:
    """The float32 precision settings now in force: the legacy knobs (None where torch refuses to
    read one because it disagrees with the per-op table) and every per-op fp32_precision."""
    flags: dict[str, Any] = {
        "float32_matmul_precision": _read(torch.get_float32_matmul_precision),
        "cuda.matmul.allow_tf32": _read(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": _read(lambda: torch.backends.cudnn.allow_tf32),
    }
    for name, holder in _precision_holders().items():
        flags[f"{name}.fp32_precision"] = holder.fp32_precision
    return flags


def _restore(flags: dict[str, Any]) -> None:
    # Legacy knobs first: each also rewrites per-op entries, which are then set back one by one.
    if flags["float32_matmul_precision"] is not None:
        torch.set_float32_matmul_precision(flags["float32_matmul_precision"])
    if flags["cudnn.allow_tf32"] is not None:
        torch.backends.cudnn.allow_tf32 = flags["cudnn.allow_tf32"]
    for name, holder in _precision_holders().items():
        holder.fp32_precision = flags[f"{name}.fp32_precision"]


@contextlib.contextmanager
def pinned_precision() -> Iterator[dict[str, Any]]:
    """IEEE float32 matmuls and convolutions (TF32 and bfloat16 reductions of float32 off) inside;
    the caller's settings restored on exit, also on an error. Yields the flags in force inside.
    Not thread-safe: the settings are process-wide (rbplab scores from one thread)."""
    saved = precision_flags()
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        for holder in _precision_holders().values():
            holder.fp32_precision = "ieee"
        yield precision_flags()
    finally:
        _restore(saved)
