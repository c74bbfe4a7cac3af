"""A grid's runs -> their cache entries: named at once when certainly missing (`absent_runs`, from
the entries' specs alone), found through their plan records (`known_entries`, no model code) or
planned (`planned_entries`; `resolve_entries` does both).

Analysis never runs a model behind the user's back: a run the cache lacks is a
`MissingRunsError` that names it, the settings in which the nearest cached runs differ, and the
command that computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rbplab.catalog.corpora import Corpus, LazyCorpus
from rbplab.core.errors import RbplabError
from rbplab.core.settings import EntrySpec, EntrySpecError, ExtractionSettings
from rbplab.grid import Grid, GridRun, corpus_label

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
    cached = spec.settings()
    asked = {
        "max_tokens": settings.max_tokens,
        "stride": settings.stride,
        "bos": settings.bos,
        "include_padded_vocab": settings.include_padded_vocab,
        "shard_tokens": settings.shard_tokens,  # None: any cut, as resolve_entries finds one
        "context_length": settings.context_length,  # None: the model's limit, known only by planning
        "dtype": None if settings.dtype == "auto" else settings.dtype,
    }
    return {
        name: (cached[name], value)
        for name, value in asked.items()
        if not (value is None and name in ("context_length", "dtype", "shard_tokens"))
        and cached[name] != value
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
                spec = EntrySpec.from_json(entry.spec)
            except EntrySpecError:
                continue  # not a spec of this version: no run can be read from it
            if spec.lens is None:  # a layer before the last is not the run's final-layer entry
                specs.append(spec)
    # Only corpora named as the cache names them: opened corpora, hub:<name>, bundled names (a
    # path's entries are named after its file, so its runs are left to planning).
    corpora = [
        corpus_label(c)
        for c in grid.corpora
        if isinstance(c, (Corpus, LazyCorpus)) or str(c).startswith("hub:") or corpus_label(c) == str(c)
    ]
    by_run: dict[tuple[str, str], list[EntrySpec]] = {}
    for spec in specs:
        by_run.setdefault((spec.model.name, spec.corpus.name), []).append(spec)
    missing: list[str] = []
    differences: dict[tuple, int] = {}
    for ref in grid.checkpoints():
        label = ref.keyed_name
        # A local model's final checkpoint keys as no revision: an entry without one may be it.
        revisions = {None, ref.revision}
        for corpus in corpora:
            nearest = None
            for spec in by_run.get((label, corpus), ()):
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
    whose plan record (`rbplab.extraction.fingerprints`) holds and whose entry has a summary is
    found from the record alone; any other run is planned (each model described once for the
    whole grid) and its plan recorded, so the next lookup needs no model code."""
    runs = list(grid.runs(outer=outer))
    return planned_entries(grid, cache_dir, runs, known_entries(grid, cache_dir, runs))


def known_entries(
    grid: Grid, cache_dir: str | Path | None, runs: Sequence[GridRun]
) -> list[ResolvedEntry | None]:
    """The entry of each of `runs` (of `grid`) found through its plan record, with no model code
    imported; None where no record holds or the entry has no summary."""
    from rbplab.extraction.fingerprints import known_plan
    from rbplab.store.cache.entry import CacheEntry

    resolved: list[ResolvedEntry | None] = [None] * len(runs)
    # Models outer: a checkpoint's files are hashed once for all its corpora (the digests are
    # memoised by file stamp, a few dozen files at a time), whatever order `runs` lists.
    first: dict[str, int] = {}
    for run in runs:
        first.setdefault(run.model.label, len(first))
    for i in sorted(range(len(runs)), key=lambda i: first[runs[i].model.label]):
        run = runs[i]
        found = known_plan(run.model, run.corpus, grid.settings, cache_dir)
        entry = None if found is None else CacheEntry.open(found.key, cache_dir)
        # without a summary, only planning knows how many tokens the entry must hold
        if entry is not None and entry.has_summary():
            resolved[i] = ResolvedEntry(run, entry, found.n_nonembedding, None)
    return resolved


def planned_entries(
    grid: Grid, cache_dir: str | Path | None, runs: Sequence[GridRun], found: Sequence[ResolvedEntry | None]
) -> list[ResolvedEntry]:
    """The entry of each of `runs`: `found[i]` (`known_entries`), else planned now (model code
    imported; each model described once for the whole grid) and its plan recorded, so the next
    lookup needs no model code."""
    from rbplab.store.cache.entry import CacheEntry

    described: dict = {}
    resolved = []
    for run, known in zip(runs, found, strict=True):
        if known is not None:
            resolved.append(known)
            continue
        from rbplab.extraction.plan import plan_and_record  # model code only for a run to plan

        plan = plan_and_record(run.model, run.corpus, grid.settings, cache_dir, described=described)
        entry = CacheEntry(cache_dir, plan.key_spec)
        if not entry.is_complete() and grid.settings.shard_tokens is None:
            plan, entry = cached_cut(plan, cache_dir)
        resolved.append(ResolvedEntry(run, entry, plan.described.info.n_nonembedding, plan))
    return resolved


def cached_cut(plan: Plan, cache_dir: str | Path | None) -> tuple[Plan, CacheEntry]:
    """`plan` and its entry, or, when the cache holds the same run complete under another shard
    size (`--shard-tokens`), that plan and entry, its plan record written so the next lookup finds
    it without model code. The shard size is in the key, since it names the shard files that
    resuming and the cache's rules read, but it does not change a rank: a request that names no
    shard size is served by any cut. The other cut's shards are first counted against its corpus
    (as a cache hit is), so a damaged entry is never adopted, and its record holds the count."""
    from rbplab.extraction.fingerprints import record_plan
    from rbplab.extraction.plan import count_problems
    from rbplab.store.cache.entry import CacheEntry, entry_at
    from rbplab.store.cache.layout import entry_dirs
    from rbplab.store.cache.reading import CacheError
    from rbplab.store.files import cache_root

    root = cache_root(cache_dir)
    for path in entry_dirs(root) if root.is_dir() else []:
        found = entry_at(path, root)
        spec = EntrySpec.parse(found.spec) if found is not None and found.is_complete() else None
        if spec is None or spec.cut_at(plan.spec.windows.shard_tokens) != plan.spec:
            continue
        recut = replace(plan, spec=spec)
        try:
            damaged = recut.counts_derivable and count_problems(recut, found.manifest(mark_damaged=False))
        except CacheError:
            continue
        if not damaged:
            record_plan(recut, cache_dir)
            return recut, CacheEntry(cache_dir, recut.key_spec)
    return plan, CacheEntry(cache_dir, plan.key_spec)
