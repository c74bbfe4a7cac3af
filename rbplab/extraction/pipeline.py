"""Model x corpus -> cached per-token rank statistics.

`extract` builds a cache key from metadata only (weights fingerprint, tokenizer,
corpus content hash, window/BOS/vocabulary settings, dtype, budget), so a cache
hit loads no weights and runs no forward pass. Otherwise the scored windows are
split into deterministic shards (consecutive windows, ~SHARD_TOKENS targets each,
independent of batch size) and each finished shard is written atomically; a run
that is killed resumes from the shards already on disk.

Batch invariance (shards byte-identical for any batch_tokens). Two things change
rounding on CPU: the sequence length a window is padded to, and tiny row counts in
matrix products. So each window is padded to a length that depends on the window
alone (its length rounded up to a multiple of PAD_MULTIPLE, capped at the context
length), windows of equal padded length are batched together, padding goes on the
right with no attention mask (causal attention never looks right, so padding
cannot affect real positions and every batch takes the same code path), and the
output head never runs on fewer than 16 rows (rbplab.extraction.ranks). Measured on CPU: hidden
states of a window are then bit-identical at batch sizes 1, 4, 8 and 16, while padding
to a batch-dependent length with an attention mask changes them by ~1e-6 (nll by ~6e-7).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

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
from rbplab.core.stats import TokenStats
from rbplab.extraction.known_plans import remember
from rbplab.extraction.models import (
    Described,
    ModelSpec,
    as_spec,
    check_head,
    describe_model,
    input_device,
    load_weights,
)
from rbplab.extraction.precision import numerics_record, pinned_precision
from rbplab.extraction.ranks import FloatHead, NonFiniteLogitsError, rank_stats
from rbplab.extraction.windows import (
    PAD_MULTIPLE,
    BosDecision,
    Window,
    WindowPolicy,
    batch_arrays,
    batches,
    make_windows,
    resolve_bos,
    tokenize_documents,
)
from rbplab.grid import ModelRef
from rbplab.store import schedules
from rbplab.store.cache import CacheCorruptedError, CacheEntry, CacheError
from rbplab.store.corpora import Corpus, LazyCorpus, open_corpus
from rbplab.store.files import check_writable

SHARD_TOKENS = 1 << 16  # scored targets per shard (whole windows): resume granularity
DEFAULT_MAX_CONTEXT = 2048
WINDOW_SCHEME = 1  # bump when window or shard construction changes (part of the cache key)


class ContextLengthError(RbplabError, ValueError):
    """Requested context longer than the model's position limit."""


@dataclass(frozen=True)
class ExtractResult:
    key: str
    path: Path
    n_tokens: int
    from_cache: bool
    manifest: dict


@dataclass(frozen=True)
class Plan:
    """Everything an extraction is determined by, resolved from metadata (no weights)."""

    described: Described
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


def plan_extraction(
    model: ModelSpec | ModelRef | str,
    corpus: str | Path | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    described: dict | None = None,
    **overrides: Any,
) -> Plan:
    """Resolve every setting and the cache key from config, tokenizer and corpus only.
    `overrides` are `ExtractionSettings` fields (e.g. max_tokens=2000). `described` is a dict the
    caller keeps for one pass over a grid, so each model is described once, not once per corpus."""
    settings = resolve_settings(settings, **overrides)
    spec = as_spec(
        model,
        dtype=None if settings.dtype == "auto" else settings.dtype,
        device=None if settings.device == "auto" else settings.device,
        device_map=settings.device_map,
    )
    if described is None:
        described = {}
    if spec not in described:
        described[spec] = describe_model(spec)
    described = described[spec]
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
            name=described.source.label,
            fingerprint=info.fingerprint,
            revision=described.source.keyed_revision,
            gguf_file=info.gguf_file,
            dtype=info.dtype,
            trust_remote_code=spec.trust_remote_code,
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
    return Plan(described, corpus, policy, decision, vocab_size, settings, entry_spec)


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
        tokenize_documents(tokenizer, texts),
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


