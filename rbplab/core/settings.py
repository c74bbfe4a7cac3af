"""How a model scores a corpus (`ExtractionSettings`) and what a cache entry records of it (`EntrySpec`),
with the package versions a record states.

Installed versions of packages, read from their metadata (nothing is imported): what a plan
record and a results file record about the software that made them.

The identity of a cache entry: everything that changes its numbers, as a typed, versioned spec.

`EntrySpec` is built once, by `rbplab.extraction.plan.plan_extraction`, from the model's description,
the corpus and the settings; its JSON (`to_json`) is what ``spec.json`` holds and what the cache
key is the sha256 of (`rbplab.store.cache.layout.cache_key`). The JSON layout is the one keys have always been
computed from, so existing caches keep their keys; `from_json` reads it back, checking every
field, so code reads ``spec.windows.shard_tokens`` instead of string paths into a dict.

A manifest repeats some of these fields for readers that only open the manifest (`rbplab cache
ls`); `MANIFEST_FIELDS` names them, `manifest_fields` gives their values, the extractor writes
them from the spec and the cache checks them against it (`rbplab.store.cache`).

    model      name (registry short name, hub id or file name), weights fingerprint, revision
               as keyed, GGUF file, dtype, trust_remote_code (only when set)
    tokenizer  fingerprint of the tokenizer
    corpus     name and content hash + document count, or a hub corpus's identity at a commit
    windows    context length, stride, BOS decision (its rule starts with the policy asked for),
               window scheme, tokens per shard
    vocab      |V| ranked over, whether padded rows were included, the head's rows
    softcap    final-logit soft cap (Gemma 2), or None
    max_tokens token budget, or None
    lens       only for a layer before the last: the lens that reads it ("logit": the model's own
               final norm and head), the layer's index and the model's layer count. The final
               layer's entry has no lens field, so its key is the one it always had.
The output head is not in the key: both heads give counts equal to float64's
(`rbplab.extraction.exact`); the manifest records which one ran.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from importlib import metadata
from typing import Any, ClassVar, Literal

from rbplab.core.errors import InvalidArgumentError, RbplabError


def installed_versions(packages: Iterable[str]) -> dict[str, str | None]:
    """Each package's installed version, None for one that is not installed (read once per process:
    the modules a process imported keep their version, whatever is installed meanwhile)."""
    return {package: _version(package) for package in packages}


@functools.cache
def _version(package: str) -> str | None:
    # Reading a package's metadata parses its METADATA file: ~10 ms, once per plan lookup of a grid.
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


BOS_CHOICES = ("auto", "always", "never")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
# The output head that computes ranks: "fp32" materialises IEEE float32 logits in chunks (any
# device); "fused" is the Triton kernel of `rbplab.extraction.fused_head` (CUDA). Both give counts
# equal to float64's (`rbplab.extraction.exact`), so the head is recorded in the manifest and is
# not part of the key. "auto" is resolved once, by `rbplab.extraction.heads.resolve_head`.
HEADS = ("fp32", "fused")
HEAD_CHOICES = ("auto", *HEADS)
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


# What `layers` takes besides a list of depths or of indices: every layer of the model.
ALL_LAYERS = "all"
# The lenses a layer before the last can be read through: "logit", the model's own final norm
# and output head. A trained lens would be another name here, and keys only its own entries.
LENSES = ("logit",)


def check_layers(value: Any) -> tuple[int, ...] | tuple[float, ...] | str | None:
    """`layers` as `ExtractionSettings` keeps it, or a one-line InvalidArgumentError: None (the
    final layer only), "all", or a non-empty list of layer indices (integers >= 0) or of relative
    depths (decimals in (0, 1]: 1.0 is the final layer), not both, since 1 is an index and 1.0 a depth."""
    if value is None or value == ALL_LAYERS:
        return value
    items = [value] if isinstance(value, (int, float)) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)) or not items:
        raise InvalidArgumentError(
            f"layers must be 'all', layer indices (0, 3, 11) or relative depths (0.25, 0.5, 1.0), "
            f"got {value!r}"
        )
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise InvalidArgumentError(
                f"layers: {item!r} is neither a layer index nor a relative depth ('all' stands alone)"
            )
        if isinstance(item, int) and item < 0:
            raise InvalidArgumentError(f"layers: layer index {item} is negative; indices count from 0")
        if isinstance(item, float) and not 0.0 < item <= 1.0:
            raise InvalidArgumentError(
                f"layers: relative depth {item} is outside (0, 1]; 1.0 is the final layer, 0.5 the middle one"
            )
    kinds = {type(item) for item in items}
    if len(kinds) > 1:
        raise InvalidArgumentError(
            f"layers mixes layer indices and relative depths ({', '.join(map(str, items))}); write every "
            "depth as a decimal (1.0 is the final layer) or give only indices"
        )
    return tuple(dict.fromkeys(items))


def layer_indices(layers: Any, n_layers: int, model: str) -> tuple[int, ...]:
    """The layer indices (ascending, 0 .. n_layers - 1) that `layers` (`check_layers`'s forms) name
    in a model of `n_layers` layers; a relative depth d is the shallowest layer at least that
    deep, index ceil(d * n_layers) - 1 (1.0 is the final layer). An index past the model's last
    layer is a one-line InvalidArgumentError naming its layer count."""
    layers = check_layers(layers)
    if layers is None:
        return (n_layers - 1,)
    if layers == ALL_LAYERS:
        return tuple(range(n_layers))
    found = set()
    for item in layers:
        if isinstance(item, float):
            # rounded first: 0.1 * 30 is 3.0000000000000004, whose ceiling would skip a layer
            found.add(max(0, math.ceil(round(item * n_layers, 9)) - 1))
        elif item >= n_layers:
            raise InvalidArgumentError(
                f"layers: {model} has {n_layers} layers (indices 0 to {n_layers - 1}, or relative depths "
                f"in (0, 1]), so it has no layer {item}"
            )
        else:
            found.add(item)
    return tuple(sorted(found))


def _positive_int(name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive integer or None" if optional else "a positive integer"
        raise InvalidArgumentError(f"{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class ExtractionSettings:
    """How a corpus is scored. Fields that change the numbers or the entry's layout enter the cache
    key (context length, stride, BOS, max tokens, padded vocabulary, resolved dtype, shard size);
    the head computes the same counts either way (`rbplab.extraction.exact`), so it does not;
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
    # How the output head computes ranks (HEAD_CHOICES); the counts are float64's either way.
    # "auto": the fused kernel for a half-precision body on CUDA, 2-3.4x faster than the fp32 head on
    # an H200 (benchmarks/results/gpu_check-2026-11-28-epilogue.txt); the fp32 head elsewhere.
    head: Literal["auto", "fp32", "fused"] = "auto"
    # The layers whose ranks are read (`check_layers`): None, the final layer only (its entry is
    # the ordinary one); "all"; layer indices; or relative depths. A layer before the last is read
    # through the logit lens and is its own cache entry (`EntrySpec.lens`); all of a run's layers
    # come from one forward pass per batch.
    layers: tuple[int, ...] | tuple[float, ...] | Literal["all"] | None = None

    def __post_init__(self) -> None:
        # a list (TOML, JSON, a notebook parameter) is kept as a tuple: settings are hashable
        object.__setattr__(self, "layers", check_layers(self.layers))
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
        """All fields, or only those that differ from the defaults (what a notebook is handed);
        layers as a list, as TOML and JSON write it."""
        values = asdict(self)
        if isinstance(values["layers"], tuple):
            values["layers"] = list(values["layers"])
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


BOS_POLICIES = ("auto", "always", "never")
HUB_CORPUS_FIELDS = ("dataset", "config", "split", "revision", "max_documents", "text_scheme")

# Manifest path -> spec path of every manifest field that repeats the spec.
MANIFEST_FIELDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("vocab_size",): ("vocab", "size"),
    ("settings", "context_length"): ("windows", "context_length"),
    ("settings", "stride"): ("windows", "stride"),
    ("settings", "bos_decision"): ("windows", "bos"),
    ("settings", "include_padded_vocab"): ("vocab", "include_padded"),
    ("settings", "max_tokens"): ("max_tokens",),
    ("settings", "dtype"): ("model", "dtype"),
    ("model", "fingerprint"): ("model", "fingerprint"),
    ("model", "revision"): ("model", "revision"),
    ("model", "gguf_file"): ("model", "gguf_file"),
    ("model", "dtype"): ("model", "dtype"),
    ("model", "head_rows"): ("vocab", "head_rows"),
    ("model", "softcap"): ("softcap",),
    ("model", "tokenizer_fingerprint"): ("tokenizer",),
    ("corpus", "name"): ("corpus", "name"),
    ("corpus", "content_hash"): ("corpus", "content_hash"),
    ("corpus", "n_documents"): ("corpus", "n_documents"),
    ("lens",): ("lens",),  # only in an entry of a layer before the last
}


