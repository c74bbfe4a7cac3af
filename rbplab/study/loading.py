"""Loading a `Study` from the extraction cache: every run of a grid (`rbplab.grid.Grid`, as a study
file, `rbplab fit`, `rbplab report` and the notebooks name it), or cache entries named by key.

One path opens both: each run's cache entry (a grid's found by `rbplab.study.lookup`), its
checked manifest, and its row of the cache index, or its summary where the index has no sound
row (`rbplab.store.cache.entry.open_summaries`). No token is held, so a study opens in memory that
grows with the number of entries, not of tokens. Runs missing from the cache are an error that
names them, unless `extract=True` asks for a grid's to be computed (`rbplab.extraction`): analysis
never runs a model behind the user's back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from rbplab.catalog.corpora import list_corpora
from rbplab.core.errors import InvalidArgumentError, RbplabWarning
from rbplab.core.runs import Run, run_label, training_compute
from rbplab.core.settings import ExtractionSettings
from rbplab.core.stats import check_ties
from rbplab.grid import Grid, GridRun, require_grid
from rbplab.study.lookup import (
    MissingRunsError,
    ResolvedEntry,
    absent_runs,
    known_entries,
    planned_entries,
)
from rbplab.study.study import Study

if TYPE_CHECKING:
    from rbplab.extraction.plan import Plan
    from rbplab.store.cache.entry import CacheEntry


def checked_manifest(
    resolved: ResolvedEntry, settings: ExtractionSettings, cache_dir, extract: bool, bars: bool
) -> Mapping:
    """The checked manifest of a resolved run, extracted first when its entry is not complete; an
    entry without a summary (cached before summaries existed) has it derived first, once its shard
    counts are those its plan gives. A damaged entry is a `MissingRunsError`, or recomputed when
    `extract`."""
    from rbplab.store.cache.reading import CacheCorruptedError

    entry = resolved.entry
    if not entry.is_complete():
        _compute(resolved, settings, cache_dir, bars)
    try:
        manifest = entry.manifest()
        if not entry.has_summary():  # nothing vouches for its token count: derive it first
            from rbplab.extraction.plan import count_problems

            problems = count_problems(_plan(resolved, settings, cache_dir), manifest)
            if problems:
                raise entry.damaged(problems[0])
            entry.summary(manifest)  # derived and recorded now, silently, as an extraction would
            manifest = entry.manifest()
        return manifest
    except CacheCorruptedError as err:
        return _recomputed(resolved, settings, cache_dir, extract, bars, err)


def _plan(resolved: ResolvedEntry, settings: ExtractionSettings, cache_dir) -> Plan:
    """The run's plan: a run found through its plan record is planned only to be recomputed."""
    from rbplab.extraction.plan import plan_and_record

    run = resolved.run
    return resolved.plan or plan_and_record(run.model, run.corpus, settings, cache_dir)


def _compute(resolved: ResolvedEntry, settings: ExtractionSettings, cache_dir, bars: bool) -> None:
    from rbplab.extraction.pipeline import extract_plan  # model code only when a run is computed

    extract_plan(_plan(resolved, settings, cache_dir), cache_dir=cache_dir, progress=bars)


def _recomputed(
    resolved: ResolvedEntry,
    settings: ExtractionSettings,
    cache_dir,
    extract: bool,
    bars: bool,
    err: Exception,
) -> Mapping:
    """The manifest of a damaged run's entry computed again (`extract`), else `MissingRunsError`."""
    if not extract:
        raise MissingRunsError(f"{err}; or load with extract=True") from None
    warnings.warn(f"{err}; recomputing the damaged shards now", RbplabWarning, stacklevel=4)
    _compute(resolved, settings, cache_dir, bars)
    return resolved.entry.manifest()


def default_corpora() -> list[str]:
    """The corpora bundled in data/corpora (the offline default)."""
    table = list_corpora()
    return table.loc[table["origin"] == "bundled", "name"].tolist()