class Scorer:
    """Runs windows through a loaded model: base model forward, then chunked exact ranks."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, pad_id: int, softcap: float | None = None):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.softcap = softcap
        self.device = input_device(model)
        self.head = FloatHead.from_module(model.get_output_embeddings(), vocab_size)

    def score(self, length: int, group: list[Window]) -> tuple[torch.Tensor, ...]:
        """(n_greater, n_equal, nll) of every scored target of `group`, on the head's device."""
        ids, rows, targets = batch_arrays(group, length, self.pad_id)
        with torch.inference_mode(), pinned_precision():
            inputs = torch.from_numpy(ids).to(self.device)
            # use_cache=False: a scoring pass never decodes further, and the KV cache transformers
            # builds by default (config.use_cache) would hold every layer's keys and values.
            hidden = self.model.base_model(input_ids=inputs, use_cache=False).last_hidden_state
            row_index = torch.from_numpy(rows).to(hidden.device)
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, row_index)
            hidden = hidden.to(self.head.weight.device)
            try:
                return rank_stats(
                    hidden,
                    self.head,
                    torch.from_numpy(targets).to(hidden.device),
                    vocab_size=self.vocab_size,
                    softcap=self.softcap,
                )
            except NonFiniteLogitsError as err:
                raise err.located(scored_position(group, err.row)) from None


def scored_position(group: list[Window], row: int) -> str:
    """The document and token that row `row` of a batch of `group` scores (`batch_arrays` order)."""
    for window in group:
        if row < window.n_scored:
            return f"document {window.doc_index}, token {int(window.positions()[row])}"
        row -= window.n_scored
    raise IndexError(f"row {row} is beyond the batch's scored targets")


def default_batch_tokens(device: torch.device | str) -> int:
    """Padded tokens per forward when the settings leave it open: 16,384 on an accelerator (8
    windows of 2,048), 2,048 on a CPU (larger CPU batches measured slower, cache-bound)."""
    return 2_048 if torch.device(device).type == "cpu" else 16_384


def shard_frame(
    plan: Plan,
    scorer: Scorer,
    windows: list[Window],
    batch_tokens: int | None,
    on_tokens: Callable[[int], Any],
) -> pd.DataFrame:
    """Per-token rows of one shard, sorted by (doc_index, position); `on_tokens(n)` after each batch.
    `batch_tokens` None: `default_batch_tokens` of the scorer's device."""
    parts: list[tuple[list[Window], tuple[torch.Tensor, ...]]] = []
    budget = batch_tokens or default_batch_tokens(scorer.device)
    for length, group in batches(windows, budget, plan.policy.context_length):
        parts.append((group, scorer.score(length, group)))
        on_tokens(sum(w.n_scored for w in group))
    # One device-to-host transfer per shard, not per token.
    greater = torch.cat([p[1][0] for p in parts]).cpu().numpy()
    equal = torch.cat([p[1][1] for p in parts]).cpu()
    nll = torch.cat([p[1][2] for p in parts]).cpu().numpy()
    groups = [w for group, _ in parts for w in group]
    doc_index = np.concatenate([np.full(w.n_scored, w.doc_index, dtype=np.int32) for w in groups])
    documents = plan.corpus.documents
    frame = pd.DataFrame(
        {
            "doc_index": doc_index,
            "doc_id": [documents[i].id for i in doc_index],
            "position": np.concatenate([w.positions() for w in groups]).astype(np.int32),
            "target_id": np.concatenate([w.input_ids[w.target_rows()] for w in groups]).astype(np.int32),
            "n_greater": greater.astype(np.int32),
            "n_equal": equal.numpy().astype(np.int32),
            "nll": nll.astype(np.float32),
        }
    )
    return frame.sort_values(["doc_index", "position"], kind="stable").reset_index(drop=True)


def plan_shards(plan: Plan) -> list[list[Window]]:
    """The windows of every shard of the entry `plan` describes (tokenizes the corpus)."""
    return shard_windows(plan_windows(plan), plan.spec.windows.shard_tokens)


def count_problems(plan: Plan, manifest: dict) -> list[str]:
    """How the shard records of a (checked) manifest differ from what the plan's spec and corpus
    give: the number of shards and the rows of each follow from the corpus, the tokenizer and the
    window settings (which the key pins), so an entry missing its last shard, with n_tokens fixed
    to match, is caught here and nowhere in the store. Tokenizes the corpus (memoised)."""
    expected = [sum(w.n_scored for w in shard) for shard in plan_shards(plan)]
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


def make_scorer(plan: Plan, weights: torch.nn.Module | None = None) -> Scorer:
    """Load the weights (the expensive step a cache hit skips) unless given, check the head, wrap them."""
    info = plan.described.info
    if weights is None:
        weights = load_weights(plan.described)
        check_head(weights, info)
    tokenizer = plan.described.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else plan.bos.token_id or 0
    return Scorer(weights, plan.vocab_size, int(pad_id), info.softcap)


