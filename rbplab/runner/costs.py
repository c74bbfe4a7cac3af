"""What a grid will cost before it runs (`rbplab plan`): tokens, FLOPs, memory and time of every
(checkpoint, corpus) entry, from the cost model (`rbplab.runner.cost_model`) and a throughput
probe measured in the workers' own setup (`rbplab.runner.probe`), and the totals: the work left,
the largest memory need, and the time at one worker and at n (units scheduled longest first).
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog import registry
from rbplab.catalog.corpora import Corpus, Document, LazyCorpus, open_corpus
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.extraction.plan import (
    DEFAULT_MAX_CONTEXT,
    SHARD_TOKENS,
    Plan,
    entry_damage,
    plan_extraction,
)
from rbplab.extraction.scoring import default_batch_tokens
from rbplab.grid import Grid, corpus_label
from rbplab.runner.cost_model import (
    Architecture,
    architecture,
    device_memory,
    flops_per_token,
    memory_needed,
    plan_costs,
    run_head,
)
from rbplab.runner.executors import worker_threads
from rbplab.runner.probe import DEFAULT_PROBE_SECONDS, Throughput, probe_throughput
from rbplab.runner.units import (
    DEFAULT_SHARDS_PER_UNIT,
    accelerator_dtype,
    accelerator_settings,
)
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.files import cache_root
from rbplab.store.hub import HubUnreachableError

COLUMNS = [
    "family",
    "model",
    "revision",
    "corpus",
    "key",
    "state",
    "tokens",
    "tokens_to_score",
    "tokens_exact",
    "S",
    "d",
    "vocab",
    "flops_per_token",
    "flops",
    "dtype",
    "weight_bytes",
    "activation_bytes",
    "head_chunk_bytes",
    "memory_bytes",
    "device_bytes",
    "fits",
    "seconds",
    "note",
    "sized_from",  # "config", or "families.csv" for a registered model whose config is not here
]


@dataclass(frozen=True)
class CostTotals:
    entries: int
    cached: int
    partial: int
    missing: int
    damaged: int  # complete entries a run will repair (a shard file missing or of another size, ...)
    unknown: int  # the cache state could not be known (a hub corpus not reachable offline)
    tokens_to_score: int
    tokens_exact: bool  # False: some counts are max_tokens upper bounds
    flops: float
    seconds: float | None  # one worker, every entry in turn
    workers: int
    wall_seconds: float | None  # at `workers` workers (units scheduled longest first)
    memory_bytes: int  # the largest need of any entry
    device: str
    device_bytes: int | None
    fits: bool | None  # None: the device is not on this machine
    throughput: Throughput | None
    planning_seconds: float  # what the driver of a run does first: configs, tokenizers, corpora
    unreachable: dict[str, str]  # corpus -> why it could not be opened or read here
    # registered models whose config is not here (offline, not cached), sized from families.csv
    registry_sized: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostPlan:
    table: pd.DataFrame  # one row per entry, COLUMNS
    totals: CostTotals


@dataclass
class _Row:
    plan: Plan | None
    values: dict
    shard_tokens: list[int]  # tokens of the shards left to score


def _open(corpus: Any) -> tuple[Corpus | LazyCorpus | None, str | None]:
    """The opened corpus, or (None, why) for a hub corpus this machine cannot resolve."""
    if isinstance(corpus, (Corpus, LazyCorpus)):
        return corpus, None
    try:
        return open_corpus(corpus), None
    except (RbplabError, OSError) as err:
        if not str(corpus).startswith("hub:"):
            raise
        return None, " ".join(str(err).split())  # no hub and no local copy of the dataset


def _shard_sizes(plan: Plan) -> tuple[list[int] | None, str | None]:
    try:
        return [sum(w.n_scored for w in shard) for shard in plan.shards], None
    except (RbplabError, OSError) as err:
        if isinstance(plan.corpus, LazyCorpus):  # its documents could not be read
            return None, " ".join(str(err).split())
        raise


def estimate_costs(
    grid: Grid,
    cache_dir: str | Path | None = None,
    *,
    tokens_per_second: float | None = None,
    probe_tokens: int | None = None,
    probe_seconds: float = DEFAULT_PROBE_SECONDS,
    workers: int = 1,
    shards_per_unit: int = DEFAULT_SHARDS_PER_UNIT,
    accelerator: bool = False,
    probe: bool = True,
) -> CostPlan:
    """The cost of every (checkpoint, corpus) entry of `grid`, and totals.

    tokens_per_second: the throughput of one worker scoring the grid's cheapest model (fewest
    FLOPs per token) on the device the run uses; without it a probe measures one model here
    (`_probed_model`; loading its weights: the only weights a plan reads) in the configuration of
    the run's workers (their
    torch threads, and as many processes scoring at once as `rbplab run --workers` starts), scoring
    batches drawn from `probe_tokens` of its corpus (default: one shard) for `probe_seconds`
    (longer on a busy machine). probe=False skips it: no times.
    workers: for the wall time at n workers (local processes, Ray tasks, SLURM array tasks), and
    the setup the probe measures in.
    accelerator: plan the dtype a GPU worker resolves "auto" to (as `rbplab run --executor ray`)."""
    if not isinstance(workers, int) or workers < 1:
        raise InvalidArgumentError(f"workers must be a positive integer, got {workers!r}")
    if tokens_per_second is not None and not (tokens_per_second > 0 and math.isfinite(tokens_per_second)):
        raise InvalidArgumentError(f"tokens per second must be a positive number, got {tokens_per_second}")
    if probe_tokens is not None and probe_tokens < 1:
        raise InvalidArgumentError(f"probe tokens must be a positive integer, got {probe_tokens}")
    if not (probe_seconds >= 0 and math.isfinite(probe_seconds)):
        raise InvalidArgumentError(f"probe seconds must be a number >= 0, got {probe_seconds}")
    root = cache_root(cache_dir)
    # GPU workers (accelerator) run on CUDA whatever this driver has.
    device = "cuda" if accelerator else _run_device(grid.settings.device)
    started = time.perf_counter()
    corpora = [(_open(corpus), corpus_label(corpus)) for corpus in grid.corpora]
    described: dict = {}
    shapes: dict = {}
    dtypes: dict = {}
    rows: list[_Row] = []
    for ref in grid.checkpoints():
        settings = grid.settings
        if accelerator:
            if settings.dtype == "auto" and ref not in dtypes:
                try:
                    dtypes[ref] = accelerator_dtype(ref)
                except HubUnreachableError:
                    dtypes[ref] = "auto"  # no config here: the registry sizes it (`_registry_row`)
            settings = accelerator_settings(settings, dtypes.get(ref, settings.dtype))
        for (corpus, unreachable), label in corpora:
            rows.append(
                _entry_row(ref, corpus, unreachable, label, settings, root, device, described, shapes)
            )
    planning = time.perf_counter() - started
    device_name, device_bytes = device_memory(device)
    for row in rows:
        row.values["device_bytes"] = device_bytes
        row.values["fits"] = None if device_bytes is None else row.values["memory_bytes"] <= device_bytes
    rate = None
    work = any(r.values["tokens_to_score"] for r in rows)
    # A probe measures this machine's device: useless for GPU workers when this machine has none.
    here = device_bytes is not None
    if tokens_per_second is not None or (probe and work and here):
        setup = _worker_setup(rows, workers, shards_per_unit, device)
        rate = _throughput(rows, tokens_per_second, probe_tokens, probe_seconds, device, *setup)
    # Each model's weights load once (a worker keeps them for the model's next unit): the load is
    # counted on the first unit of the model that has work, scaled from the probe's by bytes.
    unit_seconds: list[float] = []
    loaded: set = set()
    for row in rows:
        if rate is None:
            row.values["seconds"] = None if work else 0.0
            continue
        per_second = rate.flops_per_second
        row.values["seconds"] = row.values["flops"] / per_second
        model = (row.values["model"], row.values["revision"])
        for i in range(0, len(row.shard_tokens), shards_per_unit):
            seconds = (
                sum(row.shard_tokens[i : i + shards_per_unit]) * row.values["flops_per_token"] / per_second
            )
            if model not in loaded:
                loaded.add(model)
                load = rate.load_seconds_per_byte * row.values["weight_bytes"]
                row.values["seconds"] += load
                seconds += load
            unit_seconds.append(seconds)
    problems = {r.values["corpus"]: r.values["problem"] for r in rows if "problem" in r.values}
    table = pd.DataFrame([r.values for r in rows], columns=COLUMNS)
    states = table["state"].value_counts()
    total_seconds = wall = None
    if rate is not None or not work:
        # The driver plans every entry before any unit runs (what this plan just did, timed), then
        # starts its worker processes (what the probe's took to be ready to load weights).
        start = planning + (rate.startup_seconds if rate is not None else 0.0)
        total_seconds = start + float(table["seconds"].sum())
        wall = start + makespan(unit_seconds, workers)
    totals = CostTotals(
        entries=len(table),
        cached=int(states.get("cached", 0)),
        partial=int(states.get("partial", 0)),
        missing=int(states.get("missing", 0)),
        damaged=int(states.get("damaged", 0)),
        unknown=int(states.get("unknown", 0)),
        tokens_to_score=int(table["tokens_to_score"].sum()),
        tokens_exact=bool(table["tokens_exact"].all()),
        flops=float(table["flops"].sum()),
        seconds=total_seconds,
        workers=workers,
        wall_seconds=wall,
        memory_bytes=int(table["memory_bytes"].max()) if len(table) else 0,
        device=device_name,
        device_bytes=device_bytes,
        fits=None if device_bytes is None else bool(table["fits"].all()),
        throughput=rate,
        planning_seconds=planning,
        unreachable={label: why for (_, why), label in corpora if why} | problems,
        registry_sized=tuple(dict.fromkeys(table.loc[table["sized_from"] == "families.csv", "model"])),
    )
    return CostPlan(table, totals)


def _run_device(device: str) -> str:
    from rbplab.extraction.sources import select_device

    return str(select_device(device))


def _entry_row(ref, corpus, unreachable, label, settings, root, device, described, shapes) -> _Row:
    values: dict[str, Any] = {
        "family": ref.family,
        "model": ref.model,
        "revision": ref.revision,
        "corpus": label,
        "note": "",
        "sized_from": "config",
    }
    if ("registry", ref) in shapes:  # its config was out of reach for an earlier corpus
        return _registry_row(ref, shapes[("registry", ref)], values, settings, device, corpus is None)
    try:
        return _planned_row(ref, corpus, label, settings, root, device, described, shapes, values)
    except HubUnreachableError:
        row = registry.lookup_model(ref.keyed_name) if ref.registered else None
        if row is None or not all(c in row.index and pd.notna(row[c]) for c in SHAPE_COLUMNS):
            raise
        shapes[("registry", ref)] = row
        return _registry_row(ref, row, values, settings, device, corpus is None)


# The registry's columns beyond S and the vocabulary that the cost model needs (`Architecture`);
# scripts/build_registry.py writes them from each model's config.
SHAPE_COLUMNS = ("n_params", "S", "d", "hidden", "widest", "heads", "head_rows", "vocab_size")


def _registry_row(ref, row: pd.Series, values: dict, settings, device: str, no_corpus: bool) -> _Row:
    """The entry of a registered model whose config and tokenizer are out of reach here (offline,
    with nothing of it cached), sized from families.csv: FLOPs and memory are exact, as the registry
    holds the shapes they need; the key, the cache state and the token count (max_tokens, a bound)
    are not known."""
    budget = settings.max_tokens
    if budget is None:
        raise InvalidArgumentError(
            f"{ref.label}: neither its config nor its tokenizer is here (offline?), so its token count is "
            "unknown; give max_tokens (an upper bound) or run once with hub access"
        )
    arch = Architecture(*(int(row[c]) for c in ("n_params", "S", "d", "hidden", "widest", "heads")))
    head_rows = int(row["head_rows"])
    vocab = head_rows if settings.include_padded_vocab else int(row["vocab_size"])
    # "auto" is float32 on a CPU; on a GPU it is the config's half type, which is not here:
    # float32 bounds the memory from above.
    dtype = "float32" if settings.dtype == "auto" else settings.dtype
    limit = None if pd.isna(row["max_context"]) else int(row["max_context"])
    context = settings.context_length or min(limit or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)
    batch = settings.batch_tokens or default_batch_tokens(device)
    weights, activations, head_chunk = memory_needed(
        arch,
        dtype=dtype,
        vocab=vocab,
        head_rows=head_rows,
        batch_tokens=batch,
        context_length=context,
        device=device,
        head=run_head(settings.head, device, dtype),
    )
    step = settings.shard_tokens or SHARD_TOKENS
    sizes = [min(step, budget - start) for start in range(0, budget, step)]
    per_token = flops_per_token(arch.S, arch.d, vocab)
    values.update(
        key=None,
        state="unknown",
        note=("corpus not reachable here; " if no_corpus else "")
        + "sized from families.csv (config not here); tokens: the max_tokens bound",
        sized_from="families.csv",
        tokens=budget,
        tokens_to_score=budget,
        tokens_exact=False,
        S=arch.S,
        d=arch.d,
        vocab=vocab,
        flops_per_token=per_token,
        flops=float(per_token) * budget,
        dtype=dtype,
        weight_bytes=weights,
        activation_bytes=activations,
        head_chunk_bytes=head_chunk,
        memory_bytes=weights + activations + head_chunk,
        seconds=None,
    )
    return _Row(None, values, sizes)


def _planned_row(ref, corpus, label, settings, root, device, described, shapes, values) -> _Row:
    """The entry planned from the model's config and tokenizer (`plan_extraction`)."""
    if corpus is None:
        # The key holds the corpus commit: without the dataset neither key nor count is known. The
        # model's side of the plan (sizes, vocabulary, context, dtype) needs no corpus.
        stand_in = Corpus(label, (Document("stand-in", "stand-in"),), {"origin": "stand-in"})
        plan = plan_extraction(ref, stand_in, settings, described=described)
        info = plan.described.info
        values.update(key=None, state="unknown", note="corpus not reachable here")
        sizes = None
        done: set[int] = set()
    else:
        plan = plan_extraction(ref, corpus, settings, described=described)
        info = plan.described.info
        entry = CacheEntry(root, plan.key_spec)
        values["key"] = entry.key
        # the judgement `rbplab run` acts on (`cache_hit`), made here without marking anything
        manifest, damage = entry_damage(entry, plan) if entry.is_complete() else (None, {})
        if manifest is not None and not damage:
            sizes = [int(record["rows"]) for record in manifest["shards"]]
            done = set(range(len(sizes)))
            values["state"] = "cached"
        else:
            sizes, problem = _shard_sizes(plan)
            done = set()
            if sizes is not None:
                done = _kept_shards(entry, sizes)
                values["state"] = "damaged" if damage else ("partial" if done else "missing")
            else:
                values["state"] = "damaged" if damage else "missing"
                values["note"] = "corpus not readable here"
                values["problem"] = problem
            if damage:
                said = [f"damaged: {next(iter(damage.values()))}"]
                if sizes is not None:
                    said.append(f"run recomputes {_shard_list(set(range(len(sizes))) - done)}")
                values["note"] = "; ".join(part for part in [*said, values["note"]] if part)
    exact = sizes is not None
    if sizes is None:
        budget = settings.max_tokens
        if budget is None:
            raise InvalidArgumentError(
                f"{ref.label} x {label}: the corpus cannot be read here, so its token count is unknown; "
                "give max_tokens (an upper bound) or make the corpus reachable"
            )
        step = plan.spec.windows.shard_tokens
        sizes = [min(step, budget - start) for start in range(0, budget, step)]
        values["note"] += "; tokens: the max_tokens bound"
    left = [n for i, n in enumerate(sizes) if i not in done]
    model = plan.described.model
    if model not in shapes:
        shapes[model] = architecture(plan.described.config)
    arch = shapes[model]
    budget = settings.batch_tokens or default_batch_tokens(device)
    per_token, (weights, activations, head_chunk) = plan_costs(plan, arch, batch_tokens=budget, device=device)
    values.update(
        tokens=sum(sizes),
        tokens_to_score=sum(left),
        tokens_exact=exact,
        S=info.n_nonembedding,
        d=arch.d,
        vocab=plan.vocab_size,
        flops_per_token=per_token,
        flops=float(per_token) * sum(left),
        dtype=info.dtype,
        weight_bytes=weights,
        activation_bytes=activations,
        head_chunk_bytes=head_chunk,
        memory_bytes=weights + activations + head_chunk,
        seconds=None,
    )
    values["note"] = values["note"].lstrip("; ")
    return _Row(plan if exact else None, values, left)


