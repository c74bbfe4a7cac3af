"""Small synthetic inputs shared by several test files (cache entries, power-law tables, token stats)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rbplab.core.stats import TokenStats
from rbplab.store.cache.entry import CacheEntry

SPEC = {"model": {"name": "tiny/model", "revision": None}, "corpus": {"name": "toy", "hash": "ab"}, "ctx": 16}
SIZES = np.geomspace(1e7, 1e10, 6)


def shard_frame(doc: int, n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "doc_index": np.full(n, doc),
            "doc_id": [f"d{doc}"] * n,
            "position": np.arange(1, n + 1),
            "target_id": rng.integers(0, 50, n),
            "n_greater": rng.integers(0, 40, n),
            "n_equal": rng.integers(1, 3, n),
            "nll": rng.random(n) * 5,
        }
    )


def complete_entry(root, spec=SPEC, shards=2) -> CacheEntry:
    entry = CacheEntry(root, spec)
    with entry.lock():
        for i in range(shards):
            entry.write_shard(i, shard_frame(i, 10, seed=i))
        entry.finalize({"vocab_size": 50, "model": {"name": "tiny/model"}})
    return entry


def one_token_entry(root, spec, **manifest) -> CacheEntry:
    """A complete entry of `spec` holding one token (document "d", rank 1, nll 0.5) in one shard;
    `manifest` adds to its manifest (vocab_size 10 unless given)."""
    frame = pd.DataFrame(
        {
            "doc_index": [0],
            "doc_id": ["d"],
            "position": [1],
            "target_id": [2],
            "n_greater": [0],
            "n_equal": [1],
            "nll": [0.5],
        }
    )
    entry = CacheEntry(root, spec)
    with entry.lock():
        entry.write_shard(0, frame)
        entry.finalize({"vocab_size": 10, **manifest})
    return entry


def power_table(alpha=0.08, prefactor=3.0, noise=0.0, seed=0, families=("a",), sizes=SIZES) -> pd.DataFrame:
    """Losses on an exact power law per family (alpha may differ by family), log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for f, fam in enumerate(families):
        a = alpha[f] if np.ndim(alpha) else alpha
        loss = prefactor * (1 + 0.2 * f) * sizes**-a * np.exp(rng.normal(0, noise, len(sizes)))
        rows += [
            {"family": fam, "model": f"{fam}{i}", "S": s, "loss": v}
            for i, (s, v) in enumerate(zip(sizes, loss, strict=True))
        ]
    return pd.DataFrame(rows)


def random_stats(rng, n=3000, vocab=200, n_docs=30, tie_rate=0.3):
    g = rng.integers(0, vocab - 10, n)
    e = np.where(rng.random(n) < tie_rate, rng.integers(2, 10, n), 1)
    doc = np.sort(rng.integers(0, n_docs, n))
    pos = np.arange(n) - np.searchsorted(doc, doc)
    return TokenStats(doc, pos, g, e, rng.exponential(2.0, n), vocab)
