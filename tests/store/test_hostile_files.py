"""Issue 20: hostile files in a cache entry, not only hostile JSON.

Every case of `helpers.hostile.CASES` (FIFOs, links to /dev/zero, 20 GiB sparse shards, entry and
prefix folders linked out of the cache, manifest.json as a folder, garbage .sha256 files) is
reported by `cache verify` and `cache ls`, refused by reads, and never hangs (SIGALRM guard) or
changes anything outside the cache. Then the safe reader itself, writers facing the same files,
an interrupted `cache rm`, and the bounds the spec puts on shard records."""

from __future__ import annotations

import errno
import json
import os
import re
import warnings
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.factories import shard_frame
from helpers.hostile import CASES, HUGE, SPEC_V, entry_with_new_prefix, hostile_file, no_hang
from helpers.untrusted import snapshot

from rbplab.store.cache import entry as entry_module
from rbplab.store.cache import entry_rules, layout
from rbplab.store.cache.admin import list_entries, remove_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
from rbplab.store.files import UnsafeFileError, read_entry_file


@pytest.fixture
def outside(tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious.txt").write_text("not the cache's")
    return folder


@pytest.mark.parametrize("case", CASES, ids=[c.damage.__name__ for c in CASES])
def test_hostile_file_is_reported_and_refused(tmp_path, outside, capsys, case):
    root = tmp_path / "cache"
    good = entry_with_new_prefix(root, set(), shards=2)
    entry = entry_with_new_prefix(root, {good.key[:2]})
    expected = case.damage(entry, outside)
    outside_before = snapshot(outside)
    with no_hang():
        status, out, err = run(capsys, "cache", "--cache-dir", root, "verify", "--no-derive")
    assert status == 1 and "Traceback" not in err, err
    assert re.search(rf"^CORRUPT  {entry.key[:12]}  {expected}", out, re.M), out
    assert f"ok       {good.key[:12]}" in out
    with no_hang():
        table = list_entries(root).set_index("key")
    assert table.loc[entry.key, "status"] == "damaged" and table.loc[good.key, "status"] == "complete"
    with no_hang(), warnings.catch_warnings(), pytest.raises(CacheCorruptedError) as info:
        warnings.simplefilter("ignore")
        CacheEntry(root, entry.spec).read_stats()
    assert entry.key[:12] in str(info.value) and "\n" not in str(info.value)
    assert len(good.read_stats()) == 20  # the sound entry next to it still reads
    assert snapshot(outside) == outside_before


@pytest.mark.parametrize("case", CASES, ids=[c.damage.__name__ for c in CASES])
def test_writers_never_write_through_hostile_files(tmp_path, outside, case):
    """A writer either refuses (a linked entry or prefix folder) or clears the odd item first and
    then writes inside the entry; outside the cache nothing changes, /dev/zero is never opened."""
    root = tmp_path / "cache"
    entry = entry_with_new_prefix(root, set())
    case.damage(entry, outside)
    outside_before = snapshot(outside)
    writer = CacheEntry(root, entry.spec)
    with no_hang(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "folder linked" in case.name:
            with pytest.raises(CacheError, match="refusing to write through it"):
                with writer.lock():
                    pass
        else:
            with writer.lock():
                done = writer.completed_shards()
                for index in sorted({0, 1, 2} - done):
                    writer.write_shard(index, shard_frame(index, 10, seed=index))
                writer.finalize({"vocab_size": 50})
            assert len(writer.read_stats()) == 30
    assert snapshot(outside) == outside_before


def test_verify_says_when_counts_cannot_be_derived(tmp_path, capsys):
    entry = entry_with_new_prefix(tmp_path, set())
    status, out, _ = run(capsys, "cache", "--cache-dir", tmp_path, "verify")
    assert status == 0
    assert re.search(
        rf"^ok       {entry.key[:12]}  token and shard counts not derived \(cannot derive the token and "
        r"shard counts of cache entry .*: its spec.json is not one this rbplab writes .*rbplab cache rm",
        out,
        re.M,
    ), out


# ---------------------------------------------------------------------------------------------
# The safe reader


def test_read_entry_file_reads_only_regular_files_inside_the_entry(tmp_path):
    entry_dir = tmp_path / "ab" / "abcdef"
    entry_dir.mkdir(parents=True)
    (entry_dir / "ok.json").write_bytes(b"12345")
    assert read_entry_file(entry_dir / "ok.json", entry_dir, 5) == b"12345"
    with pytest.raises(UnsafeFileError, match="ok.json holds 5 bytes, more than the 4 it can") as info:
        read_entry_file(entry_dir / "ok.json", entry_dir, 4)
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FileNotFoundError):
        read_entry_file(entry_dir / "missing", entry_dir, 10)
    with pytest.raises(UnsafeFileError, match="is not a file directly inside"):
        read_entry_file(entry_dir / "sub" / "ok.json", entry_dir, 10)
    with pytest.raises(UnsafeFileError, match="is not a file directly inside"):
        read_entry_file(entry_dir / ".." / "x", entry_dir, 10)
    hostile_file(entry_dir / "fifo", "fifo")
    hostile_file(entry_dir / "zero", "/dev/zero")
    (entry_dir / "inner-link").symlink_to(entry_dir / "ok.json")  # even a link inside the entry
    hostile_file(entry_dir / "folder", "folder")
    with no_hang(5):
        for name, what in [
            ("fifo", "a FIFO"),
            ("zero", "a symbolic link to /dev/zero"),
            ("inner-link", "a symbolic link"),
            ("folder", "a directory"),
        ]:
            with pytest.raises(UnsafeFileError, match=f"{name} is {what}.*, not a regular file"):
                read_entry_file(entry_dir / name, entry_dir, 10)


def test_read_entry_file_refuses_linked_entry_and_prefix_folders(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "spec.json").write_text("{}")
    linked_entry = tmp_path / "cache" / "ab" / "abcdef"
    linked_entry.parent.mkdir(parents=True)
    linked_entry.symlink_to(real)
    with pytest.raises(UnsafeFileError, match="the entry folder is a symbolic link to .*elsewhere"):
        read_entry_file(linked_entry / "spec.json", linked_entry, 100)
    (tmp_path / "prefix").mkdir()
    (tmp_path / "prefix" / "cdef01").mkdir()
    (tmp_path / "prefix" / "cdef01" / "spec.json").write_text("{}")
    (tmp_path / "cache" / "cd").symlink_to(tmp_path / "prefix")
    inside = tmp_path / "cache" / "cd" / "cdef01"
    with pytest.raises(UnsafeFileError, match="the prefix folder 'cd' is a symbolic link"):
        read_entry_file(inside / "spec.json", inside, 100)
    # the cache root itself may be a link (a cache moved to another disk)
    (tmp_path / "moved").symlink_to(tmp_path / "cache")
    real_entry = tmp_path / "cache" / "ef" / "ef0123"
    real_entry.mkdir(parents=True)
    (real_entry / "spec.json").write_text("{}")
    via_link = tmp_path / "moved" / "ef" / "ef0123"
    assert read_entry_file(via_link / "spec.json", via_link, 100) == b"{}"


def test_root_that_is_a_link_still_works(tmp_path):
    real = tmp_path / "real-cache"
    entry = entry_with_new_prefix(real, set())
    (tmp_path / "cache").symlink_to(real)
    again = CacheEntry(tmp_path / "cache", entry.spec)
    assert again.problems() == [] and len(again.read_stats()) == 30
    with again.lock():
        pass


# ---------------------------------------------------------------------------------------------
# Writers


def test_manifest_folder_with_contents_stops_the_writer_with_a_clear_error(tmp_path, outside):
    entry = entry_with_new_prefix(tmp_path / "cache", set())
    entry.manifest_path.unlink()
    entry.manifest_path.mkdir()
    (entry.manifest_path / "something").write_text("x")
    assert entry.is_complete()  # a manifest.json of any kind: damaged, never a resumable "partial"
    with pytest.raises(
        CacheError, match=r"manifest.json is a directory, not a regular file and cannot be removed .*by hand"
    ):
        with entry.lock():
            pass
    with pytest.raises(CacheError, match="holds files the cache did not write"):
        remove_entries(entry.key[:8], root=tmp_path / "cache")


def test_empty_manifest_folder_is_cleared_and_the_entry_resumes(tmp_path):
    entry = entry_with_new_prefix(tmp_path, set())
    entry.manifest_path.unlink()
    entry.manifest_path.mkdir()
    with pytest.warns(UserWarning, match="manifest.json is a directory, not a regular file; it was removed"):
        with entry.lock():
            assert not entry.is_complete() and entry.completed_shards() == {0, 1, 2}
            entry.finalize({"vocab_size": 50})
    assert entry.problems() == [] and len(entry.read_stats()) == 30


def test_lock_file_that_is_a_link_is_refused(tmp_path, outside):
    entry = entry_with_new_prefix(tmp_path / "cache", set())
    entry.lock_path.unlink()  # the lock file the entry's writer left (lock files are kept)
    entry.lock_path.symlink_to(outside / "precious.txt")
    with pytest.raises(CacheError, match=r"its lock file .* is a symbolic link to .*precious.txt"):
        with entry.lock():
            pass
    assert (outside / "precious.txt").read_text() == "not the cache's"


def test_locks_folder_that_is_a_link_is_refused(tmp_path, outside):
    root = tmp_path / "cache"
    entry = entry_with_new_prefix(root, set())
    for lock in (root / "locks").iterdir():
        lock.unlink()
    (root / "locks").rmdir()
    (root / "locks").symlink_to(outside)
    before = snapshot(outside)
    with pytest.raises(CacheError, match="the locks folder is a symbolic link"):
        with entry.lock():
            pass
    assert snapshot(outside) == before and sorted(p.name for p in outside.iterdir()) == ["precious.txt"]


def test_linked_entry_folder_is_removed_as_a_link(tmp_path, outside, capsys):
    root = tmp_path / "cache"
    entry = entry_with_new_prefix(root, set())
    target = outside / "moved-entry"
    entry.path.rename(target)
    entry.path.symlink_to(target)
    before = snapshot(outside)
    assert remove_entries(entry.key[:8], root=root) == [entry.key]
    assert not os.path.lexists(entry.path) and snapshot(outside) == before


def test_entry_under_linked_prefix_is_not_removed(tmp_path, outside):
    root = tmp_path / "cache"
    entry = entry_with_new_prefix(root, set())
    target = outside / "moved-prefix"
    entry.path.parent.rename(target)
    entry.path.parent.symlink_to(target)
    before = snapshot(outside)
    message = rf"the prefix folder '{entry.key[:2]}' is a symbolic link.*not removed"
    with pytest.raises(CacheError, match=message):
        remove_entries(entry.key[:8], root=root)
    assert snapshot(outside) == before


# ---------------------------------------------------------------------------------------------
# Interrupted removal


def test_interrupted_rm_leaves_an_incomplete_entry_never_a_complete_one(tmp_path, monkeypatch):
    entry = entry_with_new_prefix(tmp_path, set())
    real_unlink = Path.unlink
    deleted: list[str] = []

    def killed_after_first(self, *args, **kwargs):
        if deleted:
            raise KeyboardInterrupt  # the process dies after its first deletion
        deleted.append(self.name)
        return real_unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", killed_after_first)
    with pytest.raises(KeyboardInterrupt):
        remove_entries(entry.key[:8], root=tmp_path)
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert deleted == ["manifest.json"]
    row = list_entries(tmp_path).set_index("key").loc[entry.key]
    assert row["status"] == "incomplete" and not row["complete"]
    assert remove_entries([], root=tmp_path, incomplete=True) == [entry.key]
    assert list_entries(tmp_path).empty


def test_interrupted_rm_at_every_step(tmp_path, monkeypatch):
    """Killed after k deletions, for every k: never "complete"; spec.json goes last."""
    entry = entry_with_new_prefix(tmp_path, set())
    n_files = len(list(entry.path.iterdir()))
    real_unlink = Path.unlink
    for k in range(1, n_files):
        entry = entry_with_new_prefix(tmp_path, set()) if not entry.path.exists() else entry
        count = [0]

        def killed(self, *args, _k=k, _count=count, **kwargs):
            if _count[0] == _k:
                raise KeyboardInterrupt
            _count[0] += 1
            return real_unlink(self, *args, **kwargs)

        monkeypatch.setattr(Path, "unlink", killed)
        with pytest.raises(KeyboardInterrupt):
            remove_entries(entry.key[:8], root=tmp_path)
        monkeypatch.setattr(Path, "unlink", real_unlink)
        status = list_entries(tmp_path).set_index("key").loc[entry.key, "status"]
        assert status == "incomplete", (k, status)
        assert (entry.path / "spec.json").exists()
        remove_entries(entry.key[:8], root=tmp_path)


# ---------------------------------------------------------------------------------------------
# Bounds the spec puts on shard records

SPEC_W = {
    **SPEC_V,
    "windows": {"context_length": 8, "shard_tokens": 10},
    "max_tokens": 25,
}


def windowed_entry(root, rows=(10, 10, 5)):
    entry = CacheEntry(root, SPEC_W)
    with entry.lock():
        for index, n in enumerate(rows):
            entry.write_shard(index, shard_frame(index, n, seed=index))
        entry.finalize({"vocab_size": 50})
    return entry


def test_spec_bounds_of_a_sound_entry(tmp_path):
    assert layout.max_shard_rows(SPEC_W) == 10 + 8 - 2
    assert layout.max_shards(SPEC_W) == 25 // 10 + 1
    entry = windowed_entry(tmp_path)
    assert entry.problems() == [] and len(entry.read_stats()) == 25
    with entry.lock(), pytest.raises(ValueError, match=r"shard 3 has 17 rows, more than one shard holds"):
        entry.write_shard(3, shard_frame(3, 17))


def test_finalize_with_the_planned_count_refuses_a_shorter_entry(tmp_path):
    entry = CacheEntry(tmp_path, SPEC_W)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 10))
        entry.write_shard(1, shard_frame(1, 10, seed=1))
        with pytest.raises(CacheError, match=r"shards \[2\] are missing"):
            entry.finalize({"vocab_size": 50}, n_shards=3)
    assert not entry.is_complete()


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((10, 4, 5), r"shard records \[1\] hold fewer than the 10 rows every shard but the last holds"),
        ((10, 10, 17), r"shard record 2 claims 17 rows, more than one shard holds under its spec \(16\)"),
        ((10, 10, 10), r"the shards hold 30 rows, more than max_tokens \(25\)"),
    ],
)
def test_records_outside_the_spec_bounds_are_damage(tmp_path, monkeypatch, rows, message):
    with monkeypatch.context() as patch:  # forge what a writer of this version would refuse
        for module in (entry_module, entry_rules):  # the writer's bound and the records' rule
            patch.setattr(module, "max_shard_rows", lambda spec: 1 << 20)
        entry = windowed_entry(tmp_path, rows)
    assert any(re.search(message, p) for p in entry.problems()), entry.problems()
    with pytest.raises(CacheCorruptedError, match=message):
        entry.read_stats()


def test_huge_record_claims_are_refused_before_reading(tmp_path, monkeypatch):
    """A 20 GiB sparse shard and both its records claiming that size: refused from the records,
    without reading the file (reading it would need 20 GiB of memory)."""
    entry = entry_with_new_prefix(tmp_path, set())
    os.truncate(entry.shard_path(1), HUGE)
    for path in (entry.path / "shard-00001.parquet.sha256",):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "bytes": HUGE}))
    manifest = json.loads(entry.manifest_path.read_text())
    manifest["shards"][1]["bytes"] = HUGE
    entry.manifest_path.write_text(json.dumps(manifest))
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: (opened.append(str(path)), real_open(path, *a, **k))[1]
    )
    assert any("claims 21474836480 bytes" in p for p in entry.problems())
    assert not any(p.endswith("shard-00001.parquet") for p in opened)