def _kept_shards(entry: CacheEntry, sizes: list[int]) -> set[int]:
    """The shards on disk a run keeps (`sound_shards`): each matches its checksum (read and hashed:
    only for entries that are not complete or are damaged) and holds the rows the plan gives."""
    if not entry.path.is_dir():
        return set()
    return {i for i, rows in enumerate(sizes) if entry.has_shard(i) and entry.recorded_rows(i) == rows}


def _shard_list(indices: Iterable[int], shown: int = 8) -> str:
    ordered = sorted(indices)
    if not ordered:
        return "no shard"
    listed = ", ".join(str(i) for i in ordered[:shown]) + (", ..." if len(ordered) > shown else "")
    return f"shard{'s' if len(ordered) > 1 else ''} {listed}"


def _worker_setup(
    rows: list[_Row], workers: int, shards_per_unit: int, device: str
) -> tuple[int, int | None]:
    """(processes scoring at once, torch threads of each; None: this process's count) of the run
    the plan predicts, as `run_study` sets it up: one unit of work, or one worker, runs in the
    driver (`run_local`, its own threads); more run in `workers` processes sharing the CPUs
    (`run_processes`), of which as many as there are units score at once. A GPU worker has a GPU
    of its own, so one probe here measures it; CPU workers compete, and are probed together (at
    most one per CPU: more would measure this machine overloaded, not the run's workers)."""
    units = sum(math.ceil(len(r.shard_tokens) / shards_per_unit) for r in rows)
    if workers == 1 or units < 2:
        return 1, None
    if device != "cpu":
        return 1, worker_threads(workers)
    return max(1, min(workers, units, os.cpu_count() or 1)), worker_threads(workers)


