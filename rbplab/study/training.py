"""Training dynamics: a study's checkpoints, their losses against tokens seen D and the joint laws
L(S, D); or, when there are none, checkpoints drawn from a known law, said loudly.

Functions of a `Study`: `table` (one row per checkpoint and k, tidy for
`rbplab.analysis.data_scaling`), `replicates` (paired document-bootstrap replicates of those
losses) and `joint_laws` (the joint laws, resampling checkpoints and documents together).
`open_training` is what notebook 06 (and any script) calls: it loads the checkpoints a study
file or its table names, keeps them when every corpus and k has at least two tokens-seen values,
and otherwise falls back to `synthetic_training_table` (sized like the families' models) with the
reason, so a report can put it in a banner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rbplab.analysis import metrics
from rbplab.analysis.data_scaling import JointLaws, data_fits
from rbplab.analysis.data_scaling import joint_laws as fit_joint_laws
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import model_of_label
from rbplab.grid import Grid
from rbplab.study.loading import load_study
from rbplab.study.study import Study
from rbplab.study.synthetic import synthetic_training_table


def table(study: Study, ks: Iterable[int] | int = (1, 10, 100)) -> pd.DataFrame:
    """The checkpoints of the study, tidy for `rbplab.analysis.data_scaling`: one row per run
    with a known D and per k: family, corpus, model (without its ``@revision``), S, revision,
    step, D, C, k, neg_log_rbp, ce. E.g. ``data_scaling.data_fits(t, y="neg_log_rbp")`` or
    ``joint_fits(t, y="ce", by=["family", "corpus", "k"])``. Empty (same columns) when no
    run has a D."""
    columns = [
        "family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"
    ]  # fmt: skip
    runs = [r for r in study.runs if r.D is not None]
    if not runs:
        return pd.DataFrame(columns=columns)
    ks = metrics.as_ks(ks, study.vocab_size)
    sub = Study(runs, study.ties, study.level, curves=study.curves)
    frame = sub.points(ks)
    ce = {(r.family, r.model, r.corpus): metrics.cross_entropy(r.stats) for r in runs}
    frame["ce"] = [ce[key] for key in zip(frame["family"], frame["model"], frame["corpus"], strict=True)]
    frame["model"] = [
        model_of_label(m, rev) for m, rev in zip(frame["model"], frame["revision"], strict=True)
    ]
    return frame[columns]


def replicates(
    study: Study, corpus: str, ks: Iterable[int] | int, n_rep: int = 200, seed: int = 0
) -> dict[object, np.ndarray]:
    """Paired document-bootstrap replicates of the checkpoints' losses on one corpus, for
    `data_scaling.bootstrap_joint` / `joint_law_table` / `compare_frontiers` (``replicates``):
    {k: -log RBP_k, "ce": CE}, each an array (n_rep, n_checkpoints) whose columns follow the
    rows of `table` for that corpus at one k. Every checkpoint is re-evaluated on the
    same document resample, so the errors of sizes and steps stay paired."""
    runs = [r for r in study.runs if r.D is not None and r.corpus == corpus]
    if not runs:
        raise InvalidArgumentError(
            f"no checkpoint with a known D on corpus {corpus!r}; corpora: {study.corpora}"
        )
    ks = metrics.as_ks(ks, study.vocab_size)
    n_docs = max(r.n_docs for r in runs)
    docs = [metrics.doc_stats(r.stats, ks, study.ties, n_docs) for r in runs]
    reps = metrics.replicate_arrays(docs, n_rep, seed)
    out: dict[object, np.ndarray] = {}
    with np.errstate(divide="ignore"):
        for j, k in enumerate(ks):
            out[int(k)] = -np.log(np.stack([r["rbp"][:, j] for r in reps], axis=1))
    out["ce"] = np.stack([r["ce"] for r in reps], axis=1)
    return out


def joint_laws(study: Study, ks: Iterable[int] = (1, 10, 100), n_boot: int = 200) -> JointLaws:
    """The joint laws L(S, D) of this study's checkpoints (`rbplab.analysis.data_scaling`):
    -log RBP_k at the smallest and largest of `ks` and CE per corpus, each bootstrap
    resampling the checkpoints and, paired across all of them, the corpus's documents.
    `.table()`, `.frontiers(reference="CE")` and `.surface(corpus)` read the same fits."""
    ks = sorted(int(k) for k in ks)
    k_low, k_high = ks[0], ks[-1]

    def paired(corpus: str) -> dict[str, np.ndarray]:
        reps = replicates(study, corpus, [k_low, k_high], n_rep=n_boot)
        return {f"RBP_{k_low}": reps[k_low], f"RBP_{k_high}": reps[k_high], "CE": reps["ce"]}

    return fit_joint_laws(table(study, ks), ks, n_boot=n_boot, replicates=paired)


@dataclass(frozen=True)
class Training:
    """Checkpoints at thresholds `ks`: their table (`table`'s columns), the study
    they came from (None when synthetic) and, when synthetic, why."""

    table: pd.DataFrame
    ks: tuple[int, ...]
    study: Study | None
    synthetic_reason: str | None

    @property
    def banner(self) -> str | None:
        """What a report says loudly when the checkpoints are synthetic (None when they are not)."""
        if self.synthetic_reason is None:
            return None
        return (
            "SYNTHETIC DATA: this notebook analyses checkpoints drawn from a known law "
            f"(rbplab.study.synthetic.synthetic_training_table) because {self.synthetic_reason}. The "
            "fits below should recover that law; they say nothing about real models."
        )

    @property
    def source(self) -> str:
        return "synthetic" if self.synthetic_reason is not None else "checkpoints"

    def data_fits(self) -> pd.DataFrame:
        """Loss against tokens seen D per size (`data_scaling.data_fits`): -log RBP_k at every k
        (quantity "-log RBP_k") and CE (quantity "CE", once: it does not depend on k)."""
        table, k_low = self.table, min(self.ks)
        per_size = [
            data_fits(table, y="neg_log_rbp").assign(quantity="-log RBP_k"),
            data_fits(table[table["k"] == k_low], y="ce").assign(quantity="CE", k=np.nan),
        ]
        return pd.concat(per_size, ignore_index=True)

    def joint_laws(self, n_boot: int = 200) -> JointLaws:
        """`joint_laws` of the study (checkpoints and documents resampled together), or, for
        synthetic checkpoints, the same fits resampling checkpoints only."""
        if self.study is not None:
            return joint_laws(self.study, self.ks, n_boot=n_boot)
        return fit_joint_laws(self.table, self.ks, n_boot=n_boot)


def open_training(
    checkpoints: str | Path | Mapping[str, Any] | None,
    ks: Iterable[int] = (1, 10, 100),
    *,
    families: Iterable[str] = (),
    synthetic: bool = False,
    cache_dir: str | Path | None = None,
    ties: str = "pessimistic",
    extract: bool = False,
) -> Training:
    """The checkpoints a study file (or its table) names, read from the cache; or, with
    `synthetic`, without checkpoints, or when they hold fewer than two tokens-seen values on some
    corpus and k, a synthetic table sized like `families`' models, with the reason."""
    ks = tuple(sorted(int(k) for k in ks))
    if synthetic:
        reason = "`synthetic = True`"
    elif checkpoints:
        grid = Grid.read(checkpoints)
        study = load_study(grid, cache_dir=cache_dir, ties=ties, extract=extract, outer="model")
        found = table(study, ks)
        if len(found) and found.groupby(["corpus", "k"])["D"].nunique().min() >= 2:
            return Training(found, ks, study, None)
        reason = f"the study {checkpoints} names no checkpoints with known D"
    else:
        reason = (
            "no study file with checkpoints was given and the cache holds none of every model on every "
            "corpus (the final models alone have no data axis): `rbplab demo` scores the micro-suite's, "
            '`rbplab run` a study file with `revisions = "log:5"` any family\'s'
        )
    sizes = _family_sizes(families)
    drawn = synthetic_training_table(ks=ks, **({"sizes": sizes} if sizes and len(sizes) >= 3 else {}))
    return Training(drawn, ks, None, reason)


def _family_sizes(families: Iterable[str]) -> list[float] | None:
    from rbplab.catalog import registry

    try:
        return sorted({float(S) for f in families for S in registry.family_models(f)["S"]})
    except (registry.UnknownFamilyError, FileNotFoundError, ValueError):
        return None
