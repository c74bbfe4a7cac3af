"""A run's plan: its cache key from metadata (no weights), and whether the cache already holds the entry.

Whether the cache already holds a plan's run: `cache_hit`, and what `rbplab plan` shows of it.

A hit is a complete entry whose manifest passes every store check, whose every shard file is on
disk at the size its records give (stat calls: no shard is read or hashed), and which holds the
shards and tokens the plan's corpus, tokenizer and window settings give; it loads no weights and
runs no forward pass. An entry that fails is reported once and marked incomplete, so the caller
recomputes what it lacks. `hit_problems` is the same judgement without marking anything, so
`rbplab plan` (which writes nothing) and `rbplab run` call the same entries cached.
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora import Corpus, LazyCorpus, open_corpus
from rbplab.catalog.models import ModelSpec, ResolvedModel
from rbplab.core.errors import InvalidArgumentError, RbplabError, RbplabWarning
from rbplab.core.settings import (
    BosIdentity,
    CorpusIdentity,
    EntrySpec,
    ExtractionSettings,
    LensIdentity,
    ModelIdentity,
    VocabIdentity,
    WindowIdentity,
    layer_indices,
    resolve_settings,
)
from rbplab.extraction.fingerprints import record_plan
from rbplab.extraction.heads import check_head, refuse_unrunnable_head, resolve_head
from rbplab.extraction.sources import ModelDescription, describe_model
from rbplab.extraction.windows import (
    BosDecision,
    Window,
    WindowPolicy,
    make_windows,
    resolve_bos,
    tokenize_documents,
)
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError

SHARD_TOKENS = 1 << 16  # scored targets per shard (whole windows): resume granularity
DEFAULT_MAX_CONTEXT = 2048
WINDOW_SCHEME = 1  # bump when window or shard construction changes (part of the cache key)


class ContextLengthError(RbplabError, ValueError):
    """Requested context longer than the model's position limit."""


@dataclass(frozen=True)
class Plan:
    """Everything an extraction is determined by, resolved from metadata (no weights)."""

    described: ModelDescription
    corpus: Corpus | LazyCorpus  # a hub corpus reads its documents only on a cache miss
    policy: WindowPolicy
    bos: BosDecision
    vocab_size: int
    settings: ExtractionSettings
    spec: EntrySpec  # the entry's identity: its JSON is spec.json and what the cache key hashes
    head: str  # the head that ranks ("fp32" or "fused"): how, not what, so never in the key

    @property
    def key_spec(self) -> dict:
        """The spec as JSON (what `CacheEntry` and `cache_key` take)."""
        return self.spec.to_json()

    @property
    def max_tokens(self) -> int | None:
        return self.settings.max_tokens

    @property
    def layer(self) -> int | None:
        """The index of the layer a plan before the last reads (through `spec.lens`); None for the
        final layer, which the model's own head reads (the ordinary entry)."""
        return None if self.spec.lens is None else self.spec.lens.layer

    @property
    def include_padded_vocab(self) -> bool:
        return self.settings.include_padded_vocab

    @cached_property
    def shards(self) -> list[list[Window]]:
        """The windows of every shard of the entry (tokenizes the corpus on first use: a cache hit
        on a hub corpus never asks)."""
        return shard_windows(plan_windows(self), self.spec.windows.shard_tokens)

    @property
    def counts_derivable(self) -> bool:
        """Whether the entry's shard and token counts can be derived without reading a dataset:
        always, except for a hub corpus whose documents have not been read (`LazyCorpus`), which a
        cache hit is keyed by and never reads (`rbplab cache verify` derives its counts)."""
        return not isinstance(self.corpus, LazyCorpus) or self.corpus.loaded


def plan_extraction(
    model: ResolvedModel | ModelSpec | str,
    corpus: str | Path | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    described: dict | None = None,
    **overrides: Any,
) -> Plan:
    """Resolve every setting and the cache key from config, tokenizer and corpus only.
    `overrides` are `ExtractionSettings` fields (e.g. max_tokens=2000). `described` is a dict the
    caller keeps for one pass over a grid, so each model is described once, not once per corpus
    (again when its weight files changed meanwhile)."""
    settings = resolve_settings(settings, **overrides)
    refuse_unrunnable_head(settings)  # before the model is described: its weight files are hashed
    if described is None:
        described = {}
    memo = (model, settings.dtype, settings.device, settings.device_map)
    known = described.get(memo)
    # a model whose files changed since it was described is described (and fingerprinted) again
    if known is None or (known.weights is not None and known.weights.changed()):
        described[memo] = describe_model(model, settings)
    described = described[memo]
    info = described.info
    corpus = corpus if isinstance(corpus, (Corpus, LazyCorpus)) else open_corpus(corpus)
    context_length, stride, bos = settings.context_length, settings.stride, settings.bos
    max_tokens, include_padded_vocab = settings.max_tokens, settings.include_padded_vocab
    limit = info.max_context
    if context_length is None:
        context_length = min(limit or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)
    elif limit is not None and context_length > limit:
        raise ContextLengthError(
            f"context_length={context_length} is longer than {info.name} supports ({limit} positions); "
            f"use a context length of at most {limit}"
        )
    policy = WindowPolicy(int(context_length), stride, bos)
    decision = resolve_bos(described.tokenizer, bos, described.config)
    vocab_size = info.head_rows if include_padded_vocab else info.vocab_size
    head = resolve_head(settings.head, info.device, info.dtype)
    entry_spec = EntrySpec(
        model=ModelIdentity(
            name=described.model.keyed_name,
            fingerprint=info.fingerprint,
            revision=described.model.keyed_revision,
            gguf_file=info.gguf_file,
            dtype=info.dtype,
            trust_remote_code=described.model.trust_remote_code,
        ),
        tokenizer=info.tokenizer_fingerprint,
        corpus=CorpusIdentity.from_json(corpus.key()),
        windows=WindowIdentity(
            context_length=policy.context_length,
            stride=policy.stride,
            bos=BosIdentity(decision.use, decision.token_id, decision.rule),
            scheme=WINDOW_SCHEME,
            shard_tokens=settings.shard_tokens or SHARD_TOKENS,
        ),
        vocab=VocabIdentity(vocab_size, include_padded_vocab, info.head_rows),
        softcap=info.softcap,
        max_tokens=max_tokens,
    )
    check_head(head, info.device, info.dtype)  # before anything is written or any weight loads
    return Plan(described, corpus, policy, decision, vocab_size, settings, entry_spec, head)