class EntrySpecError(RbplabError, ValueError):
    """A spec.json that is not an entry spec of this version; the message names the field."""


def _need(data: Any, key: str, kind: type | tuple[type, ...], where: str, optional: bool = False) -> Any:
    if not isinstance(data, dict) or key not in data:
        raise EntrySpecError(f"entry spec has no {where}{key}")
    value = data[key]
    if value is None and optional:
        return None
    bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    if not isinstance(value, kind) or bad_bool:
        raise EntrySpecError(f"entry spec field {where}{key} is {value!r}, not {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    fingerprint: str
    revision: str | None
    gguf_file: str | None
    dtype: str
    trust_remote_code: bool = False

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "revision": self.revision,
            "gguf_file": self.gguf_file,
            "dtype": self.dtype,
        }
        if self.trust_remote_code:  # only when set, so every other key stays what it was
            out["trust_remote_code"] = True
        return out

    @classmethod
    def from_json(cls, data: Any) -> ModelIdentity:
        w = "model."
        extra = set(data) - {"name", "fingerprint", "revision", "gguf_file", "dtype", "trust_remote_code"}
        if extra:
            raise EntrySpecError(f"entry spec field model has unknown keys {sorted(extra)}")
        trust = data.get("trust_remote_code", False)
        if trust is not False and trust is not True:
            raise EntrySpecError(f"entry spec field model.trust_remote_code is {trust!r}, not a bool")
        if "trust_remote_code" in data and trust is not True:
            raise EntrySpecError("entry spec field model.trust_remote_code is recorded only when true")
        return cls(
            _need(data, "name", str, w),
            _need(data, "fingerprint", str, w),
            _need(data, "revision", str, w, optional=True),
            _need(data, "gguf_file", str, w, optional=True),
            _need(data, "dtype", str, w),
            trust,
        )


