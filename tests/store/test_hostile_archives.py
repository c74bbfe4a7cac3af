"""Issue 20: archives as hostile input, and imports that are all-or-nothing.

The archive path must be a regular file (a FIFO is refused at once, guarded by SIGALRM); members
must be regular files or entry folders with the cache's own names, sizes bounded before any byte
is read (a 20 GiB sparse member, or a header declaring 20 GiB); an archive refused for any reason
imports nothing, also when the refusal comes from the destination cache; temporary folders of
killed imports are cleaned by the next import and by `cache verify --fix-litter`."""

from __future__ import annotations

import fcntl
import gzip
import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.factories import complete_entry, shard_frame
from helpers.hostile import HUGE, SPEC_V, entry_with_new_prefix, no_hang, sparse_tar
from helpers.untrusted import snapshot

import rbplab.store.archive as archive_module
from rbplab.store.archive import (
    ArchiveError,
    export_entries,
    import_archive,
    remove_stale_imports,
    stale_imports,
)
from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheError


@pytest.fixture
def source(tmp_path):
    return tmp_path / "source"


@pytest.fixture
def target(tmp_path):
    root = tmp_path / "target"
    complete_entry(root, {**SPEC_V, "ctx": 7}, shards=2)  # something already there that must stay
    return root


def visible(root: Path) -> dict[str, bytes]:
    """What a cache holds, lock files aside (taking a lock leaves an empty file)."""
    return {k: v for k, v in snapshot(root).items() if not k.startswith("locks")}


def listing(root: Path) -> dict[str, object]:
    """Every path under `root` (the root itself included, lock files and folders too) with its
    kind and, for a file, its size and bytes: what a refused import must leave exactly as it was."""
    if not os.path.lexists(root):
        return {}
    out: dict[str, object] = {".": "folder"}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            out[name] = ("link", os.readlink(path))
        elif path.is_dir():
            out[name] = "folder"
        else:
            out[name] = (path.stat().st_size, path.read_bytes())
    return out


