"""What a study will cost before it runs: per (model, corpus) entry the cache state, the tokens left
to score, forward FLOPs, the memory one forward needs on the device and an estimated time.

Nothing here loads weights except the throughput probe: keys, token counts and sizes come from
configs, tokenizers and corpora (`plan_extraction`, `Plan.shards`), shapes from the architecture
instantiated on the meta device (`rbplab.catalog.sizes.meta_model`). The cache is only read.

The cost model, per scored token of a model with S non-embedding parameters whose output head
maps d hidden units to the |V| ranked rows:

- forward FLOPs: 2*S (the body's matrix products) + 2*d*|V| (the head). Attention's own
  products (2 * layers * context * d per token) and padded positions are left out, as in the
  usual 2*N estimate.
- memory on the device: the weights in the run's dtype (+ the float32 copy of the head that
  ranking uses when the run's dtype is not float32 or the head is padded), the activations of one
  batch of `batch_tokens` padded tokens (hidden states and the widest projection of a layer,
  plus the attention matrix of every head as an eager implementation holds it: an upper bound
  where fused kernels do not materialise it), and the head's chunk of float32 logits with its
  work block and the batch's final hidden states in float32 (`rbplab.extraction.ranks`).
- time: FLOPs divided by a FLOP rate, measured by scoring a few hundred tokens of the cheapest
  model of the grid on this machine's device, over and over for a few seconds (or from a
  throughput the caller gives for that model); every other model's time scales with its FLOPs
  per token. Each model's weights load
  once, in the probe's load time per byte (0 with a given throughput), and a run's driver first
  plans every entry, which takes what this plan took (it does the same work, timed).
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
from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import Plan, plan_extraction
from rbplab.extraction.ranks import block_rows, default_chunk_size
from rbplab.extraction.scoring import batches, default_batch_tokens
from rbplab.grid import Grid, corpus_label
from rbplab.runner.units import BYTES_PER_PARAM, DEFAULT_SHARDS_PER_UNIT, accelerator_dtype
from rbplab.store.cache import CacheEntry
from rbplab.store.files import cache_root

DEFAULT_PROBE_SECONDS = 3.0  # the least time the probe scores for (after one untimed batch)
FLOAT32_BYTES = 4

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
class Architecture:
    """The shapes the cost model needs, read from a meta-device instance of the config."""

    n_params: int
    S: int
    d: int  # hidden units the head reads (OPT-350m: its word_embed_proj_dim)
    hidden: int  # the body's hidden size
    widest: int  # the widest projection of a layer (the MLP's inner size, or a fused QKV)
    heads: int


@dataclass(frozen=True)
class Throughput:
    """Scored tokens per second of one model on one device, and the FLOP rate it implies."""

    model: str
    tokens_per_second: float
    flops_per_token: float
    device: str
    measured: bool  # False: given by the caller
    tokens: int = 0  # scored by the probe
    seconds: float = 0.0
    load_seconds_per_byte: float = 0.0  # loading the probed model's weights (0: not measured)

    @property
    def flops_per_second(self) -> float:
        return self.tokens_per_second * self.flops_per_token


@dataclass(frozen=True)
class CostTotals:
    entries: int
    cached: int
    partial: int
    missing: int
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


def architecture(config: Any) -> Architecture:
    """Shapes of `config`'s causal LM from a meta-device instance (no weights, no memory)."""
    import torch

    from rbplab.catalog.sizes import meta_model, parameter_counts

    model = meta_model(config)
    counts = parameter_counts(model)
    head = model.get_output_embeddings()
    d = int(head.weight.shape[1])
    embedding_ids = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters(False)
    }
    widths = [
        max(p.shape)
        for p in model.base_model.parameters()
        if p.ndim == 2 and id(p) not in embedding_ids and p is not head.weight
    ]
    cfg = model.config
    hidden = int(getattr(cfg, "hidden_size", None) or d)
    heads = int(getattr(cfg, "num_attention_heads", None) or 1)
    return Architecture(
        counts.n_params, counts.n_nonembedding, d, hidden, int(max(widths, default=hidden)), heads
    )


def flops_per_token(S: int, d: int, vocab: int) -> int:
    """Forward FLOPs of one scored token: the body's 2*S and the head's 2*d*|V|."""
    return 2 * S + 2 * d * vocab