def producer_id() -> str:
    """Who wrote a shard (host:pid), recorded with it and collected into the manifest."""
    return f"{socket.gethostname()}:{os.getpid()}"


def entry_manifest(
    plan: Plan, shards: list[list[Window]], seconds: float, computed: int, resumed: int
) -> dict:
    """The extractor's part of an entry's manifest: model, corpus, settings, provenance."""
    info = plan.described.info
    # A model spread by a device map runs on GPUs; its info names the map, not a device.
    device = "cuda" if info.device.startswith("device_map:") else info.device
    manifest = {
        # the revision as keyed: a local model's final checkpoint named by step is the model itself
        "model": info.to_dict() | {"revision": plan.spec.model.revision},
        "corpus": {
            "name": plan.corpus.name,
            "content_hash": plan.corpus.content_hash(),
            "n_documents": len(plan.corpus),
            "n_documents_scored": len({w.doc_index for shard in shards for w in shard}),
            "source": plan.corpus.source,
        },
        "settings": {
            "context_length": plan.policy.context_length,
            "stride": plan.policy.stride,
            "bos": plan.policy.bos,
            "bos_decision": plan.bos.to_dict(),
            "include_padded_vocab": plan.include_padded_vocab,
            "max_tokens": plan.max_tokens,
            "dtype": info.dtype,
            "batch_tokens": plan.settings.batch_tokens or default_batch_tokens(device),
            "pad_multiple": PAD_MULTIPLE,
        },
        "vocab_size": plan.vocab_size,
        "provenance": {
            "device": info.device,
            "torch_threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(seconds, 3),
            "tokens_computed": computed,
            "tokens_per_second": round(computed / seconds, 1) if computed and seconds > 0 else None,
            "resumed_shards": resumed,
            # float32 precision pinned while scoring, and the GPU, CUDA and cuBLAS of the process
            # that finalised the entry (None on a CPU); never in the key, so CPU keys stay put
            "numerics": numerics_record(device),
        },
    }
    for path, value in plan.spec.manifest_fields().items():  # what the spec pins, from the spec
        target = manifest
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    training = training_position(plan)
    if training is not None:  # manifest only: cache keys of existing runs stay what they were
        manifest["training"] = training
    return manifest


def training_position(plan: Plan) -> dict | None:
    """Step, tokens seen D and compute C ~= 6 S D of the scored checkpoint, when its family's
    checkpoint schedule (rbplab.store.schedules) knows them; None otherwise."""
    info = plan.described.info
    # registry name, then what the user named (a local model directory holding checkpoints/)
    for name in dict.fromkeys((plan.spec.model.name, plan.described.spec.name_or_path)):
        try:
            found = schedules.training_position(name, info.revision, info.n_nonembedding)
        except (OSError, ValueError):
            continue
        if found is not None:
            return found
    return None


def _progress(total: int, initial: int, label: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="tok",
        unit_scale=True,
        desc=label,
        disable=not enabled,
        smoothing=0.1,
    )


def extract(
    model: ModelSpec | str,
    corpus: str | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    **overrides: Any,
) -> ExtractResult:
    """Rank statistics of every scored token of `corpus` under `model`, cached.

    model: a ModelSpec, registered name, hub id, local directory or .gguf file.
    corpus: a Corpus (or LazyCorpus) or anything rbplab.store.load_corpus accepts; a hub corpus at
    a commit is keyed by its identity, so a cache hit never reads the dataset.
    settings: how to score (`rbplab.core.ExtractionSettings`: context length, stride, BOS,
    max tokens, padded vocabulary, dtype, device, device map, batch size); `overrides` are its
    fields given as keywords, e.g. extract(model, corpus, max_tokens=2000).
    """
    plan = plan_extraction(model, corpus, settings, **overrides)
    result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
    remember(plan, cache_dir)  # the next analysis of this run finds its key without model code
    return result


