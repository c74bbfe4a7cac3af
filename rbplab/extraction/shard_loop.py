"""The one shard loop (`compute_shards`) that `extract`, the runner's work units and the CLI share.

Shards are claimed one at a time so no two processes compute one; each finished shard is written
atomically by a writer thread while the next is scored, and the entry is finalised (its manifest,
`rbplab.extraction.manifests`) when every shard exists, whoever computed them. `sound_shards` says
which shards on disk can be kept before the loop starts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rbplab.extraction.manifests import entry_manifest
from rbplab.extraction.plan import Plan
from rbplab.extraction.ranks import NonFiniteLogitsError
from rbplab.extraction.scoring import Scorer, shard_frame
from rbplab.extraction.windows import Window
from rbplab.store.cache.entry import CacheEntry


def producer_id() -> str:
    """Who wrote a shard (host:pid), recorded with it and collected into the manifest."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
    get_scorer: Callable[[Plan], Scorer],
    on_tokens: Callable[[int], object] | None = None,
) -> ShardWork:
    """The shard loop that `extract`, the runner's work units and the CLI share.

    Computes each shard of `indices` the entry lacks, each under a claim of its own so no two
    processes compute one shard (a shard another process holds is waited for, then checked), and
    finalises the entry when every shard exists, whoever computed them. `get_scorer(plan)` is asked
    for the scorer at the first shard that needs computing (a worker loads weights only then).

    A finished shard is written by a writer thread while the next one is scored (at most one
    write in flight, so at most two shards' rows are held). Its claim is released only once its
    write has landed, and a failed write is raised here before the next shard is handed over.

    A local model's weight files are checked after each shard is scored and before the manifest
    is written (`check_weights`): a shard scored while they changed is not written, and the
    entry is not finalised (WeightsChangedError)."""
    started = time.perf_counter()
    shards = plan.shards
    work = ShardWork()
    report = on_tokens or (lambda _n: None)
    producer = producer_id()

    scorer: Scorer | None = None

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
        # a model may read its weights from the file while it scores (a memory map): a shard is
        # kept only if the files were not written while it was scored
        check_weights(plan, f"while shard {index} was scored")
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
            if scorer is not None:  # this process scored: its model still has the keyed weights
                check_weights(plan, "before the entry's manifest was written")
            manifest = entry_manifest(plan, shards, clock - started, work.tokens, len(shards) - work.shards)
            entry.finalize(manifest, len(shards))
            work.finalized = True
    work.timings["write"] += time.perf_counter() - clock
    return work


def check_weights(plan: Plan, when: str) -> None:
    """WeightsChangedError unless a local model's weight files still hold the bytes the plan's key
    names (stat calls; a file whose stat changed is hashed again)."""
    if plan.described.weights is not None:
        plan.described.weights.check(when)


# Test hook: a process exits hard right after writing its first shard if this names a file that
# does not exist yet (the file is created first, so the retry runs normally).
CRASH_HOOK_ENV = "RBPLAB_TEST_CRASH_AFTER_FIRST_SHARD"


def _crash_hook() -> None:
    marker = os.environ.get(CRASH_HOOK_ENV)
    if marker and not os.path.exists(marker):
        Path(marker).write_text("crashed once\n")
        os._exit(3)


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