@dataclass(frozen=True)
class CorpusIdentity:
    """A corpus by content (hash and document count) or, read from the hub at a commit, by its
    identity (`hub`: dataset, config, split, revision, max_documents, text_scheme)."""

    name: str
    content_hash: str | None = None
    n_documents: int | None = None
    hub: tuple[tuple[str, Any], ...] | None = None

    def to_json(self) -> dict:
        if self.hub is not None:
            return {"name": self.name, **dict(self.hub)}
        return {"name": self.name, "content_hash": self.content_hash, "n_documents": self.n_documents}

    @classmethod
    def from_json(cls, data: Any) -> CorpusIdentity:
        name = _need(data, "name", str, "corpus.")
        if set(data) == {"name", *HUB_CORPUS_FIELDS}:
            return cls(name, hub=tuple((k, data[k]) for k in HUB_CORPUS_FIELDS))
        if set(data) != {"name", "content_hash", "n_documents"}:
            raise EntrySpecError(
                f"entry spec field corpus has keys {sorted(data)}; expected name, content_hash, n_documents "
                f"or name, {', '.join(HUB_CORPUS_FIELDS)}"
            )
        return cls(
            name, _need(data, "content_hash", str, "corpus."), _need(data, "n_documents", int, "corpus.")
        )


@dataclass(frozen=True)
class BosIdentity:
    use: bool
    token_id: int | None
    rule: str

    @property
    def policy(self) -> str:
        """The BOS policy that was asked for ("auto", "always", "never"): the rule starts with it."""
        return self.rule.split(":", 1)[0]

    def to_json(self) -> dict:
        return {"use": self.use, "token_id": self.token_id, "rule": self.rule}

    @classmethod
    def from_json(cls, data: Any) -> BosIdentity:
        w = "windows.bos."
        bos = cls(
            _need(data, "use", bool, w),
            _need(data, "token_id", int, w, optional=True),
            _need(data, "rule", str, w),
        )
        if bos.policy not in BOS_POLICIES:
            raise EntrySpecError(
                f"entry spec field windows.bos.rule {bos.rule!r} does not start with a BOS policy"
            )
        return bos


