"""Model x corpus -> the plan of one cache entry, from metadata only (no weights).

`plan_extraction` builds an entry's key from the weights fingerprint, tokenizer, corpus content
hash, window/BOS/vocabulary settings, dtype and budget, so a cache hit loads no weights and runs
no forward pass. The scored windows are split into deterministic shards (consecutive windows,
~SHARD_TOKENS targets each, independent of batch size): the resume granularity, and what
`count_problems` checks an entry's shard records against.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rbplab.catalog.corpora.corpus import Corpus, LazyCorpus
from rbplab.catalog.corpora.loading import open_corpus
from rbplab.catalog.models import ModelSpec, ResolvedModel
from rbplab.core.entry_spec import (
    BosIdentity,
    CorpusIdentity,
    EntrySpec,
    ModelIdentity,
    VocabIdentity,
    WindowIdentity,
)
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.extraction.bos import BosDecision, resolve_bos
from rbplab.extraction.known_plans import record_plan
from rbplab.extraction.models import ModelDescription, describe_model
from rbplab.extraction.ranks import check_fused_head
from rbplab.extraction.windows import Window, WindowPolicy, make_windows, tokenize_documents

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

    @property
    def key_spec(self) -> dict:
        """The spec as JSON (what `CacheEntry` and `cache_key` take)."""
        return self.spec.to_json()

    @property
    def max_tokens(self) -> int | None:
        return self.settings.max_tokens

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
        head=settings.head,
    )
    if settings.head == "fused":  # refused before anything is written, not when the weights load
        check_fused_head(info.device)
    return Plan(described, corpus, policy, decision, vocab_size, settings, entry_spec)


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
