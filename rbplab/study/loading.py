"""Loading a `Study` from the extraction cache: every model of some families on some corpora.

Each run is its cache entry's summary (`rbplab.core.summary`), never its tokens, so a study opens
in memory that grows with the number of entries, not of tokens. Runs missing from the cache are an
error that names them, unless `extract=True` asks for them to be computed (`rbplab.extraction`):
analysis never runs a model behind the user's back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from rbplab.core.compute import training_compute
from rbplab.core.entry_spec import EntrySpec, EntrySpecError
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.core.runs import Run, run_label
from rbplab.core.settings import ExtractionSettings
from rbplab.core.stats import check_ties
from rbplab.grid import Grid, GridRun, corpus_label
from rbplab.store.corpora import Corpus, LazyCorpus
from rbplab.study.study import Study


def default_corpora() -> list[str]:
    """The corpora bundled in data/corpora (the offline default)."""
    from rbplab.store.corpora import list_corpora

    table = list_corpora()
    return table.loc[table["origin"] == "bundled", "name"].tolist()


PYTHON_REMEDY = "extract=True (e.g. rbplab.load_study(..., extract=True)), or rbplab extract"


class MissingRunsError(RbplabError, ValueError):
    """Some runs of a study are not in the cache and extraction was not asked for. `runs` names
    them, `nearest` says how the closest cached runs differ; `with_remedy` rephrases the fix for
    the caller (the CLI says the command with --extract, Python says extract=True)."""

    def __init__(
        self,
        message: str,
        *,
        runs: Sequence[str] = (),
        nearest: str = "",
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(message)
        self.runs = list(runs)
        self.nearest = nearest
        self.cache_dir = cache_dir

    @classmethod
    def of_runs(
        cls,
        runs: Sequence[str],
        cache_dir: str | Path | None,
        nearest: str = "",
        remedy: str = PYTHON_REMEDY,
    ) -> MissingRunsError:
        shown = ", ".join(runs[:6]) + (f" and {len(runs) - 6} more" if len(runs) > 6 else "")
        where = f" in {cache_dir}" if cache_dir is not None else ""
        note = f"; {nearest}" if nearest else ""
        message = f"{len(runs)} run(s) are not in the cache{where}: {shown}{note}; compute them with {remedy}"
        return cls(message, runs=runs, nearest=nearest, cache_dir=cache_dir)

    def with_remedy(self, remedy: str) -> MissingRunsError:
        """The same error telling the fix as `remedy` (a damaged entry's message is kept)."""
        if not self.runs:
            return self
        return self.of_runs(self.runs, self.cache_dir, self.nearest, remedy)


# Settings a cache entry's spec records as asked, so a cached run that differs in one of them
# cannot be the run asked for (others, such as a context length of None, resolve per model).
def _settings_differences(spec: EntrySpec, settings: ExtractionSettings) -> dict[str, tuple]:
    """{setting: (cached, asked)} for the settings where the entry's spec cannot match `settings`."""
    from rbplab.extraction.known_plans import DEFAULT_SHARD_TOKENS

    cached = spec.settings()
    asked = {
        "max_tokens": settings.max_tokens,
        "stride": settings.stride,
        "bos": settings.bos,
        "include_padded_vocab": settings.include_padded_vocab,
        "shard_tokens": settings.shard_tokens or DEFAULT_SHARD_TOKENS,
        "context_length": settings.context_length,  # None: the model's limit, known only by planning
        "dtype": None if settings.dtype == "auto" else settings.dtype,
    }
    return {
        name: (cached[name], value)
        for name, value in asked.items()
        if not (value is None and name in ("context_length", "dtype")) and cached[name] != value
    }


def absent_runs(grid: Grid, cache_dir: str | Path | None = None) -> MissingRunsError | None:
    """The runs of `grid` that no complete cache entry can hold (none has their model, revision,
    corpus and recorded settings), found from the entries' specs alone: no model is described, no
    corpus opened, nothing of torch or transformers imported. A run this does not name may still
    turn out missing when it is planned (`load_grid`); one it names is certainly missing. Returns
    the error naming them and how the nearest cached runs differ, or None."""
    from rbplab.extraction.sources import as_spec, resolve_source
    from rbplab.store.cache import entry_at
    from rbplab.store.cache.layout import entry_dirs
    from rbplab.store.files import cache_root

    root = cache_root(cache_dir)
    specs: list[EntrySpec] = []
    for path in entry_dirs(root) if root.is_dir() else []:
        entry = entry_at(path, root)
        if entry is not None and entry.is_complete():
            try:
                specs.append(EntrySpec.from_json(entry.spec))
            except EntrySpecError:
                continue  # not a spec of this version: no run can be read from it
    # Only corpora named as the cache names them: opened corpora, hub:<name>, bundled names (a
    # path's entries are named after its file, so its runs are left to planning).
    corpora = [
        corpus_label(c)
        for c in grid.corpora
        if isinstance(c, (Corpus, LazyCorpus)) or str(c).startswith("hub:") or corpus_label(c) == str(c)
    ]
    missing: list[str] = []
    differences: dict[tuple, int] = {}
    for ref in grid.checkpoints():
        label = resolve_source(as_spec(ref)).label
        # A local model's final checkpoint keys as no revision: an entry without one may be it.
        revisions = {None, ref.revision}
        for corpus in corpora:
            nearest = None
            for spec in specs:
                if spec.model.name != label or spec.corpus.name != corpus:
                    continue
                if spec.model.revision not in revisions:
                    continue
                differ = _settings_differences(spec, grid.settings)
                if nearest is None or len(differ) < len(nearest):
                    nearest = differ
                if not differ:
                    break
            if nearest is None or nearest:
                missing.append(f"{ref.label} on {corpus}")
                if nearest:
                    found = tuple(sorted(nearest.items()))
                    differences[found] = differences.get(found, 0) + 1
    if not missing:
        return None
    if differences:
        common = max(differences, key=differences.get)
        said = {None: "none", True: "true", False: "false"}
        shown = ", ".join(
            f"{name} (cached {said.get(cached, cached)}, asked {said.get(asked, asked)})"
            for name, (cached, asked) in common
        )
        note = f"the nearest cached runs differ in {shown}"
    else:
        note = "the cache holds no run of these models on these corpora"
    return MissingRunsError.of_runs(missing, cache_dir, note)


def load_grid(
    grid: Grid,
    *,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    extract: bool = False,
    progress: bool | Callable[[str], None] = False,
    outer: Literal["corpus", "model"] = "corpus",
) -> Study:
    """The study of every run of `grid` (`rbplab.grid.Grid`), each read as its cache entry's
    summary; missing entries are a `MissingRunsError` naming them, or extracted first when
    `extract` is true. A model outside the registry gets its S from its description (the same
    one its cache key comes from) and family ``custom``. `outer`: the order of the study's runs
    (corpora outer, or models and their revisions outer as a study file lists them)."""
    return _grid_study(grid, cache_dir, check_ties(ties), level, extract, progress, outer)


def _grid_study(
    grid: Grid,
    cache_dir: str | Path | None,
    ties: str,
    level: float,
    extract: bool,
    progress: bool | Callable[[str], None],
    outer: Literal["corpus", "model"],
) -> Study:
    """`load_grid` after its public callers checked `ties` (before any entry is read)."""
    if not extract:  # certainly missing runs are named at once, before any model is described
        absent = absent_runs(grid, cache_dir)
        if absent is not None:
            raise absent
    known = _known_runs(grid, cache_dir, progress, outer)
    if known is not None:  # every run planned before on this machine: no model code is imported
        return Study(known, ties=ties, level=level)
    from rbplab.extraction.known_plans import remember
    from rbplab.extraction.pipeline import count_problems, extract_plan, plan_extraction
    from rbplab.store.cache import CacheCorruptedError, CacheEntry

    say = progress if callable(progress) else None
    planned, described = [], {}  # each model described once for the whole grid
    for run in grid.runs(outer=outer):
        plan = plan_extraction(run.model, run.corpus, grid.settings, described=described)
        planned.append((run, plan, CacheEntry(cache_dir, plan.key_spec)))
        remember(plan, cache_dir)
    missing = [f"{run.label} on {run.corpus_label}" for run, _, entry in planned if not entry.is_complete()]
    if missing and not extract:
        raise MissingRunsError.of_runs(missing, cache_dir)
    runs = []
    for run, plan, entry in planned:
        ref = run.model
        if say:
            say(f"{ref.family or 'custom'}/{run.label} on {run.corpus_label}")
        if not entry.is_complete():
            extract_plan(plan, cache_dir=cache_dir, progress=progress is True)
        try:
            manifest = entry.manifest()
            if not entry.has_summary():  # nothing vouches for its token count: derive it first
                problems = count_problems(plan, manifest)
                if problems:
                    raise entry.damaged(problems[0])
            summary = entry.summary(manifest)
        except CacheCorruptedError as err:
            if not extract:
                raise MissingRunsError(f"{err}; or load with extract=True") from None
            warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=2)
            extract_plan(plan, cache_dir=cache_dir, progress=progress is True)
            manifest = entry.manifest()
            summary = entry.summary(manifest)
        runs.append(_study_run(run, plan.described.info.n_nonembedding, summary, manifest))
    return Study(runs, ties=ties, level=level)


