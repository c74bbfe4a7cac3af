"""Cache administration: listing entries and removing them."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.factories import SPEC, complete_entry, shard_frame

from rbplab.store.cache import admin as cache_admin
from rbplab.store.cache.admin import list_entries, remove_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheError


def test_list_and_remove(tmp_path):
    assert list_entries(tmp_path).empty
    assert list(list_entries(tmp_path).columns) == cache_admin.LISTING_COLUMNS
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
        remove_entries("ffffffff", root=tmp_path)
    assert remove_entries([], root=tmp_path, incomplete=True) == [partial.key]
    assert list_entries(tmp_path)["key"].tolist() == [done.key]
    assert remove_entries(done.key[:8], root=tmp_path) == [done.key]
    assert list_entries(tmp_path).empty and not done.path.exists()
