"""Extraction settings: the one object that says how a model scores a corpus.

The Python API (`Grid.from_names`, `load_study`, `load_stats`), the command line, the report and the
notebooks all take an `ExtractionSettings`; functions that take one also accept its fields as
keyword overrides (`Grid.from_names(m, c, max_tokens=2000)`), validated here in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from rbplab.core.errors import InvalidArgumentError

BOS_CHOICES = ("auto", "always", "never")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
# The output head's arithmetic: "fp32" materialises IEEE float32 logits in chunks (any device);
# "fused" is the Triton kernel of `rbplab.extraction.fused_head` (CUDA): tensor cores for a
# half-precision body, logits never written. Both rank exactly against the values they compute, but
# their sums run in other orders, so near-ties can fall differently: the head is part of the key.
HEAD_CHOICES = ("fp32", "fused")
# What transformers' from_pretrained takes as a named device_map besides one device.
DEVICE_MAP_CHOICES = ("auto", "balanced", "balanced_low_0", "sequential")
# Devices a model can be scored on: "meta" (no data) and other torch device types are not.
_DEVICE_RE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def check_device(device: Any) -> None:
    """Refuse (one-line InvalidArgumentError) a device that is not "auto", "cpu", "cuda",
    "cuda:N" or "mps": checked from the name alone, before any model or torch is touched."""
    if not isinstance(device, str) or not (device == "auto" or _DEVICE_RE.match(device)):
        raise InvalidArgumentError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")


def check_device_map(device_map: Any) -> None:
    """Refuse a device_map that is not None, one of DEVICE_MAP_CHOICES or a device name."""
    if device_map is None:
        return
    if not isinstance(device_map, str) or not (
        device_map in DEVICE_MAP_CHOICES or _DEVICE_RE.match(device_map)
    ):
        raise InvalidArgumentError(
            f"device_map must be one of {', '.join(DEVICE_MAP_CHOICES)}, a device such as 'cuda:0', or "
            f"None, got {device_map!r}"
        )


def _positive_int(name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive integer or None" if optional else "a positive integer"
        raise InvalidArgumentError(f"{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class ExtractionSettings:
    """How a corpus is scored. Fields that change the numbers or the entry's layout enter the cache
    key (context length, stride, BOS, max tokens, padded vocabulary, resolved dtype, shard size, the
    head's arithmetic when it is not the default);
    device, device map and batch tokens change only speed (batch invariance is tested), so they do not.

    Examples
    --------
    >>> settings = ExtractionSettings(max_tokens=2000)
    >>> settings.max_tokens, settings.bos, settings.dtype
    (2000, 'auto', 'auto')
    >>> settings.with_changes(bos="always").bos
    'always'
    """

    context_length: int | None = None  # window length incl. BOS; None: the model's limit, at most 2048
    stride: int | None = None  # None: non-overlapping windows; else the advance of strided windows
    bos: Literal["auto", "always", "never"] = "auto"
    max_tokens: int | None = None  # score at most this many tokens (corpus order); None: all
    include_padded_vocab: bool = False  # rank over every output row, not only the tokenizer's vocabulary
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"  # "auto" (cuda > mps > cpu), "cpu", "cuda", "cuda:1" or "mps"
    device_map: str | None = None  # "auto", "balanced", "balanced_low_0", "sequential" or a device
    # Padded tokens per forward pass: windows of one padded length are batched until they fill it.
    # None: 16,384 on a GPU (8 windows of 2,048; 256 of 64), 2,048 on a CPU, where larger batches
    # measured slower (micro-6: 10,258 vs 12,494 tok/s of CPU time). Speed and memory only.
    batch_tokens: int | None = None
    # Scored tokens per cache shard (default 65,536): the unit of resuming and of splitting a long
    # corpus across workers. It decides how the entry is cut, so it is part of the key.
    shard_tokens: int | None = None
    # How the output head computes ranks (HEAD_CHOICES). "fused" stays opt-in until a GPU run of
    # this project has shown it exact against float64 and faster (benchmarks/gpu_check.py).
    head: Literal["fp32", "fused"] = "fp32"

    def __post_init__(self) -> None:
        _positive_int("context_length", self.context_length, optional=True)
        if self.context_length is not None and self.context_length < 2:
            raise InvalidArgumentError(f"context_length must be at least 2, got {self.context_length}")
        _positive_int("stride", self.stride, optional=True)
        if self.stride is not None and self.context_length is not None and self.stride >= self.context_length:
            raise InvalidArgumentError(
                f"stride must be smaller than context_length={self.context_length}, got {self.stride}; "
                "use stride=None for non-overlapping windows"
            )
        if self.bos not in BOS_CHOICES:
            raise InvalidArgumentError(f"bos must be one of {BOS_CHOICES}, got {self.bos!r}")
        _positive_int("max_tokens", self.max_tokens, optional=True)
        if not isinstance(self.include_padded_vocab, bool):
            raise InvalidArgumentError(
                f"include_padded_vocab must be true or false, got {self.include_padded_vocab!r}"
            )
        if self.dtype not in DTYPE_CHOICES:
            raise InvalidArgumentError(f"dtype must be one of {DTYPE_CHOICES}, got {self.dtype!r}")
        check_device(self.device)
        check_device_map(self.device_map)
        _positive_int("batch_tokens", self.batch_tokens, optional=True)
        _positive_int("shard_tokens", self.shard_tokens, optional=True)
        if self.head not in HEAD_CHOICES:
            raise InvalidArgumentError(f"head must be one of {HEAD_CHOICES}, got {self.head!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def with_changes(self, **changes: Any) -> ExtractionSettings:
        """A copy with some fields changed; an unknown name is a one-line error listing the fields."""
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise InvalidArgumentError(
                f"unknown extraction setting(s) {', '.join(unknown)}; "
                f"settings are: {', '.join(self.field_names())}"
            )
        return replace(self, **changes) if changes else self

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> ExtractionSettings:
        """From a dict (a notebook parameter, a study file's [settings] table)."""
        if values is not None and not isinstance(values, Mapping):
            raise InvalidArgumentError(
                f"extraction settings must be a mapping of field names, got {type(values).__name__}"
            )
        return cls().with_changes(**dict(values or {}))

    def to_dict(self, changed_only: bool = False) -> dict[str, Any]:
        """All fields, or only those that differ from the defaults (what a notebook is handed)."""
        values = asdict(self)
        if changed_only:
            default = asdict(ExtractionSettings())
            values = {k: v for k, v in values.items() if v != default[k]}
        return values


def resolve_settings(
    settings: ExtractionSettings | Mapping[str, Any] | None, **overrides: Any
) -> ExtractionSettings:
    """`settings` (an object, a mapping or None for the defaults) with keyword overrides applied."""
    base = settings if isinstance(settings, ExtractionSettings) else ExtractionSettings.from_mapping(settings)
    return base.with_changes(**overrides)