def config_layers(config: Any) -> int | None:
    """The layer count a model's (text) config names (num_hidden_layers), None when it names none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_hidden_layers", None)
    return None if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1 else layers


def model_layers(described: ModelDescription) -> int:
    """The model's layer count, from its (text) config: what `--layers` indices and depths refer to."""
    layers = config_layers(described.config)
    if layers is None:
        raise InvalidArgumentError(
            f"{described.info.name}: its config names no layer count (num_hidden_layers), so --layers "
            "cannot be read for it; leave --layers out to score the final layer"
        )
    return layers


def at_layer(plan: Plan, layer: int) -> Plan:
    """`plan` (of the final layer) reading layer `layer` instead: the same run and windows, through
    the logit lens for a layer before the last (its own entry: `EntrySpec.lens`), `plan` itself
    for the final layer."""
    n_layers = model_layers(plan.described)
    if not 0 <= layer < n_layers:
        raise InvalidArgumentError(
            f"layers: {plan.described.info.name} has {n_layers} layers (indices 0 to {n_layers - 1}), "
            f"so it has no layer {layer}"
        )
    if layer == n_layers - 1:
        return plan
    return replace(plan, spec=replace(plan.spec, lens=LensIdentity("logit", layer, n_layers)))


def plan_layers(
    model: ResolvedModel | ModelSpec | str,
    corpus: str | Path | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    described: dict | None = None,
    **overrides: Any,
) -> list[Plan]:
    """The plan of every layer `settings.layers` names (`rbplab.core.settings.layer_indices`),
    shallowest first, the final layer's being `plan_extraction`'s own: one run, one set of windows,
    one forward pass per batch for all of them (`rbplab.extraction.scoring.compute_shards`)."""
    plan = plan_extraction(model, corpus, settings, described=described, **overrides)
    if plan.settings.layers is None:
        return [plan]
    n_layers = model_layers(plan.described)
    indices = layer_indices(plan.settings.layers, n_layers, plan.described.info.name)
    return [at_layer(plan, index) for index in indices]


def plan_and_record(
    model: ResolvedModel | ModelSpec | str,
    corpus: str | Path | Corpus | LazyCorpus,
    settings: ExtractionSettings,
    cache_dir: str | Path | None,
    *,
    described: dict | None = None,
) -> Plan:
    """`plan_extraction`, then its plan record written (`known_plans.record_plan`), so the next
    lookup of this run finds its key without model code."""
    plan = plan_extraction(model, corpus, settings, described=described)
    record_plan(plan, cache_dir)
    return plan


# Windows depend on the tokenizer, the corpus and the window settings, not on the model: models of
# one family share them, so a process that runs a grid tokenizes each corpus once per tokenizer.
_WINDOW_MEMO: OrderedDict[str, list[Window]] = OrderedDict()
_WINDOW_MEMO_SIZE = 8


def plan_windows(plan: Plan) -> list[Window]:
    """Every scored window of the plan's corpus (memoised per tokenizer, corpus and settings)."""
    spec = plan.spec
    memo_key = json.dumps(
        [spec.tokenizer, spec.corpus.to_json(), spec.windows.to_json(), spec.max_tokens],
        sort_keys=True,
        default=str,
    )
    if memo_key in _WINDOW_MEMO:
        _WINDOW_MEMO.move_to_end(memo_key)
        return _WINDOW_MEMO[memo_key]
    windows = _make_windows(plan)
    _WINDOW_MEMO[memo_key] = windows
    while len(_WINDOW_MEMO) > _WINDOW_MEMO_SIZE:
        _WINDOW_MEMO.popitem(last=False)
    return windows


