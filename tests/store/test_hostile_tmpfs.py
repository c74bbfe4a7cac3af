"""Issue 20: the whole class list at once, on a cache that lives on a full 2 MiB tmpfs, then on a
read-only copy of it.

Every hostile case of `helpers.hostile.CASES`, a truncated real entry, an interrupted removal and a
killed import's folder sit in one cache on a tmpfs that is then filled to the last byte. `cache
verify` reports each (never hanging), reads refuse, writers and imports fail in one line and leave
nothing behind (also when the disk fills in the middle of an import), hostile archives (a FIFO, a
sparse 20 GiB member, an A+B archive blocked by A) are refused, and nothing outside the cache
changes. The same checks then run against a read-only copy (cp -a onto a second tmpfs remounted
read-only), where additionally nothing changes at all. Needs root to mount a tmpfs; skipped
otherwise, with the reason."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import warnings
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.extraction import extract_run
from helpers.factories import shard_frame
from helpers.hostile import (
    SPEC_V,
    build_hostile_cache,
    entry_with_new_prefix,
    no_hang,
    safe_snapshot,
    sparse_tar,
)
from helpers.models import DOCUMENTS

from rbplab.store import files as files_module
from rbplab.store.archive import ArchiveError, export_entries, import_archive, stale_imports
from rbplab.store.cache.admin import list_entries, remove_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import SUMMARY_FILE
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
from rbplab.store.files import CacheLocationError


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (mount -t tmpfs); the class list runs in test_hostile_files")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs was refused here: {done.stderr.strip() or done.returncode}")


@pytest.fixture
def mounts(tmp_path):
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        mount_tmpfs(path, size)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Write a filler file until the file system has at most `leave` bytes free."""
    with open(folder / "filler", "wb") as handle:
        block = b"\xa5" * 4096
        while os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize > leave:
            try:
                handle.write(block)
                handle.flush()
            except OSError as err:
                assert err.errno == errno.ENOSPC
                break


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCUMENTS))
    return path


def build(root: Path, outside: Path, gpt2_dir: Path, corpus_file: Path, work: Path) -> dict:
    """The class list in one cache. Returns {label: (key, regex of its verify line)}."""
    expected = {name: (entry.key, f"CORRUPT  {entry.key[:12]}  {line}") for name, (entry, line) in
                build_hostile_cache(root, outside).items()}  # fmt: skip
    taken = {key[:2] for key, _ in expected.values()}
    good = entry_with_new_prefix(root, taken, shards=2)
    expected["sound entry"] = (good.key, f"ok       {good.key[:12]}")
    # a truncated real entry: extracted elsewhere, copied in, last shard record and files dropped
    result = extract_run(
        str(gpt2_dir), str(corpus_file), context_length=16, shard_tokens=24, cache_dir=work, progress=False
    )
    subprocess.run(["cp", "-a", str(result.path.parent), str(root)], check=True)
    manifest = json.loads((result.path / "manifest.json").read_text())
    last = manifest["shards"].pop()
    manifest["n_tokens"] -= last["rows"]
    manifest.pop("summary", None)  # a careful forger drops the summary, which counts every token
    truncated = root / result.key[:2] / result.key
    (truncated / "manifest.json").write_text(json.dumps(manifest))
    for name in (last["file"], last["file"] + ".sha256", SUMMARY_FILE, SUMMARY_FILE + ".sha256"):
        (truncated / name).unlink()
    expected["truncated entry"] = (
        result.key,
        rf"CORRUPT  {result.key[:12]}  it has \d+ shards .* but its spec",
    )
    # an interrupted removal: the manifest went first, the process died
    gone = entry_with_new_prefix(root, taken | {result.key[:2]}, shards=2)
    gone.manifest_path.unlink()
    expected["interrupted rm"] = (gone.key, f"partial  {gone.key[:12]}  incomplete")
    # a killed import's folder
    (root / ".import-4242-deadbeef" / "ab").mkdir(parents=True)
    return expected


