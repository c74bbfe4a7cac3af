"""Loading a `Study` from the extraction cache: every run of a grid (`rbplab.grid.Grid`).

Each run is its cache entry's summary (`rbplab.core.summary`), never its tokens, so a study opens
in memory that grows with the number of entries, not of tokens. Runs missing from the cache are an
error that names them, unless `extract=True` asks for them to be computed (`rbplab.extraction`):
analysis never runs a model behind the user's back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.core.compute import training_compute
from rbplab.core.entry_spec import EntrySpec, EntrySpecError
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.core.runs import Run, run_label
from rbplab.core.settings import ExtractionSettings
from rbplab.core.stats import check_ties
from rbplab.grid import Grid, GridRun, corpus_label
from rbplab.study.study import Study

if TYPE_CHECKING:
    from rbplab.extraction.plan import Plan
    from rbplab.store.cache import CacheEntry


def default_corpora() -> list[str]:
    """The corpora bundled in data/corpora (the offline default)."""
    from rbplab.catalog.corpora import list_corpora

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
    turn out missing when it is planned (`resolve_entries`); one it names is certainly missing. Returns
    the error naming them and how the nearest cached runs differ, or None."""
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
        label = ref.keyed_name
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


GridRequest = Grid | str | Path | Mapping[str, Any] | Iterable[str] | pd.DataFrame


@dataclass(frozen=True)
class ResolvedEntry:
    """A grid run and the cache entry that holds it (complete or not yet). `plan` is its
    extraction plan when the run was planned, None when a plan record named the entry (then no
    model code was imported for it); `described_S` is S from the model's description."""

    run: GridRun
    entry: CacheEntry
    described_S: float
    plan: Plan | None


def resolve_entries(
    grid: Grid, cache_dir: str | Path | None = None, *, outer: Literal["corpus", "model"] = "corpus"
) -> list[ResolvedEntry]:
    """The cache entry of every run of `grid`, in the order `outer` gives (`Grid.runs`). A run
    whose plan record (`rbplab.extraction.known_plans`) holds and whose entry has a summary is
    found from the record alone; any other run is planned (each model described once for the
    whole grid) and its plan recorded, so the next lookup needs no model code."""
    from rbplab.extraction.known_plans import known_plan
    from rbplab.store.cache import CacheEntry

    resolved: list[ResolvedEntry] = []
    described: dict = {}  # each model described once for the whole grid
    for run in grid.runs(outer=outer):
        found = known_plan(run.model, run.corpus, grid.settings, cache_dir)
        if found is not None:
            entry = CacheEntry.open(found.key, cache_dir)
            if entry.has_summary():  # without one, only planning knows how many tokens it must hold
                resolved.append(ResolvedEntry(run, entry, found.n_nonembedding, None))
                continue
        from rbplab.extraction.plan import plan_and_record  # model code only for a run to plan

        plan = plan_and_record(run.model, run.corpus, grid.settings, cache_dir, described=described)
        entry = CacheEntry(cache_dir, plan.key_spec)
        resolved.append(ResolvedEntry(run, entry, plan.described.info.n_nonembedding, plan))
    return resolved


def load_study(
    grid: GridRequest,
    *,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    extract: bool = False,
    progress: bool | Callable[[str], None] = False,
    outer: Literal["corpus", "model"] = "corpus",
) -> Study:
    """Rank statistics of every run of `grid`, read from the cache.

    grid: a `rbplab.grid.Grid`, or what names one (`Grid.build`'s first argument: registry family
    names, registered models, local model paths and hub ids, a study file (``.toml``) or its
    table (a dict), a table with a ``model`` column). Corpora, settings, a subset of models and
    revisions are part of the grid: ``load_study(Grid.build("micro", ["prose"], max_tokens=2000))``.
    A checkpoint's run is reported as ``model@revision`` with its step, tokens seen D and compute
    C (from the cache manifest's ``training`` block, else the model's checkpoint schedule); a
    model outside the registry gets its S from its description and family ``custom``. Each run
    is read as its cache entry's summary (no token is held; `Study.stats` reads one run's tokens
    when asked). Runs missing from the cache are a `MissingRunsError` naming them, or with
    ``extract=True`` are extracted first (`rbplab.extraction.extract`). `progress` may be True
    (extraction progress bars) or a callable receiving one line per run. `outer`: the order of
    the study's runs (corpora outer, or models and their revisions outer as a study file lists
    them). Made-up studies come from `synthetic_study`.
    """
    check_ties(ties)
    grid = Grid.build(grid)
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
        summary, manifest = _read_summary(r, grid.settings, cache_dir, extract, progress is True)
        runs.append(_study_run(r.run, r.described_S, summary, manifest))
    return Study(runs, ties=ties, level=level)


def _read_summary(
    resolved: ResolvedEntry, settings: ExtractionSettings, cache_dir, extract: bool, bars: bool
) -> tuple[Any, Mapping]:
    """The summary and manifest of a resolved run, extracted first when its entry is not
    complete; a damaged entry is a `MissingRunsError`, or recomputed when `extract`."""
    from rbplab.store.cache import CacheCorruptedError

    entry = resolved.entry

    def plan() -> Plan:  # a run found through its plan record is planned only to be recomputed
        from rbplab.extraction.plan import plan_and_record

        run = resolved.run
        return resolved.plan or plan_and_record(run.model, run.corpus, settings, cache_dir)

    def compute() -> None:  # model code is imported only when a run must be computed
        from rbplab.extraction.pipeline import extract_plan

        extract_plan(plan(), cache_dir=cache_dir, progress=bars)

    if not entry.is_complete():
        compute()
    try:
        manifest = entry.manifest()
        if not entry.has_summary():  # nothing vouches for its token count: derive it first
            from rbplab.extraction.plan import count_problems

            problems = count_problems(plan(), manifest)
            if problems:
                raise entry.damaged(problems[0])
        return entry.summary(manifest), manifest
    except CacheCorruptedError as err:
        if not extract:
            raise MissingRunsError(f"{err}; or load with extract=True") from None
        warnings.warn(f"{err}; recomputing the damaged shards now", stacklevel=3)
        compute()
        manifest = entry.manifest()
        return entry.summary(manifest), manifest


def _study_run(run: GridRun, described_S: float, summary: Any, manifest: Mapping) -> Run:
    """A study's run of grid run `run`: S from the registry, else from the model's description."""
    from rbplab.catalog import schedules

    ref = run.model
    S = ref.S if ref.S is not None else float(described_S)
    training = _training(manifest, ref.model, ref.revision, S, schedules) if ref.revision else {}
    return Run(ref.family or "custom", run.label, run.corpus_label, S, summary, **training)


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
    grid: GridRequest | None,
    *,
    synthetic: bool = False,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    extract: bool = False,
    outer: Literal["corpus", "model"] = "corpus",
) -> Study:
    """The study a notebook opens, its source chosen explicitly: made-up models when `synthetic`
    (`synthetic_study`; `grid` is not read and may be None), else the runs of `grid` from the
    cache (`load_study`, with `extract` and `outer` as there)."""
    if synthetic:
        from rbplab.study.synthetic import synthetic_study

        return synthetic_study(ties=ties)
    if grid is None:
        raise InvalidArgumentError("open_study needs a grid (rbplab.grid.Grid) unless synthetic=True")
    return load_study(grid, cache_dir=cache_dir, ties=ties, extract=extract, outer=outer)
