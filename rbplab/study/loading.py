"""Loading a `Study` from the extraction cache: every run of a grid (`rbplab.grid.Grid`).

Each run is its cache entry's summary (`rbplab.core.summary`), never its tokens, so a study opens
in memory that grows with the number of entries, not of tokens. Runs missing from the cache are an
error that names them, unless `extract=True` asks for them to be computed (`rbplab.extraction`):
analysis never runs a model behind the user's back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from rbplab.core.compute import training_compute
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import Run, run_label
from rbplab.core.stats import check_ties
from rbplab.grid import Grid
from rbplab.grid.grid import GridRun, require_grid
from rbplab.study.entries import MissingRunsError, absent_runs, read_summary, resolve_entries
from rbplab.study.study import Study


def default_corpora() -> list[str]:
    """The corpora bundled in data/corpora (the offline default)."""
    from rbplab.catalog.corpora.loading import list_corpora

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

    grid: a `rbplab.grid.Grid` (`Grid.from_names`, or `Grid.read` of a study file): its corpora,
    settings, models and revisions, e.g.
    ``load_study(Grid.from_names("micro", ["prose"], max_tokens=2000))``.
    A checkpoint's run is reported as ``model@revision`` with its step, tokens seen D and compute
    C (from the cache manifest's ``training`` block, else the model's checkpoint schedule); a
    model outside the registry gets its S from its description and family ``custom``. Each run
    is read as its cache entry's summary (no token is held; `Study.stats` reads one run's tokens
    when asked). Runs missing from the cache are a `MissingRunsError` naming them, or with
    ``extract=True`` are extracted first (`rbplab.extract`). `progress` may be True
    (extraction progress bars) or a callable receiving one line per run. `outer`: the order of
    the study's runs (corpora outer, or models and their revisions outer as a study file lists
    them). Made-up studies come from `synthetic_study`.

    entries: instead of a grid, cache entries named by key (keys, or a table with columns key,
    family, model, corpus, S and optionally revision, step, D, C, e.g. rows of
    `rbplab.store.list_entries()`), reading each entry's summary and nothing else: no model code,
    model or corpus is opened. Keys alone are labelled from their specs and manifests: the model
    as it was asked for, family "custom", a checkpoint as ``model@revision`` with its step, D and
    C. Entries that would be the same run scored differently are an error naming them and how
    to select one. `extract`, `progress` and `outer` apply to a grid only.
    """
    if entries is not None:
        if grid is not None:
            raise InvalidArgumentError("load_study takes a grid or entries=, not both")
        if extract:
            raise InvalidArgumentError(
                "load_study(entries=...) reads cached entries only: extract=True needs a grid"
            )
        return _load_entries(entries, cache_dir=cache_dir, ties=ties, level=level)
    check_ties(ties)
    grid = require_grid(grid, "load_study")
    if not extract:  # certainly missing runs are named at once, before any model is described
        absent = absent_runs(grid, cache_dir)
        if absent is not None:
            raise absent
    resolved = resolve_entries(grid, cache_dir, outer=outer)
    missing = [f"{r.run.label} on {r.run.corpus_label}" for r in resolved if not r.entry.is_complete()]
    if missing and not extract:
        raise MissingRunsError.of_runs(missing, cache_dir)
    say = progress if callable(progress) else None
    runs = []
    for r in resolved:
        if say:
            say(f"{r.run.model.family or 'custom'}/{r.run.label} on {r.run.corpus_label}")
        summary, manifest = read_summary(r, grid.settings, cache_dir, extract, progress is True)
        runs.append(_study_run(r.run, r.described_S, summary, manifest))
    return Study(runs, ties=ties, level=level)


def _study_run(run: GridRun, described_S: float, summary: Any, manifest: Mapping) -> Run:
    """A study's run of grid run `run`: S from the registry, else from the model's description."""
    from rbplab.catalog import schedules

    ref = run.model
    S = ref.S if ref.S is not None else float(described_S)
    training = _training(manifest, ref.model, ref.revision, S, schedules) if ref.revision else {}
    return Run(ref.family or "custom", run.label, run.corpus_label, S, summary, **training)