def assert_refused(target: Path, call, message: str) -> None:
    before = listing(target)
    with no_hang(), pytest.raises(ArchiveError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
    assert listing(target) == before


def two_entries(source: Path, archive: Path) -> tuple[CacheEntry, CacheEntry]:
    taken: set[str] = set()
    first, second = entry_with_new_prefix(source, taken), entry_with_new_prefix(source, taken)
    export_entries([first.key, second.key], archive, root=source)
    return first, second


# ---------------------------------------------------------------------------------------------
# The archive path and its members


def test_fifo_archive_path_is_refused_without_waiting(tmp_path, target, capsys):
    fifo = tmp_path / "runs.tar"
    os.mkfifo(fifo)
    assert_refused(
        target, lambda: import_archive(fifo, root=target), r"runs.tar is a FIFO, not a regular file"
    )
    with no_hang():
        status, out, err = run(capsys, "cache", "--cache-dir", target, "import", fifo)
    assert status == 1 and out == "" and err.count("\n") == 1 and "is a FIFO, not a regular file" in err


def test_folder_or_missing_archive_path_is_refused(tmp_path, target):
    assert_refused(
        target, lambda: import_archive(tmp_path, root=target), "is a directory, not a regular file"
    )
    assert_refused(target, lambda: import_archive(tmp_path / "nope.tar", root=target), "cannot open it")


def test_sparse_20_gib_member_is_refused_before_reading(tmp_path, source, target):
    entry = entry_with_new_prefix(source, set())
    archive = tmp_path / "sparse.tar"
    if not sparse_tar(archive, f"{entry.key}/shard-00000.parquet"):
        pytest.skip("GNU tar is not available to write a sparse member")
    assert archive.stat().st_size < 2**20  # the archive itself is small
    assert_refused(
        target, lambda: import_archive(archive, root=target), "is a sparse file, not a regular file"
    )


def write_tar(path: Path, members: list[tuple[str, bytes | int]]) -> None:
    """A tar file by hand: each (name, data) member, where an int is the size of a member whose
    data is a hole in a sparse archive file (20 GiB of zeros that take no disk)."""
    with open(path, "wb") as handle:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = data if isinstance(data, int) else len(data)
            handle.write(info.tobuf(format=tarfile.GNU_FORMAT))
            if isinstance(data, int):
                handle.seek(-(-data // 512) * 512, os.SEEK_CUR)
            else:
                handle.write(data + b"\0" * (-len(data) % 512))
        handle.write(b"\0" * 1024)


def test_member_declaring_20_gib_is_refused_before_reading(tmp_path, source, target, monkeypatch):
    """A valid archive (a sparse file) whose shard member holds 20 GiB: refused from its header
    and the manifest's record, and not a byte of it is read."""
    entry = entry_with_new_prefix(source, set())
    members = [(f"{entry.key}/{p.name}", p.read_bytes()) for p in sorted(entry.path.iterdir())]
    members = [(n, HUGE if n.endswith("shard-00000.parquet") else d) for n, d in members]
    archive = tmp_path / "huge.tar"
    write_tar(archive, members)
    assert archive.stat().st_size > HUGE and archive.stat().st_blocks * 512 < 2**20
    record = json.loads((entry.path / "shard-00000.parquet.sha256").read_text())
    reads = []
    real_copy = archive_module._copy_member
    monkeypatch.setattr(archive_module, "_copy_member", lambda *a: (reads.append(a[1].name), real_copy(*a)))
    assert_refused(
        target,
        lambda: import_archive(archive, root=target),
        rf"shard-00000.parquet' declares {HUGE} bytes but its manifest records {record['bytes']}",
    )
    assert reads == []


def gzip_bomb(path: Path, key: str, size: int = 300 * 2**20) -> None:
    """A .tar.gz of a few hundred KB whose one shard member declares (and holds) `size` bytes."""
    with gzip.open(path, "wb") as gz:
        info = tarfile.TarInfo(f"{key}/shard-00000.parquet")
        info.size = size
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(size // 2**20):
            gz.write(bytes(2**20))
        gz.write(bytes(1024))


@pytest.mark.parametrize("cache", ["empty", "absent", "in use"])
@pytest.mark.parametrize("kind", ["gzip bomb", "sparse member", "damaged entry", "foreign files"])
def test_a_refused_import_leaves_the_cache_as_it_was(tmp_path, source, kind, cache):
    """Issue 31 item 3: every path and size of the cache, lock files and folders included, is what
    it was before the refused import (it left a locks folder in an empty cache)."""
    root = tmp_path / "cache"
    if cache == "empty":
        root.mkdir()
    elif cache == "in use":
        complete_entry(root, {**SPEC_V, "ctx": 7}, shards=2)
    entry = entry_with_new_prefix(source, set())
    archive = tmp_path / "a.tar"
    if kind == "gzip bomb":
        archive = tmp_path / "bomb.tar.gz"
        gzip_bomb(archive, entry.key)
        assert archive.stat().st_size < 2**20
        message = f"declares {300 * 2**20} bytes"
    elif kind == "sparse member":
        if not sparse_tar(archive, f"{entry.key}/shard-00000.parquet"):
            pytest.skip("GNU tar is not available to write a sparse member")
        message = "is a sparse file, not a regular file"
    elif kind == "damaged entry":
        good = tmp_path / "good.tar"
        export_entries([entry.key], good, root=source)

        def flip(member, data):
            if member.name == f"{entry.key}/shard-00001.parquet":
                data = bytes(b ^ 0xFF if i == len(data) // 2 else b for i, b in enumerate(data))
            return [(member, data)]

        rewrite(good, archive, flip)
        message = rf"entry {entry.key[:12]} is damaged"
    else:
        export_entries([entry.key], archive, root=source)
        dest = root / entry.key[:2] / entry.key
        dest.mkdir(parents=True)
        (dest / "notes.txt").write_text("mine")
        message = "already exists with files the cache did not write"
    assert_refused(root, lambda: import_archive(archive, root=root), message)
    assert cache != "absent" or kind == "foreign files" or not root.exists()


def test_truncated_archive_is_refused(tmp_path, source, target):
    entry = entry_with_new_prefix(source, set())
    archive = tmp_path / "a.tar"
    export_entries([entry.key], archive, root=source)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(archive.read_bytes()[:3000])
    assert_refused(target, lambda: import_archive(cut, root=target), "it is damaged or truncated")


def rewrite(archive: Path, out: Path, change) -> None:
    """Copy `archive` member by member through change(member, data) -> [(member, data), ...]."""
    with tarfile.open(archive) as tar, tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as dst:
        for member in tar:
            for new, data in change(member, tar.extractfile(member).read()):
                new.size = len(data)
                dst.addfile(new, io.BytesIO(data))


def test_shard_member_larger_than_its_manifest_record_is_refused(tmp_path, source, target):
    entry = entry_with_new_prefix(source, set())
    archive, bad = tmp_path / "a.tar", tmp_path / "bad.tar"
    export_entries([entry.key], archive, root=source)

    def grow(member, data):
        return [(member, data + b"\0" * 4096 if member.name.endswith("shard-00001.parquet") else data)]

    rewrite(archive, bad, grow)
    record = json.loads((entry.path / "shard-00001.parquet.sha256").read_text())
    assert_refused(
        target,
        lambda: import_archive(bad, root=target),
        rf"declares {record['bytes'] + 4096} bytes but its manifest records {record['bytes']}",
    )


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (tarfile.SYMTYPE, "is a symbolic link, not a regular file"),
        (tarfile.LNKTYPE, "is a hard link, not a regular file"),
        (tarfile.CHRTYPE, "is a character device, not a regular file"),
        (tarfile.FIFOTYPE, "is a FIFO, not a regular file"),
    ],
)
def test_special_members_are_refused(tmp_path, source, target, kind, message):
    entry = entry_with_new_prefix(source, set())
    archive, bad = tmp_path / "a.tar", tmp_path / "bad.tar"
    export_entries([entry.key], archive, root=source)

    def special(member, data):
        if member.name.endswith("shard-00001.parquet"):
            member.type, member.linkname = kind, "/dev/zero"
            return [(member, b"")]
        return [(member, data)]

    rewrite(archive, bad, special)
    assert_refused(target, lambda: import_archive(bad, root=target), message)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("{key}/notes.txt", "is not a cache file"),
        ("{key}/.spec.json.tmp-1-ab", "is not a cache file"),  # a temporary is not an entry's file
        ("{key}/shard-1.parquet", "is not a cache file"),
        ("{key}/sub/spec.json", "is not a cache file"),
        ("../{key}/spec.json", "is not a cache file"),
        ("{key}/spec.json", "appears twice"),
    ],
)
def test_names_other_than_the_caches_own_are_refused(tmp_path, source, target, name, message):
    entry = entry_with_new_prefix(source, set())
    archive, bad = tmp_path / "a.tar", tmp_path / "bad.tar"
    export_entries([entry.key], archive, root=source)

    def extra(member, data):
        out = [(member, data)]
        if member.name.endswith("spec.json"):
            copy = tarfile.TarInfo(name.format(key=entry.key))
            out.append((copy, data))
        return out

    rewrite(archive, bad, extra)
    assert_refused(
        target,
        lambda: import_archive(bad, root=target),
        re.escape(name.format(key=entry.key)) + ".*" + message,
    )


def test_archive_of_entry_folders_written_by_gnu_tar_imports(tmp_path, source, target):
    """Folder members (``<key>/``) are accepted: an archive made with `tar` from entry folders."""
    entry = entry_with_new_prefix(source, set())
    archive = tmp_path / "by-hand.tar"
    done = subprocess.run(
        ["tar", "-cf", str(archive), "-C", str(entry.path.parent), entry.key], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("GNU tar is not available")
    assert import_archive(archive, root=target) == [(entry.key, "imported")]
    assert len(CacheEntry(target, entry.spec).read_stats()) == 30


# ---------------------------------------------------------------------------------------------
# All or nothing


def test_refused_entry_imports_nothing_of_the_others(tmp_path, source, target):
    archive, bad = tmp_path / "ab.tar", tmp_path / "bad.tar"
    first, second = two_entries(source, archive)
    for damaged in (first, second):  # whichever comes first in the archive

        def flip(member, data, _key=damaged.key):
            if member.name == f"{_key}/shard-00001.parquet":
                data = bytes(b ^ 0xFF if i == len(data) // 2 else b for i, b in enumerate(data))
            return [(member, data)]

        rewrite(archive, bad, flip)
        assert_refused(
            target, lambda: import_archive(bad, root=target), rf"entry {damaged.key[:12]} is damaged"
        )


def test_destination_with_foreign_files_imports_nothing(tmp_path, source, target):
    archive = tmp_path / "ab.tar"
    first, second = two_entries(source, archive)
    for blocked in (first, second):
        dest = target / blocked.key[:2] / blocked.key
        dest.mkdir(parents=True)
        (dest / "notes.txt").write_text("mine")
        assert_refused(
            target,
            lambda: import_archive(archive, root=target),
            rf"entry {blocked.key[:12]} already exists with files the cache did not write \(notes.txt\)",
        )
        (dest / "notes.txt").unlink()
        dest.rmdir()
        dest.parent.rmdir()


def test_destination_under_a_linked_prefix_folder_imports_nothing(tmp_path, source, target):
    archive = tmp_path / "ab.tar"
    first, _ = two_entries(source, archive)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (target / first.key[:2]).symlink_to(elsewhere)
    assert_refused(
        target,
        lambda: import_archive(archive, root=target),
        rf"the prefix folder '{first.key[:2]}' is a symbolic link",
    )
    assert list(elsewhere.iterdir()) == []


def test_entry_being_written_imports_nothing(tmp_path, source, target, monkeypatch):
    archive = tmp_path / "ab.tar"
    _, second = two_entries(source, archive)
    monkeypatch.setattr(archive_module, "LOCK_TIMEOUT", 0.2)
    (target / "locks").mkdir(exist_ok=True)
    fd = os.open(target / "locks" / f"{second.key}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's writer, as filelock takes it
        before = listing(target)
        with pytest.raises(CacheError, match=rf"{second.key[:12]} is being written.*nothing was imported"):
            import_archive(archive, root=target)
        assert listing(target) == before  # not even the first entry's lock file
    finally:
        os.close(fd)
    assert len(import_archive(archive, root=target)) == 2


def test_failed_rename_puts_everything_back(tmp_path, source, target, monkeypatch):
    """The second entry's rename fails: the first one, already in place, is moved back, and the
    incomplete copy it replaced is restored."""
    archive = tmp_path / "ab.tar"
    first, second = two_entries(source, archive)
    stale = CacheEntry(target, first.spec)  # an incomplete copy of the first entry
    with stale.lock():
        stale.write_shard(0, shard_frame(0, 10, seed=0))
    before = visible(target)
    real_rename = os.rename
    calls = []

    def fail_on_second_install(src, dst):
        if str(dst).endswith(second.key):
            calls.append(dst)
            raise OSError(5, "Input/output error (test)")
        return real_rename(src, dst)

    monkeypatch.setattr(archive_module.os, "rename", fail_on_second_install)
    with pytest.raises(OSError, match="Input/output error"):
        import_archive(archive, root=target)
    monkeypatch.setattr(archive_module.os, "rename", real_rename)
    assert calls and visible(target) == before and not list(target.glob(".import-*"))
    assert dict(import_archive(archive, root=target)) == {first.key: "imported", second.key: "imported"}
    assert CacheEntry(target, first.spec).problems() == []


def test_linked_destination_folder_is_replaced_as_a_link(tmp_path, source, target):
    archive = tmp_path / "a.tar"
    entry = entry_with_new_prefix(source, set())
    export_entries([entry.key], archive, root=source)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("x")
    dest = target / entry.key[:2] / entry.key
    dest.parent.mkdir(parents=True)
    dest.symlink_to(elsewhere)
    assert import_archive(archive, root=target) == [(entry.key, "imported")]
    assert not dest.is_symlink() and CacheEntry(target, entry.spec).problems() == []
    assert sorted(p.name for p in elsewhere.iterdir()) == ["precious.txt"]


# ---------------------------------------------------------------------------------------------
# Litter of killed imports


def test_stale_import_folders_are_cleaned_by_the_next_import(tmp_path, source, target):
    archive = tmp_path / "a.tar"
    entry = entry_with_new_prefix(source, set())
    export_entries([entry.key], archive, root=source)
    stale = target / ".import-999-deadbeef"
    (stale / "ab" / "x").mkdir(parents=True)
    (stale / "ab" / "x" / "spec.json").write_text("{}")
    busy = target / ".import-998-0badf00d"
    busy.mkdir()
    (target / "locks").mkdir(exist_ok=True)
    fd = os.open(target / "locks" / "import-998-0badf00d.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # an import still running
        assert stale_imports(target) == [stale]
        import_archive(archive, root=target)
        assert not stale.exists() and busy.exists()
    finally:
        os.close(fd)
    assert remove_stale_imports(target) == [busy] and not busy.exists()


def test_verify_reports_litter_and_fix_litter_removes_it(tmp_path, capsys):
    root = tmp_path / "cache"
    entry = entry_with_new_prefix(root, set())
    stale = root / ".import-999-deadbeef"
    stale.mkdir()
    (entry.path / ".shard-00001.parquet.tmp-999-dead").write_bytes(b"partial")
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify", "--no-derive")
    assert status == 0 and "LITTER   .import-999-deadbeef" in out
    assert (
        f"LITTER   {entry.key[:12]}  temporary files of a killed write (.shard-00001.parquet.tmp-999-dead)"
        in out
    )
    assert stale.exists()  # verify alone deletes nothing
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify", "--no-derive", "--fix-litter")
    assert status == 0 and "removed  .import-999-deadbeef" in out
    assert f"removed  {entry.key[:12]}  1 temporary file(s)" in out
    assert not stale.exists() and not list(entry.path.glob(".*tmp*"))
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify", "--no-derive")
    assert "LITTER" not in out and list_entries(root)["status"].tolist() == ["complete"]


def test_killed_import_leaves_a_folder_the_next_import_removes(tmp_path, source, target):
    """A real kill -9 in the middle of an import (after its temporary folder exists)."""
    archive = tmp_path / "a.tar"
    entry = entry_with_new_prefix(source, set())
    export_entries([entry.key], archive, root=source)
    script = (
        "import os, sys\n"
        "import rbplab.store.archive as importing\n"
        "real = importing._check_staged\n"
        "def die(*a, **k):\n"
        "    os.kill(os.getpid(), 9)\n"
        "importing._check_staged = die\n"
        f"importing.import_archive({str(archive)!r}, root={str(target)!r})\n"
    )
    done = subprocess.run([os.sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == -9
    assert len(list(target.glob(".import-*"))) == 1 and stale_imports(target)
    assert import_archive(archive, root=target) == [(entry.key, "imported")]
    assert not list(target.glob(".import-*"))
    assert SPEC_V["vocab"]["size"] == CacheEntry(target, entry.spec).read_stats().vocab_size