def check_cache(root: Path, outside: Path, expected: dict, capsys, *, read_only: bool) -> None:
    """verify, ls, reads and writers against the class list; the caller checks what changed."""
    with no_hang(60):
        status, out, err = run(capsys, "cache", "--cache-dir", root, "verify")
    assert status == 1 and "Traceback" not in err, err
    for label, (_, line) in expected.items():
        assert re.search("^" + line, out, re.M), (label, out)
    assert "LITTER   .import-4242-deadbeef" in out
    with no_hang():
        table = list_entries(root).set_index("key")
    assert table.loc[expected["sound entry"][0], "status"] == "complete"
    assert table.loc[expected["interrupted rm"][0], "status"] == "incomplete"
    for label, (key, _) in expected.items():
        if label in ("sound entry", "interrupted rm", "truncated entry"):
            continue
        assert table.loc[key, "status"] == "damaged", label
        entry = CacheEntry(root, CacheEntry.open(key, root).spec) if "folder linked" not in label else None
        with no_hang(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if entry is None:  # a linked folder: no spec can even be read through it
                with pytest.raises(CacheError, match="no spec.json that hashes|cannot be read"):
                    CacheEntry.open(key, root).read_stats()
            else:
                with pytest.raises(CacheCorruptedError):
                    entry.read_stats()
    sound = CacheEntry.open(expected["sound entry"][0], root)
    assert len(sound.read_stats()) == 20
    with pytest.raises(CacheLocationError, match="MiB free|cannot write|no space"):  # writers: one line
        with CacheEntry(root, {**SPEC_V, "ctx": 1}).lock():
            pass
    status, _, err = run(capsys, "cache", "--cache-dir", root, "rm", expected["interrupted rm"][0][:12])
    if read_only:
        assert status == 1 and err.count("\n") == 1 and "rbplab: error:" in err, err
    else:  # deleting works on a full disk
        assert status == 0 and expected["interrupted rm"][0] not in list_entries(root)["key"].tolist(), err


def check_archives(root: Path, tmp_path: Path, source: Path, capsys, why: str | None = None) -> None:
    """Hostile archives against this cache: each refused in one line (for a flaw in its member
    headers, which are read before the cache is touched; else for `why`, when the cache cannot take
    anything, or for its own flaw), nothing visible, no litter."""
    fifo = tmp_path / "fifo.tar"
    if not fifo.exists():
        os.mkfifo(fifo)
    keys = sorted(p.name for p in source.glob("??/*"))
    sparse = tmp_path / "sparse.tar"
    if not sparse.exists() and not sparse_tar(sparse, f"{keys[0]}/shard-00000.parquet"):
        sparse = None
    flaws = {
        fifo: "is a FIFO, not a regular file",
        sparse: "is a sparse file, not a regular file",
        tmp_path / "ab.tar": "already exists with files the cache did not write",
    }
    for archive, flaw in flaws.items():
        if archive is None:
            continue
        before = safe_snapshot(root)
        with no_hang():
            status, out, err = run(capsys, "cache", "--cache-dir", root, "import", archive)
        assert status == 1 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
        assert (flaw if archive in (fifo, sparse) or why is None else why) in err, err
        after = safe_snapshot(root)
        assert {k: v for k, v in after.items() if not k.startswith(".import-")} == {
            k: v for k, v in before.items() if not k.startswith(".import-")
        }
        assert not [k for k in after if k.startswith(".import-") and not k.startswith(".import-4242")]


def test_class_list_on_a_full_tmpfs_and_a_read_only_copy(
    mounts, tmp_path, gpt2_dir, corpus_file, capsys, monkeypatch
):
    root = mounts("full", "2m") / "cache"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not the cache's")
    with monkeypatch.context() as patch:  # built on the small tmpfs while it has room to spare
        patch.setattr(files_module, "MIN_FREE_BYTES", 0)
        expected = build(root, outside, gpt2_dir, corpus_file, tmp_path / "work")
    # an archive of two sound entries whose first is blocked at the destination by a foreign file
    source = tmp_path / "source"
    taken: set[str] = set()
    pair = [entry_with_new_prefix(source, taken, shards=1) for _ in range(2)]
    big = CacheEntry(source, {**SPEC_V, "ctx": 3})
    with big.lock():  # a shard of random numbers: larger than the space left below
        big.write_shard(0, shard_frame(0, 20000))
        big.finalize({"vocab_size": 50})
    export_entries([e.key for e in pair], tmp_path / "ab.tar", root=source)
    export_entries([big.key], tmp_path / "big.tar", root=source)
    blocked = root / pair[0].key[:2] / pair[0].key
    blocked.mkdir(parents=True, exist_ok=True)
    (blocked / "notes.txt").write_text("mine")
    # the read-only copy, taken now: the checks below may mark damaged entries incomplete
    copy = mounts("copy", "8m") / "cache"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
    subprocess.run(["mount", "-o", "remount,ro", str(copy.parent)], check=True)
    outside_before = safe_snapshot(outside)

    # -- the disk is full -------------------------------------------------------------------
    fill(root.parent)
    assert os.statvfs(root).f_bavail == 0
    check_cache(root, outside, expected, capsys, read_only=False)
    check_archives(root, tmp_path, source, capsys, why="MiB free")
    with pytest.raises(CacheLocationError, match="MiB free"):  # refused up front ...
        import_archive(tmp_path / "big.tar", root=root)
    (root.parent / "filler").unlink()
    fill(root.parent, leave=128 * 1024)  # room for ab.tar (51 KB with its summaries), not big.tar (256 KB)
    monkeypatch.setattr(files_module, "MIN_FREE_BYTES", 0)
    before = safe_snapshot(root)
    check_archives(root, tmp_path, source, capsys)  # now past the free-space check: members refused
    assert safe_snapshot(root) == before  # a refused import leaves even a killed import's folder
    with pytest.raises(CacheLocationError, match="no space left on device"):  # ... or when it fills up
        import_archive(tmp_path / "big.tar", root=root)
    assert safe_snapshot(root) == before
    with pytest.raises(ArchiveError, match="already exists with files the cache did not write"):
        import_archive(tmp_path / "ab.tar", root=root)
    assert safe_snapshot(root) == before  # nothing of the second entry either
    monkeypatch.undo()
    assert safe_snapshot(outside) == outside_before

    # -- a read-only copy -------------------------------------------------------------------
    with pytest.raises(OSError):
        (copy / "probe").write_text("x")
    frozen = safe_snapshot(copy)
    assert stale_imports(copy) == [copy / ".import-4242-deadbeef"]
    check_cache(copy, outside, expected, capsys, read_only=True)
    check_archives(copy, tmp_path, source, capsys, why="cannot write to cache location")
    with pytest.raises(CacheLocationError, match="cannot write to cache location"):
        import_archive(tmp_path / "ab.tar", root=copy)
    with pytest.raises((CacheError, OSError)):
        remove_entries(expected["sound entry"][0][:12], root=copy)
    status, _, err = run(capsys, "cache", "--cache-dir", copy, "verify", "--fix-litter")
    assert status == 1 and "rbplab: error:" in err and "Traceback" not in err
    assert safe_snapshot(copy) == frozen  # read-only: nothing changed at all
    assert safe_snapshot(outside) == outside_before
