"""Work units, (model, revision, corpus, shard range), and computing one into the shared cache.

Running one work unit: score its shards into the shared cache, finalise the entry if complete.

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

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.catalog.models import ResolvedModel
from rbplab.core.errors import InvalidArgumentError, RunFailedError
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.fingerprints import record_plan
from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import Plan, cache_hit, plan_extraction
from rbplab.extraction.scoring import Scorer, compute_shards, producer_id, sound_shards
from rbplab.grid import Grid
from rbplab.store.cache.entry import CacheEntry

DEFAULT_SHARDS_PER_UNIT = 4


@dataclass(frozen=True)
class EntryPlan:
    """One (model, revision, corpus) cache entry of the study."""

    key: str
    family: str
    model: str
    revision: str | None
    corpus: str
    S: float | None
    n_shards: int
    n_tokens: int
    cached: bool  # complete in the cache when planned


@dataclass(frozen=True)
class WorkUnit:
    """Shards `shards` of one entry; everything a worker needs besides the shared cache path."""

    key: str
    ref: ResolvedModel  # the model at its revision, resolved once by the grid
    corpus: Corpus | LazyCorpus
    settings: ExtractionSettings
    shards: tuple[int, ...]
    n_tokens: int
    weight_bytes: int = 0  # the model's weights in the dtype it runs in (GPU placement)

    @property
    def model(self) -> str:
        return self.ref.model

    @property
    def revision(self) -> str | None:
        return self.ref.revision

    @property
    def label(self) -> str:
        return self.ref.label

    @property
    def name(self) -> str:
        return f"{self.label} x {self.corpus.name} shards {self.shards[0]}-{self.shards[-1]}"


@dataclass(frozen=True)
class StudyPlan:
    entries: tuple[EntryPlan, ...]
    units: tuple[WorkUnit, ...]

    def pending(self, units: tuple[WorkUnit, ...] | None = None) -> tuple[WorkUnit, ...]:
        """The units (of `units`, default all) whose entry was not complete when planned."""
        cached = {e.key for e in self.entries if e.cached}
        return tuple(u for u in (self.units if units is None else units) if u.key not in cached)


def plan_study(
    study: Grid,
    cache_dir: str | Path,
    shards_per_unit: int = DEFAULT_SHARDS_PER_UNIT,
    accelerator: bool = False,
) -> StudyPlan:
    """Every entry and work unit of the grid `study` (units of entries already complete are
    skipped when run). A complete entry counts as complete only when it holds the shards and
    tokens its corpus and tokenizer give (`rbplab.extraction.plan.cache_hit`, which tokenizes
    each corpus once per tokenizer); one that does not is reported and recomputed.

    accelerator: the units will run on GPUs while this driver may have none. The dtype "auto"
    resolves to the checkpoint's own half type on a GPU and to float32 on a CPU, and it is part of
    the key, so the driver plans each model with the dtype a GPU worker will use
    (`accelerator_settings`). The head is not in the key: each worker resolves "auto" on its own
    device, and the driver never checks a head it will not run."""
    if shards_per_unit < 1:
        raise InvalidArgumentError(f"shards_per_unit must be a positive integer, got {shards_per_unit}")
    if study.settings.layers is not None:
        # work units are one entry each, and a layer's entry shares its forward passes with its run's
        raise InvalidArgumentError(
            "layers other than the final one are extracted in one process for now (rbplab extract, or "
            "rbplab.extract); leave 'layers' out of a study run by workers, Ray or SLURM"
        )
    entries: list[EntryPlan] = []
    units: list[WorkUnit] = []
    described: dict = {}  # each model described once for the whole grid
    dtypes: dict = {}
    for run in study.runs():
        ref = run.model
        settings = study.settings
        if accelerator:
            if settings.dtype == "auto" and ref not in dtypes:
                dtypes[ref] = accelerator_dtype(ref)
            settings = accelerator_settings(settings, dtypes.get(ref, settings.dtype))
        plan = plan_extraction(ref, run.corpus, settings, described=described)
        entry = CacheEntry(cache_dir, plan.key_spec)
        # A complete entry counts as done only with the shards and tokens its corpus gives: one
        # missing its last shard is reported, marked incomplete and cut into units like any other.
        hit = cache_hit(entry, plan)
        record_plan(plan, cache_dir)  # after the hit check, which derives the rows per shard it keeps
        cached = hit is not None
        if cached and not plan.counts_derivable:  # a hub corpus is not read for a cached entry
            sizes = [int(record["rows"]) for record in hit.manifest["shards"]]
        else:
            shards = plan.shards
            sizes = [sum(w.n_scored for w in shard) for shard in shards]
        if not cached:
            # writes spec.json (the entry exists before any worker runs) and removes shards of
            # other sizes than planned, which the workers would otherwise keep
            with entry.lock():
                sound_shards(entry, shards)
        entries.append(
            EntryPlan(
                entry.key,
                ref.family,
                ref.model,
                ref.revision,
                run.corpus.name,
                ref.S,
                len(sizes),
                sum(sizes),
                cached,
            )
        )
        # Units of cached entries too, so every planner cuts the same list (SLURM slices).
        for start in range(0, len(sizes), shards_per_unit):
            indices = tuple(range(start, min(start + shards_per_unit, len(sizes))))
            units.append(
                WorkUnit(
                    entry.key,
                    ref,
                    run.corpus,
                    settings,
                    indices,
                    sum(sizes[i] for i in indices),
                    plan.described.info.n_params * BYTES_PER_PARAM[plan.described.info.dtype],
                )
            )
    return StudyPlan(tuple(entries), tuple(units))


BYTES_PER_PARAM = {"float32": 4, "bfloat16": 2, "float16": 2}


def accelerator_dtype(model: ResolvedModel) -> str:
    """The dtype "auto" resolves to on a GPU for this model (from its config; no weights, no GPU)."""
    import torch

    from rbplab.extraction.sources import describe_model, resolve_dtype

    return resolve_dtype("auto", torch.device("cuda"), describe_model(model).config)


def accelerator_settings(settings: ExtractionSettings, dtype: str) -> ExtractionSettings:
    """`settings` with the dtype a GPU worker resolves, `dtype` being the model's resolved there
    (`accelerator_dtype`, or "auto" where it cannot be read). The head is left as asked: a worker
    resolves "auto" on its own device (`rbplab.extraction.heads.resolve_head`)."""
    return settings.with_changes(dtype=dtype)


def slice_units(units: tuple[WorkUnit, ...], task_index: int, num_tasks: int) -> tuple[WorkUnit, ...]:
    """Task `task_index` of `num_tasks` (a SLURM array): a deterministic, disjoint slice."""
    if num_tasks < 1 or not 0 <= task_index < num_tasks:
        raise InvalidArgumentError(
            f"task index must lie in [0, {num_tasks}) and num_tasks >= 1, got {task_index} of {num_tasks}"
        )
    ordered = sorted(units, key=lambda u: (u.key, u.shards[0]))
    return tuple(ordered[task_index::num_tasks])


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
    work = compute_shards([(plan, entry)], unit.shards, on_tokens=on_tokens, get_scorer=loaded_scorer)
    seconds = time.perf_counter() - started
    timings = {"plan": planned, **work.timings}
    return UnitResult(unit.key, unit.shards, work.tokens, seconds, producer, work.finalized, timings, devices)


def _quiet_transformers() -> None:
    # The run's own bar is the progress report; transformers' per-load weight bar would break it up.
    from transformers.utils import logging

    logging.disable_progress_bar()
