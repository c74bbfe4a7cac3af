"""The output head a run ranks with: "auto" resolved once, refusals before any weight loads, and one
interface over both heads.

Both heads return counts equal to exact arithmetic's (`rbplab.extraction.exact`), so the head is how ranks
are computed, not what they are: it is recorded in an entry's manifest, never in its cache key, and
an entry computed by either serves a lookup by either. Their nll agree to float32 rounding (1e-5).
- "fp32": `rank_stats`, float32 logits materialised in chunks, on any device.
- "fused": `fused_rank_stats`, a Triton kernel for CUDA: tensor cores for a half-precision body and
  the logits never written to memory.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import HEAD_CHOICES, ExtractionSettings
from rbplab.extraction.fingerprints import cpu_only

if TYPE_CHECKING:  # the policy above imports no torch: a cached `rbplab fit` never loads it
    from torch import Tensor, nn


# The values Triton itself reads as true (its C++ getenv_bool; `triton.knobs.runtime.interpret`,
# which decides whether the fused kernel is interpreted): the refusal must agree with it.
_TRUE = ("1", "true", "on", "yes")


def triton_interpreted() -> bool:
    """Whether TRITON_INTERPRET asks Triton to interpret kernels (on CPU tensors) instead of
    compiling them, read as Triton reads it, without importing Triton."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRUE


def resolve_head(head: str, device: str, dtype: str, *, triton: bool | None = None) -> str:
    """The head a run ranks with, the one rule every caller asks (plan, runner units, costs): `head`
    itself unless it is "auto", which is the fused kernel for a bfloat16 or float16 body on CUDA (a
    device map counts) where Triton is installed, and the fp32 head everywhere else: a CPU, a
    float32 body (the kernel's IEEE float32 path is unmeasured on a GPU), no Triton.
    `device`: a resolved device ("cpu", "cuda:1", "device_map:auto"); `triton`: whether the machine
    that runs it has Triton (None: this one's). From names alone, importing nothing."""
    if head not in HEAD_CHOICES:
        raise InvalidArgumentError(f"head must be one of {HEAD_CHOICES}, got {head!r}")
    if head != "auto":
        return head
    if triton is None:
        triton = importlib.util.find_spec("triton") is not None
    return "fused" if on_gpu(device) and dtype in ("bfloat16", "float16") and triton else "fp32"


def on_gpu(device: str) -> bool:
    """Whether a resolved device puts the head on a GPU: "cuda", "cuda:1", or a device map."""
    return device.startswith("cuda") or device.startswith("device_map:")


def check_head(head: str, device: str, dtype: str) -> None:
    """Refuse (one line) a resolved head where it cannot run, from names alone (before any weight
    loads): the fused kernel runs on CUDA (`TRITON_INTERPRET=1` runs it on CPU tensors, for tests,
    in float32 or float16 only: the interpreter multiplies bfloat16 tiles as raw bit patterns)."""
    if head != "fused":
        return
    if not on_gpu(device) and not triton_interpreted():
        raise InvalidArgumentError(
            f"head='fused' runs a Triton kernel on CUDA GPUs and this run is on {device}; use head='fp32'"
        )
    if importlib.util.find_spec("triton") is None:
        raise InvalidArgumentError(
            "head='fused' needs Triton, which torch's CUDA builds bring (pip install triton); "
            "or use head='fp32'"
        )
    if not on_gpu(device) and dtype == "bfloat16":
        raise InvalidArgumentError(
            "head='fused' under TRITON_INTERPRET cannot multiply bfloat16 (the interpreter reads its "
            "bits as integers); use --dtype float32 or head='fp32'"
        )


def runnable_here(settings: ExtractionSettings) -> bool:
    """Whether the head `settings` ask for can run on this machine as far as names tell (no torch,
    no model): False only for a fused head that `check_head` would refuse."""
    try:
        refuse_unrunnable_head(settings)
    except InvalidArgumentError:
        return False
    return True


def refuse_unrunnable_head(settings: ExtractionSettings) -> None:
    """`check_head` for what `settings` ask, before any model is described or loaded (its files
    hashed, its weights read): "auto" devices are judged from the machine's GPU device nodes."""
    if settings.head != "fused":
        return
    if settings.device_map:
        device = f"device_map:{settings.device_map}"
    elif settings.device == "auto":
        device = "cpu" if cpu_only(settings) else "cuda"
    else:
        device = settings.device
    check_head("fused", device, settings.dtype)


class RankHead:
    """A loaded output head and the function that ranks with it, as a run resolved it: call it with
    hidden states and targets for (n_greater, n_equal, nll); `tally` sums the rows it settled."""

    def __init__(self, name: str, output: nn.Module, vocab_size: int, softcap: float | None) -> None:
        from rbplab.extraction.exact import Tally
        from rbplab.extraction.ranks import FloatHead, rank_stats

        self.name, self.vocab_size, self.softcap = name, vocab_size, softcap
        self.tally = Tally()
        if name == "fused":
            # Imported here: Triton is only needed (and only present) where the fused head runs.
            from rbplab.extraction.fused_head import FusedHead, fused_rank_stats

            self.module, self._rank = FusedHead.from_module(output, vocab_size), fused_rank_stats
        elif name == "fp32":
            self.module, self._rank = FloatHead.from_module(output, vocab_size), rank_stats
        else:
            raise InvalidArgumentError(f"a run ranks with head 'fp32' or 'fused', not {name!r}")

    @property
    def device(self):
        return self.module.weight.device

    def __call__(self, hidden: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self._rank(
            hidden, self.module, targets, vocab_size=self.vocab_size, softcap=self.softcap, tally=self.tally
        )