@dataclass(frozen=True)
class WindowIdentity:
    context_length: int
    stride: int | None
    bos: BosIdentity
    scheme: int
    shard_tokens: int

    def to_json(self) -> dict:
        return {
            "context_length": self.context_length,
            "stride": self.stride,
            "bos": self.bos.to_json(),
            "scheme": self.scheme,
            "shard_tokens": self.shard_tokens,
        }

    @classmethod
    def from_json(cls, data: Any) -> WindowIdentity:
        w = "windows."
        return cls(
            _need(data, "context_length", int, w),
            _need(data, "stride", int, w, optional=True),
            BosIdentity.from_json(_need(data, "bos", dict, w)),
            _need(data, "scheme", int, w),
            _need(data, "shard_tokens", int, w),
        )


@dataclass(frozen=True)
class VocabIdentity:
    size: int
    include_padded: bool
    head_rows: int

    def to_json(self) -> dict:
        return {"size": self.size, "include_padded": self.include_padded, "head_rows": self.head_rows}

    @classmethod
    def from_json(cls, data: Any) -> VocabIdentity:
        w = "vocab."
        return cls(
            _need(data, "size", int, w),
            _need(data, "include_padded", bool, w),
            _need(data, "head_rows", int, w),
        )


@dataclass(frozen=True)
class LensIdentity:
    """How a layer before the last is read: the lens (`LENSES`), the layer's index (0-based: the
    residual stream after that block) and the model's layer count."""

    kind: str
    layer: int
    n_layers: int

    @property
    def depth(self) -> float:
        """The layer's relative depth, (layer + 1) / n_layers: 1.0 is the final layer."""
        return (self.layer + 1) / self.n_layers

    def to_json(self) -> dict:
        return {"kind": self.kind, "layer": self.layer, "n_layers": self.n_layers}

    @classmethod
    def from_json(cls, data: Any) -> LensIdentity:
        w = "lens."
        if not isinstance(data, dict) or set(data) != {"kind", "layer", "n_layers"}:
            raise EntrySpecError(f"entry spec field lens is {data!r}; expected kind, layer, n_layers")
        lens = cls(_need(data, "kind", str, w), _need(data, "layer", int, w), _need(data, "n_layers", int, w))
        if lens.kind not in LENSES:
            raise EntrySpecError(f"entry spec field lens.kind is {lens.kind!r}, not one of {LENSES}")
        if not 0 <= lens.layer < lens.n_layers - 1:
            raise EntrySpecError(
                f"entry spec field lens.layer is {lens.layer}, not a layer before the last of {lens.n_layers}"
            )
        return lens


