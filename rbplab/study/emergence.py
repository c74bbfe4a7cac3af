"""Emergence: the probability that N tokens in a row all rank within the top k, against size.

Functions of a `Study` (paper Figure 7): `table` (sequence success per run, k and N, beside the
independence prediction RBP_k^N and the size law's p_fit) and `fits` (the law of -log p_{N,k}
against S per N, and the joint law C N S^-alpha).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from rbplab.analysis import emergence as _emergence
from rbplab.analysis import metrics
from rbplab.study import size
from rbplab.study.study import Study


def table(
    study: Study,
    ks: Iterable[int] | int,
    ns: Iterable[int] | int,
    corpora: Sequence[str] | None = None,
    n_boot: int = 0,
) -> pd.DataFrame:
    """Sequence success per run, k and N (`rbplab.analysis.emergence.sequence_table`) with the
    columns `rbplab.viz.plots` draws: p_emp (fraction of N-token windows all in the top k),
    p_pred = RBP_k^N, p_fit = exp(-C N S^-alpha) from the RBP_k power law (its alpha and
    prefactor C, so the law can be drawn beyond the measured sizes), and the
    linearised coordinates x = N S^-alpha, neg_log_p_emp, neg_log_p_pred; the ratios
    against RBP_k^N and the two matched baselines (ratio, ratio_position, ratio_doc), with
    document-bootstrap intervals when n_boot > 0 (p_emp_low/high, ratio*_low/high).

    Examples
    --------
    >>> from rbplab.study import emergence, synthetic_study
    >>> study = synthetic_study(n_tokens=2000)
    >>> em = emergence.table(study, [10], [1, 10])
    >>> em[["model", "corpus", "N", "p_emp", "p_pred"]].head(2).round(4)
             model       corpus   N  p_emp  p_pred
    0  synthetic-0  synthetic-a   1  0.431  0.4310
    1  synthetic-0  synthetic-a  10  0.000  0.0002
    """
    study.check_one_step("emergence")
    ks = metrics.as_ks(ks, study.vocab_size)
    ns = np.atleast_1d(np.asarray(ns, dtype=np.int64))
    runs = study.runs_on(corpora)
    table = _emergence.sequence_table(runs, ns=ns, ks=ks, ties=study.ties, n_boot=n_boot, level=study.level)
    table = table.rename(
        columns={
            "p_empirical": "p_emp",
            "p_predicted": "p_pred",
            "p_empirical_low": "p_emp_low",
            "p_empirical_high": "p_emp_high",
        }
    )
    law = size.fits(study, ks, corpora)[["family", "corpus", "k", "alpha", "prefactor"]]
    table = table.merge(law, on=["family", "corpus", "k"], how="left")
    with np.errstate(divide="ignore", invalid="ignore"):
        table["p_fit"] = np.exp(
            -_emergence.sequence_law(table["prefactor"], table["alpha"], table["N"], table["S"])
        )
        table["x"] = table["N"] * table["S"] ** -table["alpha"]
        table["neg_log_p_emp"] = -np.log(table["p_emp"])
        table["neg_log_p_pred"] = -np.log(table["p_pred"])
    return table


def fits(
    study: Study, ks: Iterable[int] = _emergence.DEFAULT_KS, ns: Iterable[int] = _emergence.DEFAULT_NS
) -> pd.DataFrame:
    """Fits of -log p_{N,k} against S per N, and the joint law C N S^-alpha
    (`rbplab.analysis.emergence.sequence_fits`)."""
    study.check_one_step("emergence")
    table = _emergence.sequence_table(
        study.runs, ns=ns, ks=metrics.as_ks(ks, study.vocab_size), ties=study.ties
    )
    return _emergence.sequence_fits(table, level=study.level)