def _make_windows(plan: Plan) -> list[Window]:
    tokenizer = plan.described.tokenizer
    texts = [doc.text for doc in plan.corpus.documents]
    windows = make_windows(
        tokenize_documents(tokenizer, texts, names=[doc.id for doc in plan.corpus.documents]),
        plan.policy,
        plan.bos,
        special_ids=getattr(tokenizer, "all_special_ids", ()),
        max_tokens=plan.max_tokens,
    )
    if not windows:
        raise InvalidArgumentError(
            f"corpus {plan.corpus.name!r} yields no scorable tokens with {plan.policy} "
            f"(BOS: {plan.bos.rule}); documents may be too short"
        )
    return windows


def shard_windows(windows: list[Window], shard_tokens: int | None = None) -> list[list[Window]]:
    """Consecutive windows in shards of at least `shard_tokens` targets (the last may be smaller)."""
    shard_tokens = shard_tokens or SHARD_TOKENS
    shards: list[list[Window]] = [[]]
    count = 0
    for window in windows:
        if count >= shard_tokens:
            shards.append([])
            count = 0
        shards[-1].append(window)
        count += window.n_scored
    return shards


def count_problems(plan: Plan, manifest: dict) -> list[str]:
    """How the shard records of a (checked) manifest differ from what the plan's spec and corpus
    give: the number of shards and the rows of each follow from the corpus, the tokenizer and the
    window settings (which the key pins), so an entry missing its last shard, with n_tokens fixed
    to match, is caught here and nowhere in the store. Tokenizes the corpus (memoised)."""
    expected = [sum(w.n_scored for w in shard) for shard in plan.shards]
    found = [int(record["rows"]) for record in manifest["shards"]]
    if len(found) != len(expected):
        return [
            f"it has {len(found)} shards ({sum(found)} tokens) but its spec and corpus give {len(expected)} "
            f"({sum(expected)} tokens): shards are missing or extra"
        ]
    return [
        f"shard {index} has {rows} rows but its spec and corpus give {want}"
        for index, (rows, want) in enumerate(zip(found, expected, strict=True))
        if rows != want
    ]


@dataclass(frozen=True)
class ExtractResult:
    """One run's cache entry after extraction: its key, folder, scored tokens, whether it was a
    cache hit, its manifest, and (from `rbplab.extract`) the run's model and corpus labels; `layer`,
    the index of a layer before the last read through the logit lens (None: the final layer)."""

    key: str
    path: Path
    n_tokens: int
    from_cache: bool
    manifest: dict
    model: str = ""  # the run's label: the model, ``model@revision`` for a checkpoint
    corpus: str = ""  # the corpus's name
    layer: int | None = None


def cache_hit(entry: CacheEntry, plan: Plan | None = None) -> ExtractResult | None:
    """The result of a complete entry that passes every store check, whose shard files are all on
    disk at their recorded sizes, and which, given the `plan` it was keyed from, holds the shards
    and tokens the plan's corpus, tokenizer and window settings give (`hit_problems`); None
    otherwise. An entry that fails is reported with one warning and marked incomplete, so the
    caller recomputes what it lacks. A miscounted entry that cannot be marked (a read-only cache)
    is a CacheCorruptedError: it is never served as it is."""
    if not entry.is_complete():
        return None
    try:
        manifest = entry.manifest()
    except CacheCorruptedError as err:
        warnings.warn(str(err), RbplabWarning, stacklevel=3)
        return None
    problems = list(hit_problems(entry, plan, manifest).values())
    if problems:
        err = entry.damaged(problems[0])
        if entry.is_complete():
            raise err
        warnings.warn(f"{err}; recomputing the damaged shards now", RbplabWarning, stacklevel=3)
        return None
    return ExtractResult(entry.key, entry.path, int(manifest["n_tokens"]), True, manifest)


def hit_problems(entry: CacheEntry, plan: Plan | None, manifest: dict) -> dict[int | None, str]:
    """What keeps a complete entry with a checked `manifest` from being a hit, without marking or
    removing anything: {shard index: problem} for each listed shard file that is missing, not a
    regular file, not its recorded size or without an agreeing .sha256 record (stat calls and
    record reads), then {None: problem} for shard counts other than the `plan`'s (tokenizes the
    corpus, memoised; skipped where `Plan.counts_derivable` is false). Empty: a hit."""
    found: dict[int | None, str] = dict(entry.shard_file_problems(manifest))
    if plan is not None and plan.counts_derivable and not found:
        counts = count_problems(plan, manifest)
        if counts:
            found[None] = counts[0]
    return found


def entry_damage(entry: CacheEntry, plan: Plan | None) -> tuple[dict | None, dict[int | None, str]]:
    """(checked manifest, `hit_problems`) of a complete entry, read only: (None, {None: why}) when its
    manifest itself breaks a rule. Nothing is marked or removed (what `rbplab plan` shows)."""
    try:
        manifest = entry.load_manifest()
    except (OSError, ValueError) as err:  # UnsafeFileError is an OSError
        return None, {None: f"its manifest is unreadable ({err})"}
    problems = entry.manifest_problems(manifest)
    if problems:
        return None, {None: problems[0]}
    return manifest, hit_problems(entry, plan, manifest)