def load_study(
    grid: Grid | None = None,
    *,
    entries: pd.DataFrame | Iterable[str] | None = None,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    extract: bool = False,
    progress: bool | Callable[[str], None] = False,
    outer: Literal["corpus", "model"] = "corpus",
) -> Study:
    """Rank statistics of every run of `grid` (or of cache `entries`), read from the cache.

    Both ways open the runs the same way: each run's cache entry, its checked manifest, and its
    row of the cache index (`rbplab.store.cache.index`: RBP_k on the summary's k grid, the totals),
    or its summary where the index has no sound row. A run reads its summary only when an analysis
    needs more than the row, and no token is held (`Study.stats` reads one run's tokens when
    asked), so a study of thousands of entries opens in seconds and in memory of a few KB per
    entry (docs/benchmarks.md).

    grid: a `rbplab.grid.Grid` (`Grid.from_names`, or `Grid.read` of a study file): its corpora,
    settings, models and revisions, e.g.
    ``load_study(Grid.from_names("micro", ["prose"], max_tokens=2000))``. Each run's entry is
    found through its plan record (no model code), else planned. A checkpoint's run is reported
    as ``model@revision`` with its step, tokens seen D and compute C (from the cache manifest's
    ``training`` block, else the model's checkpoint schedule); a model outside the registry gets
    its S from its description and family ``custom``. Runs missing from the cache are a
    `MissingRunsError` naming them, or with ``extract=True`` are extracted first
    (`rbplab.extract`). `progress` may be True (extraction progress bars) or a callable receiving
    one line per run. `outer`: the order of the study's runs (corpora outer, or models and their
    revisions outer as a study file lists them). Made-up studies come from `synthetic_study`.

    entries: instead of a grid, cache entries named by key (keys, or a table with columns key,
    family, model, corpus, S and optionally revision, step, D, C, e.g. rows of
    `rbplab.store.list_entries()`): no model code, model or corpus is opened. Keys alone are
    labelled from their specs and manifests: the model as it was asked for, family "custom", a
    checkpoint as ``model@revision`` with its step, D and C. Entries that would be the same run
    scored differently are an error naming them and how to select one. `extract`, `progress` and
    `outer` apply to a grid only.
    """
    check_ties(ties)
    if entries is not None:
        if grid is not None:
            raise InvalidArgumentError("load_study takes a grid or entries=, not both")
        if extract:
            raise InvalidArgumentError(
                "load_study(entries=...) reads cached entries only: extract=True needs a grid"
            )
        labelled = _entry_runs(entries, cache_dir)
        _check_one_entry_per_run(labelled)
    else:
        labelled = _grid_runs(require_grid(grid, "load_study"), cache_dir, extract, progress, outer)
    return Study(_opened_runs(labelled, cache_dir, extract), ties=ties, level=level)


def _grid_runs(
    grid: Grid,
    cache_dir: str | Path | None,
    extract: bool,
    progress: bool | Callable[[str], None],
    outer: Literal["corpus", "model"],
) -> list[Labelled]:
    """Each run of `grid` with its entry, its labels (from the grid) and its checked manifest.
    Runs their plan records find are looked up without model code; only when some run is not
    found that way are certainly missing runs named (from the entries' specs alone, before any
    model is described) and the rest planned."""
    runs = list(grid.runs(outer=outer))
    found = known_entries(grid, cache_dir, runs)
    if not extract and any(r is None for r in found):
        absent = absent_runs(grid, cache_dir)
        if absent is not None:
            raise absent
    resolved = planned_entries(grid, cache_dir, runs, found)
    missing = [f"{r.run.label} on {r.run.corpus_label}" for r in resolved if not r.entry.is_complete()]
    if missing and not extract:
        raise MissingRunsError.of_runs(missing, cache_dir)
    say = progress if callable(progress) else None
    labelled = []
    for r in resolved:
        if say:
            say(f"{r.run.model.family or 'custom'}/{r.run.label} on {r.run.corpus_label}")
        manifest = checked_manifest(r, grid.settings, cache_dir, extract, progress is True)
        labels, training = _grid_labels(r.run, r.described_S, manifest)
        labelled.append(Labelled(r.entry, labels, training, manifest, r, grid.settings, progress is True))
    return labelled