@dataclass(frozen=True)
class EntrySpec:
    """What a cache entry holds, field by field (see the module docstring)."""

    model: ModelIdentity
    tokenizer: str
    corpus: CorpusIdentity
    windows: WindowIdentity
    vocab: VocabIdentity
    softcap: float | None
    max_tokens: int | None
    lens: LensIdentity | None = None  # None: the final layer, read by the model's own head

    VERSION: ClassVar[int] = 1  # of this layout; a change of layout is a new version, and new keys
    KEYS: ClassVar[tuple[str, ...]] = (
        "model",
        "tokenizer",
        "corpus",
        "windows",
        "vocab",
        "softcap",
        "max_tokens",
    )

    def to_json(self) -> dict:
        """The spec as spec.json holds it and as the cache key hashes it."""
        out = {
            "model": self.model.to_json(),
            "tokenizer": self.tokenizer,
            "corpus": self.corpus.to_json(),
            "windows": self.windows.to_json(),
            "vocab": self.vocab.to_json(),
            "softcap": self.softcap,
            "max_tokens": self.max_tokens,
        }
        if self.lens is not None:  # only then: the final layer's key is the one it always had
            out["lens"] = self.lens.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> EntrySpec:
        """A spec read back from JSON, every field checked (EntrySpecError names the first bad one).
        ``EntrySpec.from_json(d).to_json() == d`` for every spec this version writes."""
        if not isinstance(data, dict):
            raise EntrySpecError(f"an entry spec is a JSON object, got {type(data).__name__}")
        if set(data) - {"lens"} != set(cls.KEYS):
            raise EntrySpecError(
                f"entry spec has keys {sorted(data)}; version {cls.VERSION} has {sorted(cls.KEYS)} "
                "(and lens, for a layer before the last)"
            )
        softcap = data["softcap"]
        if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))):
            raise EntrySpecError(f"entry spec field softcap is {softcap!r}, not a number")
        return cls(
            ModelIdentity.from_json(_need(data, "model", dict, "")),
            _need(data, "tokenizer", str, ""),
            CorpusIdentity.from_json(_need(data, "corpus", dict, "")),
            WindowIdentity.from_json(_need(data, "windows", dict, "")),
            VocabIdentity.from_json(_need(data, "vocab", dict, "")),
            softcap,
            _need(data, "max_tokens", int, "", optional=True),
            LensIdentity.from_json(data["lens"]) if "lens" in data else None,
        )

    @classmethod
    def parse(cls, data: Any) -> EntrySpec | None:
        """`from_json`, or None for a spec of another layout (an older or a hand-made one)."""
        try:
            return cls.from_json(data)
        except EntrySpecError:
            return None

    def settings(self) -> dict[str, Any]:
        """The `ExtractionSettings` fields this spec pins (the BOS policy from its recorded rule),
        so an entry can be planned again from its spec without trying settings until a key
        matches (`rbplab cache repair`)."""
        return {
            "context_length": self.windows.context_length,
            "stride": self.windows.stride,
            "bos": self.windows.bos.policy,
            "max_tokens": self.max_tokens,
            "include_padded_vocab": self.vocab.include_padded,
            "dtype": self.model.dtype,
            "shard_tokens": self.windows.shard_tokens,
        }

    def pins(self, settings: Any, *, dtype: str, shard_tokens: int | None) -> bool:
        """Whether this spec pins what `settings` (`ExtractionSettings`) ask, with their dtype and
        shard size as the asker resolves them (a context length left open takes the spec's;
        a shard size of None takes any: how an entry is cut is not what it holds). Only the
        final layer's entry can: a layer before the last is found by planning its run."""
        pinned = self.settings()
        return (
            self.lens is None
            and pinned["bos"] == settings.bos
            and pinned["max_tokens"] == settings.max_tokens
            and pinned["include_padded_vocab"] == settings.include_padded_vocab
            and pinned["dtype"] == dtype
            and shard_tokens in (None, pinned["shard_tokens"])
            and (settings.context_length is None or pinned["context_length"] == settings.context_length)
            and pinned["stride"] == settings.stride
        )

    def cut_at(self, shard_tokens: int) -> EntrySpec:
        """This spec with its entry cut into shards of `shard_tokens` targets: the same ranks,
        another key (the key names the shard files on disk, which resuming and the cache's rules
        read by their cut)."""
        return replace(self, windows=replace(self.windows, shard_tokens=shard_tokens))

    def manifest_fields(self) -> dict[tuple[str, ...], Any]:
        """The manifest fields this spec determines (`MANIFEST_FIELDS`) with their values."""
        data = self.to_json()
        out = {}
        for manifest_path, spec_path in MANIFEST_FIELDS.items():
            value: Any = data
            for part in spec_path:
                value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
            if value is not _ABSENT:
                out[manifest_path] = value
        return out


_ABSENT = object()
