"""How fast this machine scores: a model's tokens per second measured on its own device, the way
the run's workers will score it, and the FLOP rate that implies (`rbplab.runner.cost_model`), from
which every other model's time scales.

The probe runs in the workers' configuration: their torch thread count, and, for local worker
processes, as many processes scoring at once. A probe in the driver with torch's default threads
measured what no worker sees: with one core kept busy by another job it measured 23,411 tok/s of a
tiny model where a single-threaded worker scored 75,421, and several processes competing put the
demo's estimate at 12,036 s for an extraction that took 649 s. Each probe scores batches drawn from
the first shard of the corpus, as the run batches a shard, after one untimed batch, again and again
until `min_seconds` have gone by; it is the one step of planning costs that loads weights.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from rbplab.core.errors import RunFailedError
from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import SHARD_TOKENS, Plan, plan_extraction, plan_windows
from rbplab.extraction.scoring import batches, default_batch_tokens
from rbplab.runner.cost_model import architecture, plan_costs
from rbplab.runner.executors import exit_with_parent

DEFAULT_PROBE_SECONDS = 3.0  # the least time the probe scores for (after one untimed batch)
PROBE_START_TIMEOUT = 600.0  # seconds the probe's processes may take to start and load the model


@dataclass(frozen=True)
class Throughput:
    """Scored tokens per second of one worker on one device (each of `processes` workers scoring
    at once, with `threads` torch threads), and the FLOP rate it implies."""

    model: str
    tokens_per_second: float  # of one worker
    flops_per_token: float
    device: str
    measured: bool  # False: given by the caller
    tokens: int = 0  # scored by the probe (all its processes)
    seconds: float = 0.0  # the probe's timed scoring (the longest of its processes)
    load_seconds_per_byte: float = 0.0  # loading the probed model's weights (0: not measured)
    threads: int | None = None  # torch threads of each probed worker (None: not measured)
    processes: int = 1  # workers probed at once (1: in this process, as the local executor runs)
    # A worker process's start before it loads weights: interpreter, imports, planning and
    # tokenizing its corpus (0: the probe ran in this process, as a run's only worker does)
    startup_seconds: float = 0.0

    @property
    def flops_per_second(self) -> float:
        return self.tokens_per_second * self.flops_per_token


def probe_throughput(
    plan: Plan,
    tokens: int | None = None,
    min_seconds: float = DEFAULT_PROBE_SECONDS,
    *,
    processes: int = 1,
    threads: int | None = None,
) -> Throughput:
    """Score `plan`'s corpus with its model the way `processes` workers of `threads` torch threads
    each score it (None: this process's count, which a run in this process uses). One process is
    probed here; more are started as the local executor starts its workers (spawned, each with its
    own thread count), wait for each other, and score at the same time, so they compete for the
    machine as the run's workers will. Each scores batches of the run's size drawn from the first
    `tokens` targets of the corpus (default: its first shard, `SHARD_TOKENS`), one untimed batch
    first, until `min_seconds` have gone by (at least one timed batch)."""
    if processes > 1:
        return _probe_processes(plan, tokens, min_seconds, processes, threads)
    with _torch_threads(threads):
        return _probe_here(plan, tokens, min_seconds)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _probe_here(plan: Plan, tokens: int | None, min_seconds: float, barrier: Any = None) -> Throughput:
    import torch

    loading = time.perf_counter()
    scorer = load_scorer(plan)
    loading = time.perf_counter() - loading
    budget = plan.settings.batch_tokens or default_batch_tokens(scorer.device)
    windows, drawn = [], 0
    for window in plan_windows(plan):
        if drawn >= (tokens or SHARD_TOKENS):
            break
        windows.append(window)
        drawn += window.n_scored
    groups = list(batches(windows, budget, plan.policy.context_length))
    # Batches come sorted by padded length; a time-bounded probe taking them in that order would
    # measure only the shortest windows of a large model. A fixed shuffle mixes lengths as a shard has.
    random.Random(0).shuffle(groups)
    scorer.score(*groups[0])  # first-call costs: allocation, kernel selection
    if barrier is not None:
        barrier.wait(PROBE_START_TIMEOUT)  # every process scores at once, as the workers will
    scored, seconds, i = 0, 0.0, 0
    while i == 0 or seconds < min_seconds:
        length, group = groups[i % len(groups)]
        _synchronize(scorer.device)
        started = time.perf_counter()
        scorer.score(length, group)
        _synchronize(scorer.device)
        seconds += time.perf_counter() - started
        scored += sum(w.n_scored for w in group)
        i += 1
    arch = architecture(plan.described.config)
    per_token, (weights, _, _) = plan_costs(plan, arch, batch_tokens=budget, device=str(scorer.device))
    return Throughput(
        plan.described.model.keyed_name,
        scored / seconds,
        float(per_token),
        str(scorer.device),
        True,
        scored,
        seconds,
        loading / weights,
        torch.get_num_threads(),
    )


def _probe_worker(
    plan_args: tuple,
    tokens: int | None,
    min_seconds: float,
    threads: int | None,
    barrier,
    results,
    parent: int,
    launched: float,
) -> None:
    """One probe process: set up as `executors.run_processes` sets up a worker, plan and tokenize
    as a worker does before it loads weights (`run_unit`), then probe; the result, or a one-line
    error, goes to `results`. `launched`: when the driver started the processes (time.time())."""
    from threading import BrokenBarrierError

    try:
        exit_with_parent(parent)
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        plan = plan_extraction(*plan_args)
        plan_windows(plan)  # the corpus tokenized, as `run_unit` does first (memoised for the probe)
        startup = time.time() - launched
        rate = _probe_here(plan, tokens, min_seconds, barrier)
        results.put(replace(rate, startup_seconds=startup))
    except BrokenBarrierError:
        results.put("another probe process failed")
    except BaseException as err:  # noqa: BLE001 - reported by the driver in one line
        barrier.abort()  # the others are not left waiting for this one
        results.put(f"{type(err).__name__}: {' '.join(str(err).split())}")


def _probe_processes(
    plan: Plan, tokens: int | None, min_seconds: float, processes: int, threads: int | None
) -> Throughput:
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # as run_processes starts its workers
    barrier, results = context.Barrier(processes), context.Queue()
    plan_args = (plan.described.model, plan.corpus, plan.settings)
    launched = time.time()  # compared with the processes' clocks: the same machine's wall time
    started = [
        context.Process(
            target=_probe_worker,
            args=(plan_args, tokens, min_seconds, threads, barrier, results, os.getpid(), launched),
            daemon=True,
        )
        for _ in range(processes)
    ]
    for process in started:
        process.start()
    outcomes: list[Throughput | str] = []
    try:
        deadline = time.monotonic() + PROBE_START_TIMEOUT + 10 * max(min_seconds, 1.0)
        while len(outcomes) < processes:
            try:
                outcomes.append(results.get(timeout=1.0))
            except queue.Empty:
                if time.monotonic() > deadline or not any(p.is_alive() for p in started):
                    break
    finally:
        for process in started:
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()
    measured = [o for o in outcomes if isinstance(o, Throughput)]
    if len(measured) < processes:
        errors = [o for o in outcomes if isinstance(o, str) and o != "another probe process failed"]
        why = errors[0] if errors else "a probe process ended without a result"
        raise RunFailedError(f"the throughput probe of {plan.described.model.label} failed: {why}")
    return replace(
        measured[0],
        tokens_per_second=statistics.fmean(m.tokens_per_second for m in measured),
        tokens=sum(m.tokens for m in measured),
        seconds=max(m.seconds for m in measured),
        load_seconds_per_byte=statistics.fmean(m.load_seconds_per_byte for m in measured),
        processes=processes,
        startup_seconds=max(m.startup_seconds for m in measured),  # the last to be ready
    )


def _synchronize(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)
