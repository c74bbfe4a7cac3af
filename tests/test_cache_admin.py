"""Cache administration: listing entries and removing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rbplab import cache_admin
from rbplab.cache import CacheEntry, CacheError
from rbplab.cache_admin import list_entries, remove_entries

SPEC = {"model": {"name": "tiny/model", "revision": None}, "corpus": {"name": "toy", "hash": "ab"}, "ctx": 16}


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


def test_list_and_remove(tmp_path):
    assert list(list_entries(tmp_path).columns) == cache_admin.ENTRY_COLUMNS and list_entries(tmp_path).empty
    done = complete_entry(tmp_path)
    partial = CacheEntry(tmp_path, {**SPEC, "corpus": {"name": "other"}})
    with partial.lock():
        partial.write_shard(0, shard_frame(0, 7))
    table = list_entries(tmp_path).set_index("key")
    assert table.loc[done.key, "complete"] and not table.loc[partial.key, "complete"]
    assert (
        table.loc[done.key, "n_tokens"] == 20 and table.loc[partial.key, "n_tokens"] == 7
    )  # progress so far
    assert table.loc[done.key, "model"] == "tiny/model" and table.loc[partial.key, "corpus"] == "other"
    assert table.loc[done.key, "size_bytes"] > 0 and Path(table.loc[done.key, "path"]) == done.path
    with pytest.raises(CacheError, match="no cache entry matches"):
        remove_entries("zzzz", root=tmp_path)
    assert remove_entries([], root=tmp_path, incomplete=True) == [partial.key]
    assert list_entries(tmp_path)["key"].tolist() == [done.key]
    assert remove_entries(done.key[:6], root=tmp_path) == [done.key]
    assert list_entries(tmp_path).empty and not done.path.exists()