ENTRY_COLUMNS = ("key", "family", "model", "corpus", "S")


def _load_entries(
    entries: pd.DataFrame | Iterable[str],
    *,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
) -> Study:
    """The study of some cache entries, named by key: a table with columns key, family, model,
    corpus, S (and optionally revision, step, D, C), or keys alone, labelled from their specs and
    manifests: the model as it was asked for (``micro-1-25K``, a hub id), the corpus, S, family
    "custom"; a training checkpoint as ``model@revision`` with its revision, step, D and C, as
    `load_study` labels a grid's, and a model's final weights, when its checkpoints
    are among the entries, as its final revision (``micro-1-25K@step-1562``). A study holds one
    entry per run: entries that would be the same run (one model, revision and corpus, scored
    with different settings, e.g. ``rbplab demo``'s full corpora and its 16,384-token
    checkpoints) are an error naming them, the settings that differ, and how to select.
    Reads each entry's summary and nothing else: no model code is imported and no model or
    corpus is opened, so a grid of thousands of entries (`rbplab cache ls`, or a table a runner
    wrote) opens in memory that grows with the entries.

    Not checked, since no corpus is opened: how many tokens each entry must hold. Every store
    check is made (`CacheEntry.summary`), but an entry missing shards with its records, n_tokens
    and summary made to match reads as the shorter entry; `rbplab cache verify` (or `rbplab
    extract` of the same request, which repairs it) derives the counts from the corpus."""
    from rbplab.store.cache.entry import CacheEntry

    check_ties(ties)
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
        labelled.append((entry, labels, training, manifest))
    _check_one_entry_per_run(labelled)
    runs = [
        Run(**labels, stats=entry.summary(manifest), **training)
        for entry, labels, training, manifest in labelled
    ]
    return Study(runs, ties=ties, level=level)


def _asked_model(spec: Mapping) -> str:
    model = spec.get("model")
    return str(model.get("name")) if isinstance(model, Mapping) else ""


def _spec_revision(spec: Mapping) -> str | None:
    model = spec.get("model")
    revision = model.get("revision") if isinstance(model, Mapping) else None
    return str(revision) if revision else None


def _entry_labels(spec: Mapping, manifest: Mapping, checkpointed: set[str]) -> tuple[dict, dict]:
    """(family, model, corpus, S) and (revision, step, D, C) of an entry named by key alone."""
    from rbplab.catalog import schedules

    model = manifest.get("model") or {}
    name = _asked_model(spec) or str(model.get("name"))
    S = float(model.get("n_nonembedding") or float("nan"))
    labels = {"family": "custom", "corpus": (manifest.get("corpus") or {}).get("name"), "S": S}
    revision = _spec_revision(spec)
    step = (manifest.get("training") or {}).get("step")
    if revision is None and name in checkpointed and step is not None:
        # a local model's final checkpoint is keyed as the model itself: name it as its schedule does
        schedule = schedules.schedule_of(name)
        revision = schedule.revision(int(step)) if schedule is not None else "main"
    if revision is None:
        return labels | {"model": name}, {}
    training = _training(manifest, name, revision, S, schedules)
    return labels | {"model": run_label(name, revision)}, {k: v for k, v in training.items() if v is not None}


def _check_one_entry_per_run(labelled: list[tuple[Any, dict, dict, Mapping]]) -> None:
    """Refuse entries that would be one run of the study, naming them and what tells them apart."""
    groups: dict[tuple, list] = {}
    for entry, labels, _, _ in labelled:
        groups.setdefault((labels["family"], labels["model"], labels["corpus"]), []).append(entry)
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


def _training(manifest: Mapping, model: str, revision: str, S: float, schedules: Any) -> dict:
    """revision, step, D, C of a checkpoint run: the manifest's ``training`` block, else the
    schedule's (entries cached before manifests carried it)."""
    block = manifest.get("training")
    if block is None:
        try:
            block = schedules.training_position(model, revision, S)
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