def _throughput(
    rows: list[_Row],
    tokens_per_second: float | None,
    probe_tokens: int | None,
    probe_seconds: float,
    device: str,
    processes: int,
    threads: int | None,
) -> Throughput | None:
    """The throughput the times scale from: given for the cheapest model, or measured on the model
    `_probed_model` picks, on the corpus it has the most tokens to score of (the probe reads that
    corpus's first windows, and a corpus of short documents, HumanEval's, scores about half as fast
    per token as Wikipedia's: a probe on whichever corpus came first put the demo's estimate at 2.5x
    its time)."""
    candidates = [r for r in rows if r.plan is not None] or rows
    if not candidates:
        return None
    if tokens_per_second is not None:
        least = min(r.values["flops_per_token"] for r in candidates)
        cheapest = next(r for r in candidates if r.values["flops_per_token"] == least)
        per_token = float(cheapest.values["flops_per_token"])
        return Throughput(cheapest.values["model"], float(tokens_per_second), per_token, device, False)
    probed = _probed_model(candidates, device)
    row = max(probed, key=lambda r: r.values["tokens_to_score"])
    if row.plan is None:
        return None  # nothing readable to probe with: the caller gives a throughput
    return probe_throughput(row.plan, probe_tokens, probe_seconds, processes=processes, threads=threads)