def extract_plan(plan: Plan, *, cache_dir: str | Path | None = None, progress: bool = True) -> ExtractResult:
    """`extract` of an already made plan (`plan_extraction`)."""
    entry = CacheEntry(cache_dir, plan.key_spec)
    hit = cache_hit(entry, plan)  # a hit writes nothing, so a read-only cache serves it
    if hit is not None:
        return hit
    # A model that cannot be loaded fails here, before the entry directory exists (no litter).
    check_writable(entry.root)
    weights = load_weights(plan.described)
    check_head(weights, plan.described.info)
    with entry.lock():
        hit = cache_hit(entry, plan)  # another process finished it while we waited for the lock
        if hit is not None:
            return hit
        shards = plan_shards(plan)
        done = sound_shards(entry, shards)  # damaged and miscounted shards removed here
    todo = [i for i in range(len(shards)) if i not in done]
    total = sum(w.n_scored for shard in shards for w in shard)
    initial = sum(w.n_scored for i in done for w in shards[i])
    label = f"{plan.spec.model.name} x {plan.corpus.name}"
    try:
        with _progress(total, initial, label, progress) as bar:
            compute_shards(
                plan, entry, todo, shards=shards, scorer=make_scorer(plan, weights), on_tokens=bar.update
            )
    except BaseException:
        entry.discard_if_unstarted()  # failed before its first shard: no folder left behind
        raise
    hit = cache_hit(entry, plan)
    if hit is None:  # every shard was computed or waited for, so only a failed write gets here
        raise CacheError(f"cache entry {entry.key[:12]} is not complete after computing its shards")
    return ExtractResult(entry.key, entry.path, hit.n_tokens, False, hit.manifest)


@dataclass
class ShardWork:
    """What one call of `compute_shards` did: tokens and shards it computed (others were present
    or computed by another process), whether it finalised the entry, and where the time went."""

    tokens: int = 0
    shards: int = 0
    finalized: bool = False
    timings: dict[str, float] = field(default_factory=lambda: {"load": 0.0, "score": 0.0, "write": 0.0})


def compute_shards(
    plan: Plan,
    entry: CacheEntry,
    indices: Iterable[int],
    *,
    shards: list[list[Window]] | None = None,
    scorer: Scorer | None = None,
    on_tokens: Callable[[int], object] | None = None,
    load_scorer: Callable[[Plan], Scorer] | None = None,
) -> ShardWork:
    """The shard loop that `extract`, the runner's work units and the CLI share.

    Computes each shard of `indices` the entry lacks, each under a claim of its own so no two
    processes compute one shard (a shard another process holds is waited for, then checked), and
    finalises the entry when every shard exists, whoever computed them. Weights load at the first
    shard that needs computing (`load_scorer(plan)`, default `make_scorer`) unless `scorer` is
    given. `shards`: the plan's windows per shard (`plan_shards`, when the caller already has them).

    A finished shard is written by a writer thread while the next one is scored (at most one
    write in flight, so at most two shards' rows are held). Its claim is released only once its
    write has landed, and a failed write is raised here before the next shard is handed over."""
    started = time.perf_counter()
    shards = plan_shards(plan) if shards is None else shards
    work = ShardWork()
    report = on_tokens or (lambda _n: None)
    producer = producer_id()

    def score(index: int) -> pd.DataFrame | None:
        nonlocal scorer
        if entry.has_shard(index):
            report(sum(w.n_scored for w in shards[index]))
            return None
        if scorer is None:
            clock = time.perf_counter()
            scorer = (load_scorer or make_scorer)(plan)
            work.timings["load"] += time.perf_counter() - clock
        clock = time.perf_counter()
        try:
            frame = shard_frame(plan, scorer, shards[index], plan.settings.batch_tokens, report)
        except NonFiniteLogitsError as err:
            raise err.located(f"shard {index}") from None
        work.timings["score"] += time.perf_counter() - clock
        return frame

    def write(index: int, frame: pd.DataFrame) -> None:  # on the writer thread
        clock = time.perf_counter()
        with entry.lock():
            entry.write_shard(index, frame, producer=producer)
        work.timings["write"] += time.perf_counter() - clock
        work.tokens += len(frame)
        work.shards += 1
        _crash_hook()

    with ThreadPoolExecutor(1, thread_name_prefix="rbplab-shard-writer") as writer:
        in_flight: list[tuple[Future, contextlib.ExitStack]] = []

        def land() -> None:
            # Wait for the write in flight (if any), then release its claim; its error is raised.
            while in_flight:
                future, claim = in_flight.pop()
                try:
                    future.result()
                finally:
                    claim.close()

        def run(index: int, wait: bool) -> bool:
            claim = contextlib.ExitStack()
            try:
                if not claim.enter_context(entry.shard_claim(index, wait=wait)):
                    claim.close()
                    return False
                if in_flight and in_flight[0][0].done():
                    land()  # a failed write stops the loop before more is scored
                frame = score(index)
                land()
            except BaseException:
                claim.close()
                raise
            if frame is None:
                claim.close()
            else:
                in_flight.append((writer.submit(write, index, frame), claim))
            return True

        try:
            held_elsewhere = [index for index in indices if not run(index, wait=False)]
            for index in held_elsewhere:  # another process is on it: wait, then make sure it landed
                run(index, wait=True)
        finally:
            land()
    clock = time.perf_counter()
    with entry.lock():
        # the planned count: a shard that vanished since cannot shorten the entry
        if not entry.is_complete() and set(range(len(shards))) <= entry.completed_shards():
            manifest = entry_manifest(plan, shards, clock - started, work.tokens, len(shards) - work.shards)
            entry.finalize(manifest, len(shards))
            work.finalized = True
    work.timings["write"] += time.perf_counter() - clock
    return work


