"""What a study will cost before it runs: per (model, corpus) entry the cache state, the tokens left
to score, forward FLOPs, the memory one forward needs on the device and an estimated time.

Nothing here loads weights except the throughput probe: keys, token counts and sizes come from
configs, tokenizers and corpora (`plan_extraction`, `Plan.shards`), shapes from the architecture
instantiated on the meta device (`rbplab.catalog.sizes.meta_model`). The cache is only read: an
entry is called cached by the judgement `rbplab run` acts on (`rbplab.extraction.hits`), and a
damaged one is shown as such with the shards the run will recompute.

The cost model (FLOPs, memory) is `rbplab.runner.cost_model`; the time a FLOP takes here is
measured by `rbplab.runner.probe`. Each model's weights load once, in the probe's load time per
byte (0 with a given throughput), and a run's driver first plans every entry, which takes what
this plan took (it does the same work, timed).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog.corpora import Corpus, Document, LazyCorpus, open_corpus
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.extraction.hits import entry_damage
from rbplab.extraction.plan import Plan, plan_extraction
from rbplab.extraction.scoring import default_batch_tokens
from rbplab.grid import Grid, corpus_label
from rbplab.runner.cost_model import architecture, device_memory, plan_costs
from rbplab.runner.probe import DEFAULT_PROBE_SECONDS, Throughput, probe_throughput
from rbplab.runner.units import DEFAULT_SHARDS_PER_UNIT, accelerator_dtype
from rbplab.store.cache import CacheEntry
from rbplab.store.files import cache_root

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

    tokens_per_second: the throughput of the grid's cheapest model (fewest FLOPs per token) on the
    device the run uses; without it a probe scores `probe_tokens` of that model here (loading its
    weights: the only weights a plan reads) again and again for `probe_seconds` (longer on a busy
    machine). probe=False skips it: no times.
    workers: for the wall time at n workers (Ray tasks, SLURM array tasks, local processes).
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
        if accelerator and settings.dtype == "auto":
            if ref not in dtypes:
                dtypes[ref] = accelerator_dtype(ref)
            settings = settings.with_changes(dtype=dtypes[ref])
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
        rate = _throughput(rows, tokens_per_second, probe_tokens, probe_seconds, device)
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
        # The driver plans every entry before any unit runs (what this plan just did, timed).
        total_seconds = planning + float(table["seconds"].sum())
        wall = planning + makespan(unit_seconds, workers)
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
    )
    return CostPlan(table, totals)


def _run_device(device: str) -> str:
    from rbplab.extraction.placement import select_device

    return str(select_device(device))


def _entry_row(ref, corpus, unreachable, label, settings, root, device, described, shapes) -> _Row:
    values: dict[str, Any] = {
        "family": ref.family,
        "model": ref.model,
        "revision": ref.revision,
        "corpus": label,
        "note": "",
    }
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


def _throughput(
    rows: list[_Row],
    tokens_per_second: float | None,
    probe_tokens: int | None,
    probe_seconds: float,
    device: str,
) -> Throughput | None:
    """The throughput the times scale from: given for, or measured on, the cheapest model, on the
    corpus it has the most tokens to score of (the probe reads that corpus's first windows, and a
    corpus of short documents, HumanEval's, scores about half as fast per token as Wikipedia's: a
    probe on whichever corpus came first put the demo's estimate at 2.5x its time)."""
    candidates = [r for r in rows if r.plan is not None] or rows
    if not candidates:
        return None
    least = min(r.values["flops_per_token"] for r in candidates)
    cheapest = max(
        (r for r in candidates if r.values["flops_per_token"] == least),
        key=lambda r: r.values["tokens_to_score"],
    )
    per_token = float(cheapest.values["flops_per_token"])
    if tokens_per_second is not None:
        return Throughput(cheapest.values["model"], float(tokens_per_second), per_token, device, False)
    if cheapest.plan is None:
        return None  # nothing readable to probe with: the caller gives a throughput
    return probe_throughput(cheapest.plan, probe_tokens, probe_seconds)


def makespan(durations: Iterable[float], workers: int) -> float:
    """Wall time of independent jobs on `workers` workers, each job given to the worker free
    first, longest jobs first (how a pool or Ray drains a queue sorted by size)."""
    loads = [0.0] * workers
    for duration in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + duration)
    return max(loads)
