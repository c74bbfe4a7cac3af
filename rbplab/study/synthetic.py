"""Made-up studies: lognormal ranks whose log-location falls with log S, no model needed.

`synthetic_study` builds a `Study` (family `SYNTHETIC`) that every table, figure and widget
can use, for tests and for trying the notebooks offline (their `synthetic` parameter).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
    a noisy increasing function of the rank."""
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
