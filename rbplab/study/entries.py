"""A grid's runs -> their cache entries: named at once when certainly missing (`absent_runs`),
found through their plan records or planned (`resolve_entries`), and read as summaries
(`read_summary`, computing a run first only when asked to extract).

Analysis never runs a model behind the user's back: a run the cache lacks is a
`MissingRunsError` that names it, the settings in which the nearest cached runs differ, and the
command that computes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rbplab.catalog.corpora.corpus import Corpus, LazyCorpus
from rbplab.core.entry_spec import EntrySpec, EntrySpecError
from rbplab.core.errors import RbplabError
from rbplab.core.settings import ExtractionSettings
from rbplab.grid import Grid
from rbplab.grid.grid import GridRun, corpus_label

if TYPE_CHECKING:
    from rbplab.extraction.plan import Plan
    from rbplab.store.cache.entry import CacheEntry


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
        "head": settings.head,
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
    from rbplab.store.cache.entry import entry_at
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


@dataclass(frozen=True)
class ResolvedEntry:
    """A grid run and the cache entry that holds it (complete or not yet). `plan` is its
    extraction plan when the run was planned, None when a plan record named the entry (then no
    model code was imported for it); `described_S` is S from the model's description, or the one
    the entry's manifest records when a plan record named it (never the record's own)."""

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
    from rbplab.store.cache.entry import CacheEntry

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


def read_summary(
    resolved: ResolvedEntry, settings: ExtractionSettings, cache_dir, extract: bool, bars: bool
) -> tuple[Any, Mapping]:
    """The summary and manifest of a resolved run, extracted first when its entry is not
    complete; a damaged entry is a `MissingRunsError`, or recomputed when `extract`."""
    from rbplab.store.cache.reading import CacheCorruptedError

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