def _known_runs(grid: Grid, cache_dir, progress, outer: Literal["corpus", "model"]) -> list[Run] | None:
    """The runs of `grid` read through their plan records (`rbplab.extraction.known_plans`), or
    None when any run has none that holds, or its entry has no summary vouching for its tokens:
    then every run is planned the slow way."""
    from rbplab.extraction.known_plans import known_plan
    from rbplab.extraction.sources import as_spec
    from rbplab.store.cache import CacheCorruptedError, CacheEntry

    say = progress if callable(progress) else None
    runs = []
    for run in grid.runs(outer=outer):
        ref = run.model
        found = known_plan(as_spec(ref), run.corpus, grid.settings, cache_dir)
        if found is None:
            return None
        entry = CacheEntry.open(found.key, cache_dir)
        try:
            if not entry.has_summary():
                return None
            manifest = entry.manifest()
            summary = entry.summary(manifest)
        except CacheCorruptedError:
            return None
        runs.append(_study_run(run, found.n_nonembedding, summary, manifest))
    if say:  # only once every run is known: otherwise the slow path reports them
        for run in runs:
            say(f"{run.family}/{run.model} on {run.corpus}")
    return runs


def _study_run(run: GridRun, described_S: float, summary: Any, manifest: Mapping) -> Run:
    """A study's run of grid run `run`: S from the registry, else from the model's description."""
    from rbplab.store import schedules

    ref = run.model
    S = ref.S if ref.S is not None else float(described_S)
    training = _training(manifest, ref.model, ref.revision, S, schedules) if ref.revision else {}
    return Run(ref.family or "custom", run.label, run.corpus_label, S, summary, **training)


