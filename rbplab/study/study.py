"""A study: the runs of some model families on some corpora, made up (`synthetic_study`) or loaded
from the cache (`load_study`: which entries a grid's runs are, their summaries as runs).

Made-up studies: lognormal ranks whose log-location falls with log S, no model needed.

`synthetic_study` builds a `Study` (family `SYNTHETIC`) that every table, figure and widget
can use, for tests and for trying the notebooks offline (their `synthetic` parameter).

A grid's runs -> their cache entries: named at once when certainly missing (`absent_runs`),
found through their plan records or planned (`resolve_entries`), and read as summaries
(`read_summary`, computing a run first only when asked to extract).

Analysis never runs a model behind the user's back: a run the cache lacks is a
`MissingRunsError` that names it, the settings in which the nearest cached runs differ, and the
command that computes it.

Loading a `Study` from the extraction cache: every run of a grid (`rbplab.grid.Grid`).

Each run is its cache entry's summary (`rbplab.core.stats`), never its tokens, so a study opens
in memory that grows with the number of entries, not of tokens. Runs missing from the cache are an
error that names them, unless `extract=True` asks for them to be computed (`rbplab.extraction`):
analysis never runs a model behind the user's back.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from rbplab.analysis import metrics
from rbplab.analysis.data_scaling import synthetic_law_table
from rbplab.analysis.lognormal import sample_lognormal_ranks
from rbplab.analysis.metrics import RBPCurve
from rbplab.catalog.corpora import Corpus, LazyCorpus, list_corpora
from rbplab.core.errors import InvalidArgumentError, NotFoundError, RbplabError, RbplabWarning
from rbplab.core.runs import TRAINING_FIELDS, Run, model_of_label, run_label, training_compute
from rbplab.core.settings import EntrySpec, EntrySpecError, ExtractionSettings
from rbplab.core.stats import TokenStats, check_ties
from rbplab.grid import Grid, GridRun, corpus_label, require_grid
from rbplab.store.cache.index import IndexedSummary


def as_list(value: object) -> list | None:
    if value is None:
        return None
    # A single name, path or Corpus object is one item, not an iterable of items.
    return [value] if isinstance(value, (str, Path)) or hasattr(value, "documents") else list(value)


def _training_column(runs: Sequence[Run], name: str):
    values = [getattr(r, name) for r in runs]
    if name == "revision":
        return np.array(values, dtype=object)
    if name == "step":  # an optimiser step is a count: integers, <NA> where unknown
        return pd.array(values, dtype="Int64")
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


@dataclass(eq=False)
class Study:
    """Runs (model x corpus, one or more families) with their RBP curves precomputed."""

    runs: list[Run]
    ties: str = "pessimistic"
    level: float = 0.95
    curves: dict[tuple[str, str, str], RBPCurve] = field(default_factory=dict, repr=False)
    _subsets: dict = field(default_factory=dict, repr=False)
    # Tables the question modules compute once per study (lognormal fits, decompositions), by key.
    memo: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.runs = metrics.as_runs(self.runs)
        if not self.runs:
            raise InvalidArgumentError("a Study needs at least one run (model x corpus)")
        missing: dict[tuple[str, str, str], Any] = {}
        indexed: dict[tuple[str, str, str], Any] = {}
        for run in self.runs:
            key = (run.family, run.model, run.corpus)
            if key not in self.curves and key not in missing and key not in indexed:
                # a run read from the cache index answers RBP_k on its grid without its rank pairs
                (indexed if isinstance(run.stats, IndexedSummary) else missing)[key] = run.stats
        # rbp_curves checks self.ties, once, even when every curve was given
        self.curves.update(zip(missing, metrics.rbp_curves(list(missing.values()), self.ties), strict=True))
        self.curves.update({key: metrics.IndexedRBPCurve(stats, self.ties) for key, stats in indexed.items()})

    # ---- what is in the study -------------------------------------------------------------
    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(r.family for r in self.runs))

    @property
    def family(self) -> str:
        return " + ".join(self.families)

    @property
    def corpora(self) -> list[str]:
        return list(dict.fromkeys(r.corpus for r in self.runs))

    @property
    def vocab_size(self) -> int:
        """The smallest |V| of the runs: the largest k at which every model can be compared."""
        return min(r.vocab_size for r in self.runs)

    @property
    def models(self) -> pd.DataFrame:
        """family, model, S, vocab_size; one row per model, by family then S."""
        rows = [
            {"family": r.family, "model": r.model, "S": r.S, "vocab_size": r.vocab_size} for r in self.runs
        ]
        return (
            pd.DataFrame(rows)
            .drop_duplicates(["family", "model"])
            .sort_values(["family", "S"], ignore_index=True)
        )

    def stats(self, model: str, corpus: str, family: str | None = None) -> TokenStats:
        """The per-token statistics of one run (read from the cache now when the study holds only
        its summary)."""
        for r in self.runs:
            if r.model == model and r.corpus == corpus and (family is None or r.family == family):
                return r.token_stats()
        raise NotFoundError(
            f"no run for model {model!r} on corpus {corpus!r}; models: {list(self.models['model'])}"
        )

    def subset(
        self, families: str | Iterable[str] | None = None, corpora: str | Iterable[str] | None = None
    ) -> Study:
        """The runs of some families / corpora, sharing the precomputed curves (no recomputation)."""
        fams, corps = as_list(families), as_list(corpora)
        for name, chosen, known in (("family", fams, self.families), ("corpus", corps, self.corpora)):
            unknown = sorted(set(chosen or ()) - set(known))
            if unknown:
                raise InvalidArgumentError(f"unknown {name} {unknown}; this study has {known}")
        key = (tuple(fams or ()), tuple(corps or ()))
        if key not in self._subsets:
            runs = [
                r
                for r in self.runs
                if (fams is None or r.family in fams) and (corps is None or r.corpus in corps)
            ]
            self._subsets[key] = Study(runs, self.ties, self.level, curves=self.curves)
        return self._subsets[key]

    def runs_on(self, corpora: Sequence[str] | None) -> list[Run]:
        """The runs on `corpora` (every run when None)."""
        return self.runs if corpora is None else self.subset(corpora=corpora).runs

    def at_step(self, step: int | None = None) -> Study:
        """The runs at one training step, for the size-only analyses (k-sweeps, emergence,
        lognormal) on a study of checkpoints: `step`, or with None each model's last checkpoint
        in the study (a run without a step counts as final)."""
        if step is None:

            def key(r: Run) -> tuple[str, str, str]:
                return (r.family, model_of_label(r.model, r.revision), r.corpus)

            def position(r: Run) -> float:
                return math.inf if r.step is None else r.step

            last: dict[tuple[str, str, str], float] = {}
            for r in self.runs:
                last[key(r)] = max(last.get(key(r), -math.inf), position(r))
            runs = [r for r in self.runs if position(r) == last[key(r)]]
        else:
            runs = [r for r in self.runs if r.step == step]
            if not runs:
                steps = sorted({r.step for r in self.runs if r.step is not None})
                raise InvalidArgumentError(f"no run at step {step}; this study has steps {steps}")
        return Study(runs, self.ties, self.level, curves=self.curves)

    def check_one_step(self, what: str) -> None:
        """Size-only analyses compare models at one training step: refuse a mix of steps (`what`
        names the analysis in the error)."""
        steps = {r.step for r in self.runs}
        if len(steps) > 1:
            shown = ", ".join("final" if s is None else str(s) for s in sorted(steps, key=lambda s: s or 0))
            raise InvalidArgumentError(
                f"{what} compares model sizes at one training step, and this study holds steps {shown}; "
                "take one with study.at_step() (each model's last) or study.at_step(step)"
            )

    @property
    def has_training(self) -> bool:
        """Whether some run is a training checkpoint (has a revision or a D)."""
        return any(r.revision is not None or r.D is not None for r in self.runs)

    # ---- tables ----------------------------------------------------------------------------
    def points(
        self, ks: Iterable[int] | int, corpora: Sequence[str] | None = None, n_boot: int = 0, seed: int = 0
    ) -> pd.DataFrame:
        """RBP_k per run and k from the cached curves: family, corpus, model, S, k, rbp,
        neg_log_rbp, n_tokens (after S also revision, step, D, C when the study holds
        checkpoints, `has_training`); with n_boot > 0 also the document-bootstrap percentile interval
        of -log RBP_k (neg_log_rbp_low, neg_log_rbp_high; `rbplab.analysis.metrics.bootstrap_ci`).

        Examples
        --------
        >>> from rbplab.study.study import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> points = study.points([1, 10])
        >>> list(points.columns)
        ['family', 'corpus', 'model', 'S', 'k', 'rbp', 'neg_log_rbp', 'n_tokens']
        >>> points[["model", "k", "neg_log_rbp"]].head(2).round(4)
                 model   k  neg_log_rbp
        0  synthetic-0   1       2.3645
        1  synthetic-0  10       0.8416
        """
        ks = metrics.as_ks(ks, self.vocab_size)
        runs = self.runs_on(corpora)
        # One frame from stacked arrays: a slider callback calls this, so no per-run concat.
        rbp = np.concatenate([self.curves[(r.family, r.model, r.corpus)].rbp(ks) for r in runs])
        n = len(ks)
        with np.errstate(divide="ignore"):
            neg_log = -np.log(rbp)
        frame = pd.DataFrame(
            {
                "family": np.repeat([r.family for r in runs], n),
                "corpus": np.repeat([r.corpus for r in runs], n),
                "model": np.repeat([r.model for r in runs], n),
                "S": np.repeat([r.S for r in runs], n),
                "k": np.tile(ks, len(runs)),
                "rbp": rbp,
                "neg_log_rbp": neg_log,
                "n_tokens": np.repeat([r.n_tokens for r in runs], n),
            }
        )
        if self.has_training:  # revision, step, D, C after S, only for studies of checkpoints
            for offset, name in enumerate(TRAINING_FIELDS):
                frame.insert(4 + offset, name, _training_column(runs, name).repeat(n))
        if n_boot > 0:
            lo, hi = [], []
            for r in runs:
                ci = metrics.bootstrap_ci(r.stats, ks, self.ties, n_boot, self.level, seed)
                ci = ci[ci["metric"] == "rbp"]
                with np.errstate(divide="ignore"):  # -log is decreasing: the interval flips
                    lo.append(-np.log(ci["estimate_high"].to_numpy()))
                    hi.append(-np.log(ci["estimate_low"].to_numpy()))
            frame["neg_log_rbp_low"], frame["neg_log_rbp_high"] = np.concatenate(lo), np.concatenate(hi)
        return frame

    def run_table(self) -> pd.DataFrame:
        """Per run: family, corpus, model, S, n_tokens, n_docs, ce, mean_p, rbp_1 (after S also
        revision, step, D, C when the study holds checkpoints, `has_training`)."""
        rows = []
        training = self.has_training
        for r in self.runs:
            rows.append(
                {"family": r.family, "corpus": r.corpus, "model": r.model, "S": r.S}
                | (r.training if training else {})
                | {"n_tokens": r.n_tokens, "n_docs": r.n_docs}
                | {"ce": metrics.cross_entropy(r.stats), "mean_p": metrics.mean_target_probability(r.stats)}
                | {"rbp_1": self.curves[(r.family, r.model, r.corpus)].rbp(1)}
            )
        return pd.DataFrame(rows)


SYNTHETIC = "synthetic"  # the family name of made-up studies


def synthetic_study(
    sizes: Sequence[float] = (1e5, 3e5, 1e6, 3e6, 1e7, 3e7),
    corpora: Sequence[str] = ("synthetic-a", "synthetic-b"),
    *,
    vocab_size: int = 4096,
    n_tokens: int = 20_000,
    n_docs: int = 40,
    seed: int = 0,
    family: str = SYNTHETIC,
    ties: str = "pessimistic",
) -> Study:
    """A study of made-up models whose ranks are lognormal with a log-location falling in
    log S, so every figure has something to show without running a model (tests, trying
    the widgets). Ranks are drawn from the package's own model, the rounded lognormal
    truncated to [1, |V|] (`rbplab.analysis.lognormal.sample_lognormal_ranks`) with sigma = 2
    for every model, so fitting it recovers (mu, sigma) without a spurious sigma trend. nll is
    a noisy increasing function of the rank.

    Examples
    --------
    >>> from rbplab.study.study import synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> study.families, study.corpora, len(study.runs), study.vocab_size
    (['synthetic'], ['synthetic-a', 'synthetic-b'], 12, 4096)
    """
    rng = np.random.default_rng(seed)
    runs = []
    for c, corpus in enumerate(corpora):
        for i, S in enumerate(sorted(sizes)):
            mu = 2.5 + 0.3 * c - 0.25 * np.log(S / sizes[0])
            ranks = sample_lognormal_ranks(mu, 2.0, vocab_size, n_tokens, seed=int(rng.integers(2**31)))
            doc = np.sort(rng.integers(0, n_docs, n_tokens))
            nll = 0.3 + 0.9 * np.log(ranks) + rng.exponential(0.3, n_tokens)
            stats = TokenStats.from_ranks(ranks, vocab_size, doc=doc, nll=nll)
            runs.append(Run(family, f"{family}-{i}", corpus, float(S), stats))
    return Study(runs, ties=ties)


# The known laws of `synthetic_training_table`: -log RBP_k = E + A S^-alpha + B D^-beta with E, A, B
# falling as powers of k, and cross-entropy with its own exponents.
RBP_LAW = {"E": 0.6, "A": 8.0, "B": 20.0, "alpha": 0.30, "beta": 0.26, "k_power": 0.35}
CE_LAW = {"E": 2.0, "A": 30.0, "B": 60.0, "alpha": 0.34, "beta": 0.28}
SYNTHETIC_SIZES = (2e4, 8e4, 2e5, 6e5, 1.2e6, 2.7e6)
SYNTHETIC_STEPS = (25, 50, 100, 200, 400, 800, 1562)


def rbp_law(k: int) -> dict[str, float]:
    """The known law of -log RBP_k in `synthetic_training_table`: E, A, B, alpha, beta."""
    scale = float(k) ** -RBP_LAW["k_power"]
    return {
        "E": RBP_LAW["E"] * scale,
        "A": RBP_LAW["A"] * scale,
        "B": RBP_LAW["B"] * scale,
        "alpha": RBP_LAW["alpha"],
        "beta": RBP_LAW["beta"],
    }


def synthetic_training_table(
    ks: Sequence[int] = (1, 10, 100),
    sizes: Sequence[float] = SYNTHETIC_SIZES,
    steps: Sequence[int] = SYNTHETIC_STEPS,
    tokens_per_step: int = 2048,
    noise: float = 0.01,
    seed: int = 0,
    family: str = "synthetic",
    corpus: str = "known law",
) -> pd.DataFrame:
    """Checkpoints drawn from known laws L(S, D) (`rbp_law(k)` for -log RBP_k, `CE_LAW` for
    cross-entropy) with log-normal noise, in the columns of `rbplab.study.training.table`: family,
    corpus, model, S, revision, step, D, C, k, neg_log_rbp, ce. For notebooks when no checkpoints
    have been scored, and for tests."""
    common = {"sizes": sizes, "steps": steps, "tokens_per_step": tokens_per_step, "noise": noise}
    ce = synthetic_law_table(**CE_LAW, **common, seed=seed)
    frames = []
    for i, k in enumerate(ks):
        part = synthetic_law_table(**rbp_law(k), **common, seed=seed + 1 + i)
        frames.append(
            part.assign(
                family=family,
                corpus=corpus,
                revision=[f"step-{s}" for s in part["step"]],
                k=int(k),
                neg_log_rbp=part["loss"],
                ce=ce["loss"].to_numpy(),
            )
        )
    columns = ["family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"]
    return pd.concat(frames, ignore_index=True)[columns]


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
    whose plan record (`rbplab.extraction.fingerprints`) holds and whose entry has a summary is
    found from the record alone; any other run is planned (each model described once for the
    whole grid) and its plan recorded, so the next lookup needs no model code."""
    from rbplab.extraction.fingerprints import known_plan
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
        warnings.warn(f"{err}; recomputing the damaged shards now", RbplabWarning, stacklevel=3)
        compute()
        manifest = entry.manifest()
        return entry.summary(manifest), manifest


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
    from rbplab.catalog import registry

    ref = run.model
    S = ref.S if ref.S is not None else float(described_S)
    training = _training(manifest, ref.model, ref.revision, S, registry) if ref.revision else {}
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
    Reads each entry's manifest and its row of the cache index (`rbplab.store.cache.index`: RBP_k
    on the summary's k grid, the totals), or its summary where the index has no sound row; a run
    reads its summary only when an analysis needs more than the row. No model code is imported and
    no model or corpus is opened, so a grid of thousands of entries (`rbplab cache ls`, or a table a
    runner wrote) opens in seconds and in memory of a few KB per entry (docs/benchmarks.md).

    Not checked, since no corpus is opened: how many tokens each entry must hold. Every store check
    is made (`CacheEntry.summary`, or the index rules and the manifest's summary record), but an
    entry missing shards with its records, n_tokens and summary made to match reads as the shorter
    entry; `rbplab cache verify` (or `rbplab extract` of the same request, which repairs it) derives
    the counts from the corpus."""
    from rbplab.store.cache.entry import CacheEntry, open_summaries

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
    # From the cache index where it holds a sound row: a study of thousands of entries then reads
    # no summary until an analysis needs more than RBP_k on the grid and the totals.
    summaries = open_summaries([(entry, manifest) for entry, _, _, manifest in labelled], cache_dir)
    runs = [
        Run(**labels, stats=summary, **training)
        for (_, labels, training, _), summary in zip(labelled, summaries, strict=True)
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
