"""Loading a `Study` through the extraction cache: every model of some families on some corpora.

A cache hit only reads parquet; missing runs are extracted first (`rbplab.extraction`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.core.runs import Run, run_label
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.core.stats import check_ties
from rbplab.store.corpora import Corpus, LazyCorpus, open_corpus
from rbplab.study.study import Study, as_list


def default_corpora() -> list[str]:
    """The corpora bundled in data/corpora (the offline default)."""
    from rbplab.store.corpora import list_corpora

    table = list_corpora()
    return table.loc[table["origin"] == "bundled", "name"].tolist()


def _corpus_label(spec: object) -> str:
    # Corpus objects carry a name; bundled and hub names stay as they are; a path is labelled by its stem.
    if isinstance(spec, (Corpus, LazyCorpus)):
        return str(spec.name)
    spec = str(spec)
    if spec.startswith("hub:"):
        return spec.split("@", 1)[0]
    if "/" not in spec and not spec.endswith((".jsonl", ".gz", ".txt")):
        return spec
    return Path(spec).name.split(".")[0]


def load_study(
    families: str | Iterable[str] = "micro",
    corpora: str | Corpus | LazyCorpus | Iterable[str | Corpus | LazyCorpus] | None = None,
    settings: ExtractionSettings | Mapping[str, Any] | None = None,
    *,
    models: Iterable[str] | None = None,
    revisions: str | Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    progress: bool | Callable[[str], None] = False,
    **overrides: Any,
) -> Study:
    """Rank statistics of every model of `families` on every corpus, through the cache.

    families: registry family names (`rbplab families`); models: optional subset of their
    short names; revisions: checkpoints of every model, by name or ``"log:N"`` (N log-spaced ones
    from its schedule), reported as ``model@revision`` with step, D and C (default: the final
    model); corpora: bundled names, ``hub:<name>`` or paths (default: every bundled
    corpus); settings: how the runs were scored (`rbplab.core.ExtractionSettings`; its fields
    may also be given as keywords, e.g. max_tokens=2000). Runs missing from the cache are
    extracted (`rbplab.extraction.load_stats`), so the first call may run models; later calls
    only read parquet. `progress` may be True (extraction progress bars) or a callable
    receiving one line per run. Made-up studies come from `synthetic_study`, not from here.
    """
    check_ties(ties)
    settings = resolve_settings(settings, **overrides)
    fams = as_list(families) or []
    if not fams:
        raise ValueError("give at least one model family, e.g. 'micro'")
    from rbplab.extraction.pipeline import load_run
    from rbplab.extraction.sources import ModelSpec
    from rbplab.store import registry, schedules

    corpus_specs = as_list(corpora) or default_corpora()
    if not corpus_specs:
        raise ValueError("no corpora given and none bundled in data/corpora")
    members = pd.concat([registry.family_models(f) for f in fams], ignore_index=True)
    if models is not None:
        wanted = set(as_list(models))
        unknown = sorted(wanted - set(members["model"]))
        if unknown:
            raise ValueError(
                f"models {unknown} are not in families {fams}; members: {list(members['model'])}"
            )
        members = members[members["model"].isin(wanted)]
    # Every revision is checked against its schedule before any model runs.
    chosen = {
        row.model: schedules.select_revisions(row.model, revisions) if revisions is not None else [None]
        for row in members.itertuples()
    }
    say = progress if callable(progress) else None
    # Each corpus is opened once per study and the object handed to every model: a hub corpus
    # resolves its commit here and reads its documents only if some run is not cached, once.
    opened = [spec if isinstance(spec, (Corpus, LazyCorpus)) else open_corpus(spec) for spec in corpus_specs]
    runs = []
    for spec, corpus in zip(corpus_specs, opened, strict=True):
        for row in members.itertuples():
            for revision in chosen[row.model]:
                label = run_label(row.model, revision)
                if say:
                    say(f"{row.family}/{label} on {_corpus_label(spec)}")
                stats, manifest = load_run(
                    ModelSpec(registry.resolve_source(row.source), revision=revision),
                    corpus,
                    settings,
                    cache_dir=cache_dir,
                    progress=progress is True,
                )
                S = float(row.S)
                training = _training(manifest, row.model, revision, S, schedules) if revision else {}
                runs.append(Run(row.family, label, _corpus_label(spec), S, stats, **training))
    return Study(runs, ties=ties, level=level)


def load_study_file(
    path: str | Path | Mapping[str, Any],
    *,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
) -> Study:
    """The study a study file names (`rbplab run STUDY.toml`), read from the cache: the grid that
    was run is the grid that is analysed. `path` may also be the file's table as a dict (e.g.
    ``{"families": ["micro"], "corpora": ["prose"], "revisions": "log:5"}``). A model checkpoint
    is reported as ``model@revision``; a model outside the registry gets its S from its config
    (a local directory) and family ``custom``. A checkpoint's run carries its revision, step,
    tokens seen D and compute C (from the cache manifest's ``training`` block, else the model's
    checkpoint schedule)."""
    from rbplab.extraction.pipeline import load_run
    from rbplab.extraction.sources import ModelSpec
    from rbplab.runner.studyfile import parse_study, read_study_file
    from rbplab.store import schedules
    from rbplab.store.sizes import nonembedding_params

    check_ties(ties)
    study = parse_study(path) if isinstance(path, Mapping) else read_study_file(path)
    opened = [open_corpus(c) for c in study.corpora]
    runs = []
    for member in study.members:
        source = member.loadable()
        S = member.S if member.S is not None else float(nonembedding_params(source))
        for revision in study.revisions_of(member.model):
            label = run_label(member.model, revision)
            for spec, corpus in zip(study.corpora, opened, strict=True):
                stats, manifest = load_run(
                    ModelSpec(source, revision=revision),
                    corpus,
                    study.settings,
                    cache_dir=cache_dir,
                    progress=False,
                )
                training = _training(manifest, member.model, revision, S, schedules) if revision else {}
                runs.append(Run(member.family or "custom", label, _corpus_label(spec), S, stats, **training))
    return Study(runs, ties=ties, level=level)


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
        "C": None if D is None else 6.0 * S * float(D),
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
) -> Study:
    """The study a notebook's parameters name, each source chosen explicitly: `synthetic` (made-up
    models, `synthetic_study`), else a `study_file` (`load_study_file`), else families x corpora
    through the cache (`load_study`)."""
    if synthetic:
        from rbplab.study.synthetic import synthetic_study

        return synthetic_study(ties=ties)
    if study_file:
        return load_study_file(study_file, cache_dir=cache_dir, ties=ties)
    return load_study(families, corpora, settings, models=models, cache_dir=cache_dir, ties=ties)