def load_study(
    families: Grid | str | Path | Mapping[str, Any] | Iterable[str] | pd.DataFrame = "micro",
    corpora: str | Corpus | LazyCorpus | Iterable[str | Corpus | LazyCorpus] | None = None,
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    *,
    models: Iterable[str] | None = None,
    revisions: str | Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    progress: bool | Callable[[str], None] = False,
    extract: bool = False,
    **overrides: Any,
) -> Study:
    """Rank statistics of every run of a grid, read from the cache.

    families: what names the grid (`rbplab.grid.Grid.build`): registry family names
    (`rbplab families`), registered models, local model paths and hub ids, a study file
    (``.toml``) or its table (a dict), a table with a ``model`` column, or a `Grid`.
    models: optional subset of the families' short names; revisions: checkpoints of every model,
    by name or ``"log:N"`` (N log-spaced ones from its schedule), reported as ``model@revision``
    with step, D and C (default: the final model); corpora: bundled names, ``hub:<name>`` or
    paths (default: every bundled corpus, or the study file's); settings: how the runs were
    scored (`rbplab.core.ExtractionSettings`; its fields may also be given as keywords, e.g.
    max_tokens=2000). Each run is read as its cache entry's summary (no token is held;
    `Study.stats` reads one run's tokens when asked). Runs missing from the cache are a
    `MissingRunsError` naming them, or with ``extract=True`` are extracted first
    (`rbplab.extraction.extract`). `progress` may be True (extraction progress bars) or a
    callable receiving one line per run. Made-up studies come from `synthetic_study`.
    """
    check_ties(ties)
    grid = Grid.build(families, corpora, settings, models=models, revisions=revisions, **overrides)
    return _grid_study(grid, cache_dir, ties, level, extract, progress, "corpus")


def load_study_file(
    path: str | Path | Mapping[str, Any],
    *,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    extract: bool = False,
    progress: bool | Callable[[str], None] = False,
) -> Study:
    """The study a study file names (`rbplab run STUDY.toml`), read from the cache: the grid that
    was run is the grid that is analysed (missing runs: as `load_study`, extract=True computes
    them). `path` may also be the file's table as a dict (e.g.
    ``{"families": ["micro"], "corpora": ["prose"], "revisions": "log:5"}``). A model checkpoint
    is reported as ``model@revision``; a model outside the registry gets its S from its config
    and family ``custom``. A checkpoint's run carries its revision, step, tokens seen D and
    compute C (from the cache manifest's ``training`` block, else the model's checkpoint
    schedule). Its runs are listed as the file lists its models (`load_grid`, outer="model")."""
    check_ties(ties)
    grid = Grid.from_mapping(path) if isinstance(path, Mapping) else Grid.read(path)
    return _grid_study(grid, cache_dir, ties, level, extract, progress, "model")


ENTRY_COLUMNS = ("key", "family", "model", "corpus", "S")


def load_entries(
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
    `load_study(..., revisions=...)` labels it, and a model's final weights, when its checkpoints
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
    from rbplab.store.cache import CacheEntry

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
    from rbplab.store import schedules

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
            f'rbplab.load_entries(entries[entries["{_LISTED_SETTINGS[column]}"].{pick}]["key"])'
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


def open_study(
    families: str | Iterable[str] = "micro",
    corpora: str | Corpus | LazyCorpus | Iterable[str | Corpus | LazyCorpus] | None = None,
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    *,
    models: Iterable[str] | None = None,
    study_file: str | Path | None = None,
    synthetic: bool = False,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    extract: bool = False,
) -> Study:
    """The study a notebook's parameters name, each source chosen explicitly: `synthetic` (made-up
    models, `synthetic_study`), else a `study_file` (`load_study_file`), else families x corpora
    from the cache (`load_study`); `extract` as there."""
    if synthetic:
        from rbplab.study.synthetic import synthetic_study

        return synthetic_study(ties=ties)
    if study_file:
        return load_study_file(study_file, cache_dir=cache_dir, ties=ties, extract=extract)
    return load_study(
        families, corpora, settings, models=models, cache_dir=cache_dir, ties=ties, extract=extract
    )
