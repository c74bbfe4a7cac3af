"""Work units: (model, revision, corpus, shard range), planned from metadata on the driver.

Planning reads configs, tokenizers and corpora (no weights), computes every entry's cache key,
writes its spec, and cuts its shards into units of `shards_per_unit`. The list of units does not
depend on what the cache already holds, so independent processes (SLURM array tasks) that plan
the same study get the same list and can take disjoint slices of it; what is already done is
skipped when a unit runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rbplab.catalog.corpora.corpus import Corpus, LazyCorpus
from rbplab.catalog.models import ResolvedModel
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.hits import cache_hit
from rbplab.extraction.known_plans import record_plan
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.shard_loop import sound_shards
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
    tokens its corpus and tokenizer give (`rbplab.extraction.hits.cache_hit`, which tokenizes
    each corpus once per tokenizer); one that does not is reported and recomputed.

    accelerator: the units will run on GPUs while this driver may have none. The dtype "auto"
    resolves to the checkpoint's own half type on a GPU and to float32 on a CPU, and the dtype is
    part of the key, so the driver plans each model with the dtype a GPU worker will use."""
    if shards_per_unit < 1:
        raise InvalidArgumentError(f"shards_per_unit must be a positive integer, got {shards_per_unit}")
    entries: list[EntryPlan] = []
    units: list[WorkUnit] = []
    described: dict = {}  # each model described once for the whole grid
    dtypes: dict = {}
    for run in study.runs():
        ref = run.model
        settings = study.settings
        if accelerator and settings.dtype == "auto":
            if ref not in dtypes:
                dtypes[ref] = accelerator_dtype(ref)
            settings = settings.with_changes(dtype=dtypes[ref])
        plan = plan_extraction(ref, run.corpus, settings, described=described)
        entry = CacheEntry(cache_dir, plan.key_spec)
        record_plan(plan, cache_dir)
        # A complete entry counts as done only with the shards and tokens its corpus gives: one
        # missing its last shard is reported, marked incomplete and cut into units like any other.
        hit = cache_hit(entry, plan)
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

    from rbplab.extraction.models import describe_model
    from rbplab.extraction.placement import resolve_dtype

    return resolve_dtype("auto", torch.device("cuda"), describe_model(model).config)


def slice_units(units: tuple[WorkUnit, ...], task_index: int, num_tasks: int) -> tuple[WorkUnit, ...]:
    """Task `task_index` of `num_tasks` (a SLURM array): a deterministic, disjoint slice."""
    if num_tasks < 1 or not 0 <= task_index < num_tasks:
        raise InvalidArgumentError(
            f"task index must lie in [0, {num_tasks}) and num_tasks >= 1, got {task_index} of {num_tasks}"
        )
    ordered = sorted(units, key=lambda u: (u.key, u.shards[0]))
    return tuple(ordered[task_index::num_tasks])
