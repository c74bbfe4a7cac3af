"""Cache location: root precedence, unwritable or full locations, atomic writes that clean up."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from helpers.factories import SPEC, shard_frame

from rbplab.store import files as cache_location
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.files import CacheLocationError, cache_root


def test_cache_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RBPLAB_CACHE", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "rbplab"
    monkeypatch.setenv("RBPLAB_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    entry = CacheEntry(blocker / "cache", SPEC)
    with pytest.raises(CacheLocationError, match=r"--cache-dir|RBPLAB_CACHE") as err:
        with entry.lock():
            pass
    assert str(blocker) in str(err.value)


def test_permission_denied(tmp_path, monkeypatch):
    real_mkdir = Path.mkdir

    def deny(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path / "ro")):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", deny)
    with pytest.raises(CacheLocationError, match="permission denied") as err:
        with CacheEntry(tmp_path / "ro", SPEC).lock():
            pass
    assert str(tmp_path / "ro") in str(err.value) and "RBPLAB_CACHE" in str(err.value)


def test_low_free_space_is_refused_up_front(tmp_path, monkeypatch):
    monkeypatch.setattr(
        cache_location.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1024, 1000, 24)
    )
    with pytest.raises(CacheLocationError, match="free") as err:
        with CacheEntry(tmp_path, SPEC).lock():
            pass
    assert err.value.errno == errno.ENOSPC and str(tmp_path) in str(err.value)


def test_disk_full_mid_write_cleans_up(tmp_path, monkeypatch):
    entry = CacheEntry(tmp_path, SPEC)
    with entry.lock():
        entry.write_shard(0, shard_frame(0, 4))
        real_fsync = os.fsync

        def full(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(cache_location.os, "fsync", full)
        with pytest.raises(CacheLocationError, match="no space left") as err:
            entry.write_shard(1, shard_frame(1, 4))
        monkeypatch.setattr(cache_location.os, "fsync", real_fsync)
        assert str(entry.shard_path(1)) in str(err.value)
        assert not list(entry.path.glob(".*tmp*"))  # temporary removed
        assert entry.completed_shards() == {0}
    assert not entry.is_complete()
