"""Running one work unit: score its shards into the shared cache, finalise the entry if complete.

Any number of workers, on any machines that see the cache directory, may run units of the same
entry at once. Each shard is claimed with a lock of its own before it is computed, so no two
workers compute it; the shard is computed outside the entry lock and only written under it (a
few milliseconds), so workers of one entry do not wait for each other. The worker that finds
every shard present finalises the entry (under the entry lock; idempotent), and the manifest
records which host:pid produced each shard. A worker that dies mid-unit leaves whole shards or
nothing: the retry, or the next run, computes what is missing.

A worker process keeps the last model it loaded (`loaded_scorer`): the next unit of the same model
(same weights fingerprint, unchanged weight files, dtype, device and head) reuses it instead of
loading the weights and running the load check again. Corpora are tokenised once per process
(`plan_windows` memoises them).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rbplab.core.errors import RunFailedError
from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import Plan, plan_extraction
from rbplab.extraction.scoring import Scorer
from rbplab.extraction.shard_loop import CRASH_HOOK_ENV, compute_shards, producer_id
from rbplab.runner.units import WorkUnit
from rbplab.store.cache.entry import CacheEntry

__all__ = ["CRASH_HOOK_ENV", "UnitResult", "run_unit"]


@dataclass(frozen=True)
class UnitResult:
    key: str
    shards: tuple[int, ...]
    tokens_computed: int
    seconds: float
    producer: str
    finalized: bool
    # Where the time went: planning (config, tokenizer, tokenizing the corpus), loading weights,
    # scoring (forward pass and ranks), writing shards and the manifest.
    timings: dict[str, float] = field(default_factory=dict)
    # CUDA_VISIBLE_DEVICES of the worker process (None: not set), i.e. which GPU it was given
    visible_devices: str | None = None


# The model this process last loaded, and what identifies it (see `loaded_scorer`).
_LOADED: dict[tuple, Scorer] = {}


def loaded_scorer(plan: Plan) -> Scorer:
    """The scorer of `plan`'s model, reused when this process loaded the same model last (the same
    weights fingerprint and dtype, which the plan derived afresh from the files, the same stat of
    each local weight file, the same load options, output rows and pad id); otherwise the previous
    model is freed first, so a worker holds one model at a time (GPU memory), and the new one is
    loaded and checked."""
    identity = (
        plan.spec.model,
        plan.described.weights,  # a local model's files as hashed: kept only while they are unchanged
        plan.described.model,
        plan.described.info.device,
        plan.spec.tokenizer,
        plan.vocab_size,
        plan.bos.token_id,
    )
    if identity not in _LOADED:
        release_models()
        _LOADED[identity] = load_scorer(plan)
    return _LOADED[identity]


def release_models() -> None:
    """Drop the model this process keeps (and give its GPU memory back to the driver)."""
    if not _LOADED:
        return
    _LOADED.clear()
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_unit(
    unit: WorkUnit, cache_dir: str | Path, on_tokens: Callable[[int], object] | None = None
) -> UnitResult:
    """Compute the missing shards of `unit` and finalise its entry when every shard exists."""
    started = time.perf_counter()
    _quiet_transformers()
    producer = producer_id()
    plan = plan_extraction(unit.ref, unit.corpus, unit.settings)
    entry = CacheEntry(cache_dir, plan.key_spec)
    if entry.key != unit.key:
        raise RunFailedError(
            f"{unit.name}: the driver planned cache key {unit.key[:12]} but this worker computes "
            f"{entry.key[:12]}: the model or corpus differs between machines (same files everywhere?) or "
            "changed since the run was planned (run it again to plan it anew)"
        )
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    if entry.is_complete():
        seconds = time.perf_counter() - started
        return UnitResult(unit.key, unit.shards, 0, seconds, producer, False, visible_devices=devices)
    _ = plan.shards  # tokenises the corpus (once per process: memoised), timed as planning
    planned = time.perf_counter() - started
    work = compute_shards(plan, entry, unit.shards, on_tokens=on_tokens, get_scorer=loaded_scorer)
    seconds = time.perf_counter() - started
    timings = {"plan": planned, **work.timings}
    return UnitResult(unit.key, unit.shards, work.tokens, seconds, producer, work.finalized, timings, devices)


def _quiet_transformers() -> None:
    # The run's own bar is the progress report; transformers' per-load weight bar would break it up.
    from transformers.utils import logging

    logging.disable_progress_bar()
