"""The checkpoints a training-dynamics analysis reads: a study of cached checkpoints, or, when
there is none, checkpoints drawn from a known law, said loudly.

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

from rbplab.analysis.data_scaling import data_fits
from rbplab.analysis.joint_laws import JointLaws, joint_laws
from rbplab.grid import Grid
from rbplab.study.loading import load_study
from rbplab.study.study import Study
from rbplab.study.synthetic import synthetic_training_table


@dataclass(frozen=True)
class Training:
    """Checkpoints at thresholds `ks`: their table (`Study.training_table`'s columns), the study
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
        """`Study.joint_laws` (checkpoints and documents resampled together), or, for synthetic
        checkpoints, the same fits resampling checkpoints only."""
        if self.study is not None:
            return self.study.joint_laws(self.ks, n_boot=n_boot)
        return joint_laws(self.table, self.ks, n_boot=n_boot)


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
        grid = Grid.from_mapping(checkpoints) if isinstance(checkpoints, Mapping) else Grid.read(checkpoints)
        study = load_study(grid, cache_dir=cache_dir, ties=ties, extract=extract, outer="model")
        table = study.training_table(ks)
        if len(table) and table.groupby(["corpus", "k"])["D"].nunique().min() >= 2:
            return Training(table, ks, study, None)
        reason = f"the study {checkpoints} names no checkpoints with known D"
    else:
        reason = (
            "no study file with checkpoints was given and the cache holds none of every model on every "
            "corpus (the final models alone have no data axis): `rbplab demo` scores the micro-suite's, "
            '`rbplab run` a study file with `revisions = "log:5"` any family\'s'
        )
    sizes = _family_sizes(families)
    table = synthetic_training_table(ks=ks, **({"sizes": sizes} if sizes and len(sizes) >= 3 else {}))
    return Training(table, ks, None, reason)


def _family_sizes(families: Iterable[str]) -> list[float] | None:
    from rbplab.catalog import registry

    try:
        return sorted({float(S) for f in families for S in registry.family_models(f)["S"]})
    except (registry.UnknownFamilyError, FileNotFoundError, ValueError):
        return None