def _opened_runs(labelled: list[Labelled], cache_dir: str | Path | None, extract: bool) -> list[Run]:
    """The study's runs: each entry's summary from its row of the cache index where that row is
    sound (`rbplab.store.cache.entry.open_summaries`: a study of thousands of entries then reads no
    summary until an analysis needs more than RBP_k on the grid and the totals), else read whole.
    A summary found damaged is a `MissingRunsError`, or, for a grid's run with `extract`, computed
    again."""
    from rbplab.store.cache.entry import open_summaries
    from rbplab.store.cache.reading import CacheCorruptedError

    try:
        summaries = open_summaries([(r.entry, r.manifest) for r in labelled], cache_dir)
    except CacheCorruptedError as err:
        if not extract:
            raise MissingRunsError(f"{err}; or load with extract=True") from None
        summaries = []
        for r in labelled:  # the damaged ones found and computed again, one entry at a time
            try:
                summaries += open_summaries([(r.entry, r.manifest)], cache_dir)
            except CacheCorruptedError as damage:
                manifest = _recomputed(r.resolved, r.settings, cache_dir, True, r.bars, damage)
                summaries += open_summaries([(r.entry, manifest)], cache_dir)
    return [
        Run(**r.labels, stats=summary, **r.training) for r, summary in zip(labelled, summaries, strict=True)
    ]


@dataclass(frozen=True)
class Labelled:
    """A run of a study before its summary is opened: its cache entry, labels (family, model,
    corpus, S), training position (revision, step, D, C; empty for a final model) and checked
    manifest; for a grid's run also how to compute it again (resolved, settings, bars)."""

    entry: CacheEntry
    labels: dict
    training: dict
    manifest: Mapping
    resolved: ResolvedEntry | None = None
    settings: ExtractionSettings | None = None
    bars: bool = False


def _grid_labels(run: GridRun, described_S: float, manifest: Mapping) -> tuple[dict, dict]:
    """(family, model, corpus, S) and (revision, step, D, C) of grid run `run`: S from the
    registry, else from the model's description."""
    from rbplab.catalog import registry

    ref = run.model
    S = ref.S if ref.S is not None else float(described_S)
    training = _training(manifest, ref.model, ref.revision, S, registry) if ref.revision else {}
    labels = {"family": ref.family or "custom", "model": run.label, "corpus": run.corpus_label, "S": S}
    return labels, training


ENTRY_COLUMNS = ("key", "family", "model", "corpus", "S")


def _entry_runs(entries: pd.DataFrame | Iterable[str], cache_dir: str | Path | None) -> list[Labelled]:
    """Cache entries named by key with their labels and checked manifests: a table with columns
    key, family, model, corpus, S (and optionally revision, step, D, C), or keys alone, labelled from
    their specs and manifests: the model as it was asked for (``micro-1-25K``, a hub id), the
    corpus, S, family "custom"; a training checkpoint as ``model@revision`` with its revision, step,
    D and C, as a grid's is labelled, and a model's final weights, when its checkpoints are among
    the entries, as its final revision (``micro-1-25K@step-1562``). No model code is imported and
    no model or corpus is opened.

    Not checked, since no corpus is opened: how many tokens each entry must hold. Every store check
    is made (`CacheEntry.summary`, or the index rules and the manifest's summary record), but an
    entry missing shards with its records, n_tokens and summary made to match reads as the shorter
    entry; `rbplab cache verify` (or `rbplab extract` of the same request, which repairs it) derives
    the counts from the corpus."""
    from rbplab.store.cache.entry import CacheEntry

    table = isinstance(entries, pd.DataFrame)
    if table:
        missing = sorted(set(ENTRY_COLUMNS) - set(entries.columns))
        if missing:
            raise InvalidArgumentError(
                f"an entry table needs columns {list(ENTRY_COLUMNS)}; it lacks {missing}"
            )
        rows = entries.to_dict("records")
    else:
        rows = [{"key": key} for key in ([entries] if isinstance(entries, str) else entries)]
    opened = []
    for row in rows:
        entry = CacheEntry.open(str(row["key"]), cache_dir)
        opened.append((row, entry, entry.manifest()))
    # models whose checkpoints are among the entries: their final weights are a checkpoint too
    checkpointed = {_asked_model(entry.spec) for _, entry, _ in opened if _spec_revision(entry.spec)}
    labelled = []
    for row, entry, manifest in opened:
        if table:
            labels = {f: row[f] for f in ("family", "model", "corpus")} | {"S": float(row["S"])}
            training = {f: row[f] for f in ("revision", "step", "D", "C") if f in row and not pd.isna(row[f])}
        else:
            labels, training = _entry_labels(entry.spec, manifest, checkpointed)
        labelled.append(Labelled(entry, labels, training, manifest))
    return labelled


