"""A plan -> its cache entry: `extract`, the one shard loop, and the entry's manifest.

A cache hit (`cache_hit`: a complete entry holding the shards and tokens the plan gives) loads no
weights and runs no forward pass. Otherwise the plan's shards (`rbplab.extraction.plan`) are
scored (`rbplab.extraction.scoring`) and each finished shard is written atomically; a run that is
killed resumes from the shards already on disk.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rbplab.catalog import schedules
from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.catalog.models import ModelSpec
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.known_plans import record_plan
from rbplab.extraction.plan import Plan, count_problems, plan_extraction
from rbplab.extraction.precision import numerics_record
from rbplab.extraction.ranks import NonFiniteLogitsError
from rbplab.extraction.scoring import PAD_MULTIPLE, Scorer, default_batch_tokens, make_scorer, shard_frame
from rbplab.extraction.weights import load_weights
from rbplab.extraction.windows import Window
from rbplab.store.cache import CacheCorruptedError, CacheEntry, CacheError
from rbplab.store.files import check_writable


@dataclass(frozen=True)
class ExtractResult:
    key: str
    path: Path
    n_tokens: int
    from_cache: bool
    manifest: dict


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
    """Step, tokens seen D and compute C ~= 6 S D of the scored checkpoint, when its checkpoint
    schedule (`rbplab.catalog.schedules`: its family's, or its folder's) knows them; None otherwise."""
    model, info = plan.described.model, plan.described.info
    try:
        schedule = model.schedule
    except (OSError, ValueError):
        return None
    return schedules.position(schedule, info.revision, info.n_nonembedding)


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
    corpus: a Corpus (or LazyCorpus) or anything rbplab.catalog.load_corpus accepts; a hub corpus at
    a commit is keyed by its identity, so a cache hit never reads the dataset.
    settings: how to score (`rbplab.core.ExtractionSettings`: context length, stride, BOS,
    max tokens, padded vocabulary, dtype, device, device map, batch size); `overrides` are its
    fields given as keywords, e.g. extract(model, corpus, max_tokens=2000).
    """
    plan = plan_extraction(model, corpus, settings, **overrides)
    result = extract_plan(plan, cache_dir=cache_dir, progress=progress)
    record_plan(plan, cache_dir)  # the next analysis of this run finds its key without model code
    return result


def extract_plan(plan: Plan, *, cache_dir: str | Path | None = None, progress: bool = True) -> ExtractResult:
    """`extract` of an already made plan (`plan_extraction`); writes nothing outside the entry
    (`repair` relies on that), so callers that keep plan records write them (`record_plan`)."""
    entry = CacheEntry(cache_dir, plan.key_spec)
    hit = cache_hit(entry, plan)  # a hit writes nothing, so a read-only cache serves it
    return hit if hit is not None else _compute(plan, entry, progress)


def load_scorer(plan: Plan) -> Scorer:
    """The plan's model with its weights loaded and its head checked: the expensive step a cache
    hit skips."""
    return make_scorer(plan, load_weights(plan.described))


def _compute(plan: Plan, entry: CacheEntry, progress: bool) -> ExtractResult:
    """Compute the shards `entry` lacks, resuming from those on disk, and finalise it."""
    # A model that cannot be loaded fails here, before the entry directory exists (no litter).
    check_writable(entry.root)
    scorer = load_scorer(plan)
    with entry.lock():
        hit = cache_hit(entry, plan)  # another process finished it while we waited for the lock
        if hit is not None:
            return hit
        done = sound_shards(entry, plan.shards)  # damaged and miscounted shards removed here
    shards = plan.shards
    todo = [i for i in range(len(shards)) if i not in done]
    total = sum(w.n_scored for shard in shards for w in shard)
    initial = sum(w.n_scored for i in done for w in shards[i])
    label = f"{plan.spec.model.name} x {plan.corpus.name}"
    try:
        with _progress(total, initial, label, progress) as bar:
            compute_shards(plan, entry, todo, scorer=scorer, on_tokens=bar.update)
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
    scorer: Scorer | None = None,
    on_tokens: Callable[[int], object] | None = None,
    get_scorer: Callable[[Plan], Scorer] = load_scorer,
) -> ShardWork:
    """The shard loop that `extract`, the runner's work units and the CLI share.

    Computes each shard of `indices` the entry lacks, each under a claim of its own so no two
    processes compute one shard (a shard another process holds is waited for, then checked), and
    finalises the entry when every shard exists, whoever computed them. Weights load at the first
    shard that needs computing (`get_scorer(plan)`, default `load_scorer`) unless `scorer` is
    given.

    A finished shard is written by a writer thread while the next one is scored (at most one
    write in flight, so at most two shards' rows are held). Its claim is released only once its
    write has landed, and a failed write is raised here before the next shard is handed over."""
    started = time.perf_counter()
    shards = plan.shards
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
            scorer = get_scorer(plan)
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


def cache_hit(entry: CacheEntry, plan: Plan | None = None) -> ExtractResult | None:
    """The result of a complete entry that passes every store check and, given the `plan` it was
    keyed from, holds the shards and tokens the plan's corpus, tokenizer and window settings give
    (`count_problems`; tokenizes the corpus, memoised; skipped where `Plan.counts_derivable` is false);
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
    derivable = plan is not None and plan.counts_derivable
    problems = count_problems(plan, manifest) if derivable else []
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
