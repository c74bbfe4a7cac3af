"""Running one work unit: score its shards into the shared cache, finalise the entry if complete.

Any number of workers, on any machines that see the cache directory, may run units of the same
entry at once. Each shard is claimed with a lock of its own before it is computed, so no two
workers compute it; the shard is computed outside the entry lock and only written under it (a
few milliseconds), so workers of one entry do not wait for each other. The worker that finds
every shard present finalises the entry (under the entry lock; idempotent), and the manifest
records which host:pid produced each shard. A worker that dies mid-unit leaves whole shards or
nothing: the retry, or the next run, computes what is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rbplab.extraction.pipeline import (
    Plan,
    entry_manifest,
    make_scorer,
    plan_extraction,
    plan_shards,
    producer_id,
    shard_frame,
)
from rbplab.extraction.sources import ModelSpec
from rbplab.runner.units import WorkUnit
from rbplab.store.cache import CacheEntry

# Test hook: a worker exits hard right after writing its first shard if this names a file that
# does not exist yet (the file is created first, so the retry runs normally).
CRASH_HOOK_ENV = "RBPLAB_TEST_CRASH_AFTER_FIRST_SHARD"


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


def run_unit(
    unit: WorkUnit, cache_dir: str | Path, on_tokens: Callable[[int], object] | None = None
) -> UnitResult:
    """Compute the missing shards of `unit` and finalise its entry when every shard exists."""
    started = time.perf_counter()
    _quiet_transformers()
    timings = {"plan": 0.0, "load": 0.0, "score": 0.0, "write": 0.0}
    producer = producer_id()
    plan = plan_extraction(ModelSpec(unit.source, revision=unit.revision), unit.corpus, unit.settings)
    entry = CacheEntry(cache_dir, plan.key_spec)
    if entry.key != unit.key:
        raise RuntimeError(
            f"{unit.name}: the driver planned cache key {unit.key[:12]} but this worker computes "
            f"{entry.key[:12]}: the model or corpus differs between machines (same files everywhere?)"
        )
    if entry.is_complete():
        return UnitResult(unit.key, unit.shards, 0, time.perf_counter() - started, producer, False)
    shards = plan_shards(plan)
    timings["plan"] = time.perf_counter() - started
    scorer = None
    computed = computed_shards = 0
    report = on_tokens or (lambda _n: None)

    def compute(index: int) -> None:
        nonlocal scorer, computed, computed_shards
        if entry.has_shard(index):
            report(sum(w.n_scored for w in shards[index]))
            return
        if scorer is None:
            clock = time.perf_counter()
            scorer = make_scorer(plan)
            timings["load"] += time.perf_counter() - clock
        clock = time.perf_counter()
        frame = shard_frame(plan, scorer, shards[index], plan.settings.batch_size, report)
        timings["score"] += time.perf_counter() - clock
        clock = time.perf_counter()
        with entry.lock():
            entry.write_shard(index, frame, producer=producer)
        timings["write"] += time.perf_counter() - clock
        computed += len(frame)
        computed_shards += 1
        _crash_hook()

    held_elsewhere = []
    for index in unit.shards:
        with entry.shard_claim(index, wait=False) as mine:
            if mine:
                compute(index)
            else:
                held_elsewhere.append(index)
    for index in held_elsewhere:  # another worker is on it: wait, then make sure it landed
        with entry.shard_claim(index, wait=True):
            compute(index)
    clock = time.perf_counter()
    finalized = finalize_if_complete(entry, plan, shards, clock - started, computed, computed_shards)
    timings["write"] += time.perf_counter() - clock
    seconds = time.perf_counter() - started
    return UnitResult(unit.key, unit.shards, computed, seconds, producer, finalized, timings)


def finalize_if_complete(
    entry: CacheEntry, plan: Plan, shards: list, seconds: float, computed: int, computed_shards: int
) -> bool:
    """Write the manifest when every shard of the entry exists; True if this call wrote it."""
    with entry.lock():
        if entry.is_complete():
            return False
        done = entry.completed_shards()
        if not set(range(len(shards))) <= done:
            return False
        # the planned count: a shard that vanished since the check above cannot shorten the entry
        manifest = entry_manifest(plan, shards, seconds, computed, len(shards) - computed_shards)
        entry.finalize(manifest, len(shards))
        return True


def _quiet_transformers() -> None:
    # The run's own bar is the progress report; transformers' per-load weight bar would break it up.
    from transformers.utils import logging

    logging.disable_progress_bar()


def _crash_hook() -> None:
    marker = os.environ.get(CRASH_HOOK_ENV)
    if marker and not os.path.exists(marker):
        Path(marker).write_text("crashed once\n")
        os._exit(3)