def _asked_model(spec: Mapping) -> str:
    model = spec.get("model")
    return str(model.get("name")) if isinstance(model, Mapping) else ""


def _spec_revision(spec: Mapping) -> str | None:
    model = spec.get("model")
    revision = model.get("revision") if isinstance(model, Mapping) else None
    return str(revision) if revision else None


def _entry_labels(spec: Mapping, manifest: Mapping, checkpointed: set[str]) -> tuple[dict, dict]:
    """(family, model, corpus, S) and (revision, step, D, C) of an entry named by key alone."""
    from rbplab.catalog import registry

    model = manifest.get("model") or {}
    name = _asked_model(spec) or str(model.get("name"))
    S = float(model.get("n_nonembedding") or float("nan"))
    labels = {"family": "custom", "corpus": (manifest.get("corpus") or {}).get("name"), "S": S}
    revision = _spec_revision(spec)
    step = (manifest.get("training") or {}).get("step")
    if revision is None and name in checkpointed and step is not None:
        # a local model's final checkpoint is keyed as the model itself: name it as its schedule does
        schedule = registry.schedule_of(name)
        revision = schedule.revision(int(step)) if schedule is not None else "main"
    if revision is None:
        return labels | {"model": name}, {}
    training = _training(manifest, name, revision, S, registry)
    return labels | {"model": run_label(name, revision)}, {k: v for k, v in training.items() if v is not None}


def _check_one_entry_per_run(labelled: list[Labelled]) -> None:
    """Refuse entries that would be one run of the study, naming them and what tells them apart."""
    groups: dict[tuple, list] = {}
    for r in labelled:
        groups.setdefault((r.labels["family"], r.labels["model"], r.labels["corpus"]), []).append(r.entry)
    repeated = {run: group for run, group in groups.items() if len(group) > 1}
    if not repeated:
        return
    described, differing = [], []
    for (_, model, corpus), group in repeated.items():
        flat = [_flatten(entry.spec) for entry in group]
        fields = sorted({f for spec in flat for f in spec if len({repr(s.get(f)) for s in flat}) > 1})
        differing.extend(f for f in fields if f not in differing)
        shown = ", ".join(
            f"{entry.key[:8]} " + " ".join(f"{f}={spec.get(f)}" for f in fields[:2])
            for entry, spec in zip(group, flat, strict=True)
        )
        described.append(f"{model} on {corpus} ({shown})")
    listing = "; ".join(described[:2]) + (f"; and {len(described) - 2} more" if len(described) > 2 else "")
    column = next((f for f in differing if f in _LISTED_SETTINGS), None)
    if column is not None:
        values = {_flatten(entry.spec).get(column) for group in repeated.values() for entry in group}
        pick = "isna()" if None in values else f"eq({min(v for v in values if v is not None)})"
        how = (
            "e.g. from rbplab.store import list_entries; entries = list_entries(); "
            f'rbplab.load_study(entries=entries[entries["{_LISTED_SETTINGS[column]}"].{pick}]["key"])'
        )
    else:
        how = "rbplab.store.list_entries() lists each entry's key, model, revision, corpus and settings"
    raise InvalidArgumentError(
        f"{len(repeated)} run(s) appear in more than one entry, scored differently: {listing}. A study "
        f"holds one entry per model, revision and corpus: select them, {how}"
    )


# spec fields that `rbplab.store.list_entries` shows as columns, by their column name
_LISTED_SETTINGS = {"max_tokens": "max_tokens", "windows.context_length": "context_length"}


def _flatten(spec: Mapping, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in spec.items():
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{prefix}{name}.")
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _training(manifest: Mapping, model: str, revision: str, S: float, registry: Any) -> dict:
    """revision, step, D, C of a checkpoint run: the manifest's ``training`` block, else the
    schedule's (entries cached before manifests carried it)."""
    block = manifest.get("training")
    if block is None:
        try:
            block = registry.training_position(model, revision, S)
        except (OSError, ValueError):
            block = None
    block = block or {}
    D = block.get("D")
    return {
        "revision": revision,
        "step": None if block.get("step") is None else int(block["step"]),
        "D": None if D is None else float(D),
        # C from the run's S (the study's), so it matches the table it is drawn with
        "C": None if D is None else training_compute(S, float(D)),
    }
