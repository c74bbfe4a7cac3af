"""Issue 10: nothing read back from a cache entry is trusted unless derived again.

Every case asserts the message, that nothing outside the entry changed and that no numbers came back."""

from __future__ import annotations

import json
import re
import shutil

import pyarrow.parquet as pq
import pytest
from helpers.factories import SPEC, complete_entry, shard_frame
from helpers.untrusted import snapshot

from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import checksum_name, sha256_hex
from rbplab.store.cache.reading import CacheCorruptedError

SPEC_V = {**SPEC, "vocab": {"size": 50, "include_padded": False, "head_rows": 50}}


@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache"


def edit_manifest(entry, change):
    manifest = json.loads(entry.manifest_path.read_text())
    change(manifest)
    entry.manifest_path.write_text(json.dumps(manifest))


def assert_damaged(tmp_path, entry, rule):
    """Reading raises naming the entry and the rule; verify-style problems report it; nothing
    outside the entry changes."""
    outside = snapshot(tmp_path, exclude=entry.path)
    assert any(re.search(rule, p) for p in entry.problems()), entry.problems()
    assert entry.is_complete()  # problems() deletes nothing
    with pytest.raises(CacheCorruptedError, match=rule) as info:
        entry.read_stats()
    assert entry.key[:12] in str(info.value) and "\n" not in str(info.value)
    assert not entry.is_complete()  # marked incomplete: the next extraction recomputes it
    assert snapshot(tmp_path, exclude=entry.path) == outside


@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_path_traversal_in_manifest_never_touches_outside_files(tmp_path, root, kind):
    entry = complete_entry(root, SPEC_V, shards=3)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "victim.txt.sha256").write_text("also precious")
    name = str(victim) if kind == "absolute" else "../../../victim.txt"

    def point_outside(manifest):
        manifest["shards"][1]["file"] = name
        manifest["shards"][1]["sha256"] = "0" * 64  # a checksum failure used to delete the file

    edit_manifest(entry, point_outside)
    assert_damaged(tmp_path, entry, "shard record 1 names file")
    assert victim.read_text() == "precious" and (tmp_path / "victim.txt.sha256").exists()


def test_dropped_last_shard_record(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: m["shards"].pop())
    assert_damaged(tmp_path, entry, r"n_tokens 30 is not the sum of the shard rows \(20\)")


def test_dropped_last_shard_record_with_matching_n_tokens(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: (m["shards"].pop(), m.update(n_tokens=20)))
    assert_damaged(tmp_path, entry, r"shard files \[2\] exist beyond the 2 shards the manifest lists")


def test_duplicated_shard_record(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: m["shards"].__setitem__(2, m["shards"][0]))
    assert_damaged(tmp_path, entry, r"shard records are not exactly 0..2 in order \(indices \[0, 1, 0\]\)")


def test_duplicated_shard_file(tmp_path, root):
    """Shard 0's file and record copied over shard 2's: the shard's own metadata says it is shard 0."""
    entry = complete_entry(root, SPEC_V, shards=3)
    shutil.copy(entry.shard_path(0), entry.shard_path(2))

    def copy_record(manifest):
        manifest["shards"][2] = {**manifest["shards"][0], "index": 2, "file": "shard-00002.parquet"}

    edit_manifest(entry, copy_record)
    assert_damaged(tmp_path, entry, "shard file 2 holds shard 0")


def test_reordered_shard_records(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: m["shards"].reverse())
    assert_damaged(tmp_path, entry, r"not exactly 0..2 in order \(indices \[2, 1, 0\]\)")


def test_wrong_n_tokens(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: m.update(n_tokens=123))
    row = list_entries(root).iloc[0]
    assert row["status"] == "damaged" and row["n_tokens"] is pd_na() and not row["complete"]
    assert_damaged(tmp_path, entry, r"n_tokens 123 is not the sum of the shard rows \(30\)")


def pd_na():
    import pandas as pd

    return pd.NA


