"""Made-up studies, for tests and for trying the notebooks offline (their `synthetic` parameter):
`synthetic_study`, a `Study` (family `SYNTHETIC`) of models whose ranks are lognormal with a
log-location falling in log S, no model needed; and `synthetic_training_table`, checkpoints drawn
from known laws L(S, D) (`rbp_law`, `CE_LAW`) in the columns of `rbplab.study.training.table`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from rbplab.analysis.data_scaling import synthetic_law_table
from rbplab.analysis.lognormal import sample_lognormal_ranks
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats
from rbplab.study.study import Study

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
    >>> from rbplab.study import synthetic_study
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
