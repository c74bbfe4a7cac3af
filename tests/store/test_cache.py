"""Content-addressed cache: keys, atomic shards, checksums, resume, corruption, locks, locations."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.cache_rows import entry_rows
from helpers.factories import SPEC, complete_entry, shard_frame

from rbplab.store.cache import layout
from rbplab.store.cache.admin import remove_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import cache_key
from rbplab.store.cache.reading import CacheCorruptedError, CacheError, ranked_vocab_size


def test_key_is_canonical_and_versioned(monkeypatch):
    reordered = {
        "ctx": 16,
        "corpus": {"hash": "ab", "name": "toy"},
        "model": {"revision": None, "name": "tiny/model"},
    }
    assert cache_key(SPEC) == cache_key(reordered)
    assert len(cache_key(SPEC)) == 64
    assert cache_key(SPEC) != cache_key({**SPEC, "ctx": 32})
    before = cache_key(SPEC)
    monkeypatch.setattr(layout, "RANK_FORMAT_VERSION", layout.RANK_FORMAT_VERSION + 1)
    assert cache_key(SPEC) != before
    with pytest.raises(TypeError, match="JSON-serialisable"):
        cache_key({"x": object()})
    assert cache_key({"p": Path("/a")}) == cache_key({"p": "/a"})


def test_round_trip(tmp_path):
    entry = CacheEntry(tmp_path, SPEC)
    assert not entry.is_complete()
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 10))
        entry.write_shard(1, shard_frame(1, 5, seed=1))
        assert not entry.is_complete()  # shards alone never make an entry complete
        assert entry.completed_shards() == {0, 1}
        manifest = entry.finalize(
            {"vocab_size": 50, "model": {"name": "tiny/model"}, "settings": {"bos": "auto"}}
        )
    assert entry.is_complete()
    assert manifest["n_tokens"] == 15 and manifest["key"] == entry.key and manifest["spec"] == SPEC
    assert [s["rows"] for s in manifest["shards"]] == [10, 5]
    assert manifest["provenance"]["pyarrow"] and manifest["created"]
    assert entry.manifest() == manifest
    frame = entry_rows(entry)
    expected = pd.concat([shard_frame(0, 10), shard_frame(1, 5, seed=1)], ignore_index=True)
    assert [str(t) for t in frame.dtypes[["doc_index", "position", "target_id", "n_greater", "n_equal"]]] == [
        "int32"
    ] * 5
    assert frame["nll"].dtype == np.float32
    assert frame["doc_id"].tolist() == expected["doc_id"].tolist()
    np.testing.assert_array_equal(frame["n_greater"], expected["n_greater"])
    np.testing.assert_allclose(frame["nll"], expected["nll"].astype(np.float32))
    stats = entry.read_stats()
    assert stats.vocab_size == 50 and len(stats) == 15 and stats.n_docs == 2
    np.testing.assert_array_equal(stats.rank(), expected["n_greater"] + expected["n_equal"])
    # an entry can be reopened from a key prefix alone
    assert entry_rows(CacheEntry.open(entry.key[:10], tmp_path)).equals(frame)


def test_shard_schema_is_enforced(tmp_path):
    entry = CacheEntry(tmp_path, SPEC)
    with entry.lock(), pytest.raises(ValueError, match="lacks columns"):
        entry.write_shard(0, shard_frame(0, 3).drop(columns=["nll"]))


def test_finalize_needs_contiguous_shards(tmp_path):
    entry = CacheEntry(tmp_path, SPEC)
    with entry.lock():
        with pytest.raises(CacheError, match="no shards"):
            entry.finalize({"vocab_size": 50})
        entry.write_shard(0, shard_frame(0, 3))
        entry.write_shard(2, shard_frame(2, 3))
        with pytest.raises(CacheError, match=r"shards \[1\] are missing"):
            entry.finalize({"vocab_size": 50})
    assert not entry.is_complete()
    with pytest.raises(CacheError, match="not complete"):
        entry.read_stats()


def test_interrupted_write_is_not_a_shard(tmp_path):
    """What a kill -9 can leave: a temporary file, or a shard renamed in place without its checksum."""
    entry = CacheEntry(tmp_path, SPEC)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 4))
    (entry.path / ".shard-00001.parquet.tmp-999-dead").write_bytes(b"partial")
    entry.shard_path(0).rename(entry.shard_path(1))  # a real shard ...
    (entry.path / "shard-00001.parquet.sha256").unlink(missing_ok=True)  # ... whose checksum never landed
    assert entry.completed_shards() == set()  # readers never trust it
    assert entry.shard_path(1).exists()  # but only the lock holder cleans up
    with entry.lock():
        assert entry.completed_shards() == set()
        assert sorted(p.name for p in entry.path.iterdir()) == ["spec.json"]


def test_corrupted_shard_is_detected_and_removed(tmp_path):
    entry = CacheEntry(tmp_path, SPEC)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 4))
        entry.write_shard(1, shard_frame(1, 4))
    data = bytearray(entry.shard_path(1).read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.shard_path(1).write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="shard 1 failed its checksum"):
        assert entry.completed_shards() == {0}
    assert not entry.shard_path(1).exists()


def test_corrupted_complete_entry_raises_and_can_be_repaired(tmp_path):
    entry = complete_entry(tmp_path)
    data = bytearray(entry.shard_path(0).read_bytes())
    data[-20] ^= 0x01
    entry.shard_path(0).write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="corrupted"), pytest.raises(CacheCorruptedError, match="re-run"):
        entry.read_stats()
    assert not entry.is_complete()  # marked incomplete: the extractor will recompute
    with entry.lock():
        assert entry.completed_shards() == {1}
        entry.write_shard(0, shard_frame(0, 10, seed=0))
        entry.finalize({"vocab_size": 50})
    assert len(entry.read_stats()) == 20


def test_missing_shard_or_broken_manifest_of_complete_entry(tmp_path):
    entry = complete_entry(tmp_path)
    entry.shard_path(1).unlink()
    with pytest.raises(CacheCorruptedError, match="shard 1 is missing"):
        entry.read_stats()
    assert not entry.is_complete()
    other = complete_entry(tmp_path, {**SPEC, "ctx": 99})
    other.manifest_path.write_text("{truncated")
    with pytest.raises(CacheCorruptedError, match="manifest is unreadable"):
        other.manifest()
    assert not other.is_complete()


def test_second_writer_is_locked_out(tmp_path):
    first, second = CacheEntry(tmp_path, SPEC), CacheEntry(tmp_path, SPEC)
    with first.lock():
        with pytest.raises(CacheError, match="locked by another process"):
            with second.lock(timeout=0.05):
                pass
        with first.lock():  # re-entrant for the holder
            assert first.locked
    with second.lock(timeout=0.05):
        assert second.locked


def test_lock_is_shared_between_processes(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from rbplab.store.cache.entry import CacheEntry
        entry = CacheEntry({str(tmp_path)!r}, {SPEC!r})
        with entry.lock():
            print("locked", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        entry = CacheEntry(tmp_path, SPEC)
        with pytest.raises(CacheError, match="locked"):
            with entry.lock(timeout=0.1):
                pass
        with pytest.raises(CacheError, match="being written"):
            remove_entries(entry.key[:8], root=tmp_path)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
        with entry.lock(timeout=10):
            entry.write_shard(0, shard_frame(0, 2))
    finally:
        proc.kill()


def test_open_unknown_or_ambiguous_key(tmp_path):
    with pytest.raises(CacheError, match="no cache entry"):
        CacheEntry.open("abc", tmp_path)
    complete_entry(tmp_path)
    complete_entry(tmp_path, {**SPEC, "ctx": 1})
    with pytest.raises(CacheError, match="matches 2"):
        CacheEntry.open("", tmp_path)


def test_a_manifest_without_vocab_size_is_refused_with_what_to_do(tmp_path):
    entry = complete_entry(tmp_path)  # SPEC records no vocab: |V| is the manifest's
    assert entry.read_stats().vocab_size == 50
    # as a development build before 0.1.0 wrote it: |V| only in the model info
    manifest = json.loads(entry.manifest_path.read_text())
    del manifest["vocab_size"]
    manifest["model"] = {"vocab_size": 50, "head_rows": 64}
    entry.manifest_path.write_text(json.dumps(manifest))
    key = entry.key[:12]
    with pytest.raises(CacheError, match=rf"^cache entry {key}: its manifest records no vocab_size") as info:
        entry.read_stats()
    assert f"rbplab cache rm {key}, then rbplab extract" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CacheError, match="records no vocab_size"):
        ranked_vocab_size({"model": {"vocab_size": 50}, "settings": {"include_padded_vocab": True}})
    writer = CacheEntry(tmp_path, {**SPEC, "ctx": 99})
    with writer.lock():
        writer.write_shard(0, shard_frame(0, 3))
        with pytest.raises(CacheError, match="neither its spec nor the manifest gives vocab_size"):
            writer.finalize({"model": {"vocab_size": 50, "head_rows": 64}})
    assert not writer.is_complete()
    assert json.loads((entry.path / "spec.json").read_text()) == SPEC