def memory_needed(
    arch: Architecture,
    *,
    dtype: str,
    vocab: int,
    head_rows: int,
    batch_tokens: int,
    context_length: int,
    device: str,
) -> tuple[int, int, int]:
    """(weights, activations of one batch, head chunk) in bytes on `device` (see the module doc)."""
    size = BYTES_PER_PARAM[dtype]
    weights = arch.n_params * size
    if dtype != "float32" or vocab != head_rows:  # FloatHead copies the head's ranked rows
        weights += vocab * arch.d * FLOAT32_BYTES
    length = min(batch_tokens, context_length)
    windows = max(1, batch_tokens // length)
    tokens = windows * length
    activations = tokens * (2 * arch.hidden + arch.widest) * size
    activations += windows * arch.heads * length * length * size
    rows = default_chunk_size(vocab, device)
    block = min(rows, block_rows(vocab, device))
    head_chunk = FLOAT32_BYTES * (vocab * (rows + block) + rows * arch.d + tokens * arch.d)
    return weights, activations, head_chunk


def device_memory(device: str) -> tuple[str, int | None]:
    """(description, bytes) of what `device` holds: a GPU's memory, this machine's RAM for a CPU,
    None for a GPU this machine does not have (a cluster's)."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        if not torch.cuda.is_available():
            return "the workers' GPUs (none here)", None
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        return f"cuda:{index} {props.name}", int(props.total_memory)
    import psutil

    return f"{kind} (RAM)", int(psutil.virtual_memory().total)


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
        if entry.is_complete():
            sizes = [int(record["rows"]) for record in entry.manifest()["shards"]]
            done = set(range(len(sizes)))
            values["state"] = "cached"
        else:
            sizes, problem = _shard_sizes(plan)
            done = set()
            if sizes is not None:
                done = {i for i in range(len(sizes)) if entry.path.is_dir() and entry.has_shard(i)}
                values["state"] = "partial" if done else "missing"
            else:
                values["state"] = "missing"
                values["note"] = "corpus not readable here"
                values["problem"] = problem
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
    per_token = flops_per_token(info.n_nonembedding, arch.d, plan.vocab_size)
    weights, activations, head_chunk = memory_needed(
        arch,
        dtype=info.dtype,
        vocab=plan.vocab_size,
        head_rows=info.head_rows,
        batch_tokens=settings.batch_tokens or default_batch_tokens(device),
        context_length=plan.policy.context_length,
        device=device,
    )
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


def probe_throughput(
    plan: Plan, tokens: int | None = None, min_seconds: float = DEFAULT_PROBE_SECONDS
) -> Throughput:
    """Score the first `tokens` targets of `plan`'s corpus (default: one batch of the run's
    budget, `batch_tokens`) with its model (weights loaded) the way a run batches them, after one
    untimed batch (first-call costs: allocation, kernel selection), again and again until
    `min_seconds` have gone by. A probe smaller than a batch measures smaller batches than the run
    scores: 512 tokens put the demo's estimate at 1.7x its time, one CPU batch (2,048) at 1.25x."""
    from transformers.utils import logging

    from rbplab.extraction.plan import plan_windows

    logging.disable_progress_bar()  # the plan's table is the output; no weight-loading bar
    loading = time.perf_counter()
    scorer = load_scorer(plan)
    loading = time.perf_counter() - loading
    budget = plan.settings.batch_tokens or default_batch_tokens(scorer.device)
    windows, scored = [], 0
    for window in plan_windows(plan):
        if scored >= (tokens or budget):
            break
        windows.append(window)
        scored += window.n_scored
    groups = list(batches(windows, budget, plan.policy.context_length))
    scorer.score(*groups[0])
    # Passes over the same windows until `min_seconds` have gone by: on a machine shared with other
    # jobs one short pass can be several times off, and a longer window averages that out.
    passes, seconds = 0, 0.0
    while passes == 0 or seconds < min_seconds:
        _synchronize(scorer.device)
        started = time.perf_counter()
        for length, group in groups:
            scorer.score(length, group)
        _synchronize(scorer.device)
        seconds += time.perf_counter() - started
        passes += 1
    scored *= passes
    info = plan.described.info
    arch = architecture(plan.described.config)
    per_token = flops_per_token(info.n_nonembedding, arch.d, plan.vocab_size)
    weights, _, _ = memory_needed(
        arch,
        dtype=info.dtype,
        vocab=plan.vocab_size,
        head_rows=info.head_rows,
        batch_tokens=budget,
        context_length=plan.policy.context_length,
        device=str(scorer.device),
    )
    return Throughput(
        plan.described.model.keyed_name,
        scored / seconds,
        float(per_token),
        str(scorer.device),
        True,
        scored,
        seconds,
        loading / weights,
    )


def _synchronize(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def makespan(durations: Iterable[float], workers: int) -> float:
    """Wall time of independent jobs on `workers` workers, each job given to the worker free
    first, longest jobs first (how a pool or Ray drains a queue sorted by size)."""
    loads = [0.0] * workers
    for duration in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + duration)
    return max(loads)