# Test hook: a process exits hard right after writing its first shard if this names a file that
# does not exist yet (the file is created first, so the retry runs normally).
CRASH_HOOK_ENV = "RBPLAB_TEST_CRASH_AFTER_FIRST_SHARD"


def _crash_hook() -> None:
    marker = os.environ.get(CRASH_HOOK_ENV)
    if marker and not os.path.exists(marker):
        Path(marker).write_text("crashed once\n")
        os._exit(3)


def counts_derivable(plan: Plan) -> bool:
    """Whether the shard and token counts of `plan`'s entry can be derived without reading a
    dataset: always, except for a hub corpus whose documents have not been read (`LazyCorpus`),
    which a cache hit is keyed by and never reads (`rbplab cache verify` derives its counts)."""
    return not isinstance(plan.corpus, LazyCorpus) or plan.corpus.loaded


def cache_hit(entry: CacheEntry, plan: Plan | None = None) -> ExtractResult | None:
    """The result of a complete entry that passes every store check and, given the `plan` it was
    keyed from, holds the shards and tokens the plan's corpus, tokenizer and window settings give
    (`count_problems`; tokenizes the corpus, memoised; skipped where `counts_derivable` is false);
    None otherwise. An entry that fails is reported with one warning and marked incomplete, so the
    caller recomputes what it lacks. A miscounted entry that cannot be marked (a read-only cache)
    is a CacheCorruptedError: it is never served as it is."""
    if not entry.is_complete():
        return None
    try:
        manifest = entry.manifest()
    except CacheCorruptedError as err:
        warnings.warn(str(err), stacklevel=3)
        return None
    problems = count_problems(plan, manifest) if plan is not None and counts_derivable(plan) else []
    if problems:
        err = entry.damaged(problems[0])
        if entry.is_complete():
            raise err
        warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=3)
        return None
    return ExtractResult(entry.key, entry.path, int(manifest["n_tokens"]), True, manifest)


def sound_shards(entry: CacheEntry, shards: list[list[Window]]) -> set[int]:
    """Indices of the shards the entry holds that pass every store check and hold the rows shard
    `shards[i]` gives; every other shard (damaged, beyond the plan, or of another size, as in an
    entry whose counts were found wrong) is removed, so the shard loop recomputes it and the
    manifest it writes counts what the plan gives. Hold `entry.lock()`."""
    done = entry.completed_shards()  # damaged shards are removed here
    wrong = {
        index
        for index in done
        if index >= len(shards) or entry.recorded_rows(index) != sum(w.n_scored for w in shards[index])
    }
    for index in sorted(wrong):
        entry.remove_shard(index)
    return done - wrong


def load_stats(
    model: ModelSpec | str,
    corpus: str | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    **overrides: Any,
) -> TokenStats:
    """TokenStats of (model, corpus): extract (a cache hit runs no forward pass), then read the cache.

    A shard that fails its checksum on reading is reported, recomputed, and the entry read again.
    """
    return load_run(model, corpus, settings, cache_dir=cache_dir, progress=progress, **overrides)[0]


def load_run(
    model: ModelSpec | str,
    corpus: str | Corpus | LazyCorpus,
    settings: ExtractionSettings | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    **overrides: Any,
) -> tuple[TokenStats, dict]:
    """`load_stats` and the entry's manifest (e.g. its ``training`` block: step, D, C).

    The number of shards and the rows of each are derived from the corpus (`count_problems`),
    never taken from the manifest: an entry that holds fewer (or more) is treated as damaged."""
    plan = plan_extraction(model, corpus, resolve_settings(settings, **overrides))
    for attempt in (1, 2):
        result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
        remember(plan, cache_dir)
        entry = CacheEntry(cache_dir, plan.key_spec)
        try:
            problems = count_problems(plan, result.manifest)
            if problems:
                raise entry.damaged(problems[0])
            return entry.read_stats(), result.manifest
        except CacheCorruptedError as err:
            if attempt == 2:
                raise
            warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=3)
    raise AssertionError("unreachable")