# The most FLOPs one batch of the probed model may take (one batch of the run's size): a few
# seconds on one CPU thread, a fraction of a second on a GPU.
PROBE_BATCH_FLOPS = {"cpu": 2e10}
PROBE_BATCH_FLOPS_ACCELERATOR = 2e13


def _probed_model(candidates: list[_Row], device: str) -> list[_Row]:
    """The rows of the model the probe scores: of the models whose batch stays within
    PROBE_BATCH_FLOPS, the one with the most FLOPs to score (the cheapest model when none is).
    A tiny model's time is mostly the cost of each call, not its FLOPs, so its FLOP rate understates
    a larger model's: the micro-suite's smallest put the demo's largest at half its speed, and
    the largest carries most of the demo's work."""
    by_model: dict[tuple, list[_Row]] = {}
    for r in candidates:
        by_model.setdefault((r.values["model"], r.values["revision"]), []).append(r)
    per_token = {m: float(rs[0].values["flops_per_token"]) for m, rs in by_model.items()}
    cheapest = min(by_model, key=lambda m: per_token[m])
    limit = PROBE_BATCH_FLOPS.get(device.split(":")[0], PROBE_BATCH_FLOPS_ACCELERATOR)
    planned = {m: next((r.plan for r in rs if r.plan is not None), None) for m, rs in by_model.items()}
    affordable = [
        m
        for m, plan in planned.items()
        if plan is not None
        and per_token[m] * (plan.settings.batch_tokens or default_batch_tokens(device)) <= limit
    ]
    if not affordable:
        return by_model[cheapest]
    work = {m: sum(r.values["flops"] for r in by_model[m]) for m in affordable}
    return by_model[max(affordable, key=lambda m: (work[m], -per_token[m]))]


def makespan(durations: Iterable[float], workers: int) -> float:
    """Wall time of independent jobs on `workers` workers, each job given to the worker free
    first, longest jobs first (how a pool or Ray drains a queue sorted by size)."""
    loads = [0.0] * workers
    for duration in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + duration)
    return max(loads)