def test_wrong_vocab_size(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    edit_manifest(entry, lambda m: m.update(vocab_size=50000))
    assert_damaged(tmp_path, entry, "manifest vocab_size is 50000 but the spec says 50")


def test_swapped_manifest(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    other = complete_entry(root, {**SPEC_V, "ctx": 99}, shards=2)
    shutil.copy(other.manifest_path, entry.manifest_path)
    assert_damaged(tmp_path, entry, "the manifest's key .* is not the entry's key")
    assert len(other.read_stats()) == 20  # the other entry is untouched and still reads


def test_swapped_spec_json(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=3)
    other = complete_entry(root, {**SPEC_V, "ctx": 99}, shards=2)
    shutil.copy(other.path / "spec.json", entry.path / "spec.json")
    assert_damaged(tmp_path, entry, "spec.json hashes to .*, not to the entry's key")
    with entry.lock():  # a writer restores its own spec.json
        assert json.loads((entry.path / "spec.json").read_text()) == SPEC_V


def test_empty_manifest(tmp_path, root):
    entry = complete_entry(root, SPEC_V, shards=2)
    good = complete_entry(root, {**SPEC_V, "ctx": 99}, shards=2)
    entry.manifest_path.write_text("{}")
    table = list_entries(root).set_index("key")  # one bad entry does not break the listing
    assert table.loc[entry.key, "status"] == "damaged" and table.loc[good.key, "status"] == "complete"
    assert_damaged(tmp_path, entry, r"the manifest records no key \(an empty or foreign manifest.json\)")


def test_foreign_shard_is_rejected_on_resume(tmp_path, root):
    other = complete_entry(root, {**SPEC_V, "ctx": 99}, shards=2)
    entry = CacheEntry(root, SPEC_V)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 10))
    for name in ("shard-00001.parquet", "shard-00001.parquet.sha256"):
        shutil.copy(other.path / name, entry.path / name)
    outside = snapshot(tmp_path, exclude=entry.path)
    assert any("shard 1 belongs to another entry" in p for p in entry.problems())
    with entry.lock(), pytest.warns(UserWarning, match="shard 1 belongs to another entry"):
        assert entry.completed_shards() == {0}
    assert not entry.shard_path(1).exists() and snapshot(tmp_path, exclude=entry.path) == outside
    assert len(other.read_stats()) == 20


def test_shard_written_for_another_index_is_rejected_on_resume(root):
    entry = CacheEntry(root, SPEC_V)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 10))
    shutil.copy(entry.shard_path(0), entry.shard_path(1))
    shutil.copy(entry.path / "shard-00000.parquet.sha256", entry.path / "shard-00001.parquet.sha256")
    with entry.lock(), pytest.warns(UserWarning, match="shard file 1 holds shard 0"):
        assert entry.completed_shards() == {0}


def test_verify_style_check_reports_without_deleting(root):
    entry = complete_entry(root, SPEC_V, shards=2)
    data = bytearray(entry.shard_path(1).read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.shard_path(1).write_bytes(bytes(data))
    before = snapshot(root)
    assert entry.problems() == ["shard 1 failed its checksum"]
    assert snapshot(root) == before


def test_a_shard_without_rbplab_metadata_is_refused(tmp_path, root):
    """A shard as a development build before 0.1.0 wrote it (no entry key or shard index in its
    parquet metadata), its checksums made to match: refused like any shard of another entry."""
    entry = complete_entry(root, SPEC_V, shards=3)
    table = pq.read_table(entry.shard_path(1))
    pq.write_table(table.replace_schema_metadata({}), entry.shard_path(1))
    data = entry.shard_path(1).read_bytes()
    record = {"sha256": sha256_hex(data), "rows": table.num_rows, "bytes": len(data)}
    (entry.shard_path(1).parent / checksum_name(entry.shard_path(1).name)).write_text(json.dumps(record))
    edit_manifest(entry, lambda m: m["shards"][1].update(record))
    assert_damaged(tmp_path, entry, r"shard 1 does not record which entry it belongs to \(.*before 0\.1\.0")
