"""Hostile files: `hostile_file`, the one maker of what stands where a small file should (a link to
/dev/zero, a FIFO, a sparse giant, a folder, text nested too deeply), shared by every reader's tests;
and hostile cache entries (issue 20): what an attacker or an unlucky colleague can put in a
shared cache besides bad JSON. Each `CASES` entry damages one complete entry of a cache and says
what `rbplab cache verify` must print about it; tests run the list one by one, on a full tmpfs
and on a read-only mount."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from helpers.factories import SPEC, complete_entry
from rbplab.core.stats import SUMMARY_VERSION, TokenStats, summarize
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import SUMMARY_FILE
from rbplab.store.cache.reading import summary_bytes

SPEC_V = {**SPEC, "vocab": {"size": 50, "include_padded": False, "head_rows": 50}}
HUGE = 20 * 2**30  # 20 GiB, always sparse
SPARSE = 2 << 30  # 2 GiB: past every bound a reader has, in no disk space
HOSTILE = ("/dev/zero", "fifo", "sparse", "folder")  # what stands where a small file should


def deep_json(depth: int) -> str:
    """A JSON list nested `depth` levels deep."""
    return "[" * depth + "]" * depth


def hostile_file(path: Path, how: str, *, size: int = SPARSE, text: str | bytes = "") -> Path:
    """Put at `path` (in place of a file there) what a careless colleague or an attacker leaves
    where a small file should be: "/dev/zero" (a link to it), "fifo", "sparse" (a file of `size`
    bytes that takes no disk), "folder", or "text" (`text` as written: binary, nested too deeply,
    well formed but of the wrong shape). Returns `path`."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    if how == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(size)
    elif how == "folder":
        path.mkdir()
    elif how == "text":
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    else:
        raise ValueError(f"no hostile file {how!r}: one of {HOSTILE} or 'text'")
    return path


class Hung(Exception):
    """An operation ran past its time limit (it would have hung)."""


@contextlib.contextmanager
def no_hang(seconds: int = 20) -> Iterator[None]:
    """Fail with Hung instead of blocking forever (SIGALRM interrupts a blocked open or read)."""

    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def entry_with_new_prefix(root: Path, taken: set[str], shards: int = 3) -> CacheEntry:
    """A complete entry whose two-character prefix folder no other entry of `taken` uses."""
    for ctx in range(1000, 100000):
        spec = {**SPEC_V, "ctx": ctx}
        entry = CacheEntry(root, spec)
        if entry.key[:2] not in taken:
            taken.add(entry.key[:2])
            return complete_entry(root, spec, shards=shards)
    raise AssertionError("no free prefix")


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# Each damage(entry, outside) -> the regex `rbplab cache verify` must print after "CORRUPT  <key>  ".
# `outside` is a folder outside the cache that nothing may change.


def fifo_shard(entry: CacheEntry, outside: Path) -> str:
    entry.shard_path(1).unlink()
    os.mkfifo(entry.shard_path(1))
    return r"shard-00001\.parquet is a FIFO, not a regular file"


def fifo_link_shard(entry: CacheEntry, outside: Path) -> str:
    fifo = outside / f"fifo-{entry.key[:8]}"
    os.mkfifo(fifo)
    entry.shard_path(1).unlink()
    entry.shard_path(1).symlink_to(fifo)
    return r"shard-00001\.parquet is a symbolic link to .*fifo-.*, not a regular file"


def dev_zero_shard(entry: CacheEntry, outside: Path) -> str:
    entry.shard_path(1).unlink()
    entry.shard_path(1).symlink_to("/dev/zero")
    return r"shard-00001\.parquet is a symbolic link to /dev/zero, not a regular file"


def sparse_huge_shard(entry: CacheEntry, outside: Path) -> str:
    """A 20 GiB sparse shard whose two records say exactly that (a consistent lie)."""
    os.truncate(entry.shard_path(1), HUGE)

    def claim(record):
        record["bytes"] = HUGE

    edit_json(entry.path / "shard-00001.parquet.sha256", claim)
    edit_json(entry.manifest_path, lambda m: claim(m["shards"][1]))
    return rf"shard record 1 claims {HUGE} bytes, more than a shard of 10 rows takes"


def sparse_grown_shard(entry: CacheEntry, outside: Path) -> str:
    os.truncate(entry.shard_path(1), HUGE)
    return r"shard 1 is larger than its record says"


def linked_entry_folder(entry: CacheEntry, outside: Path) -> str:
    target = outside / f"entry-{entry.key[:8]}"
    shutil.move(entry.path, target)
    entry.path.symlink_to(target)
    return r"the entry folder is a symbolic link to .*; the cache never reads or writes through one"


def linked_prefix_folder(entry: CacheEntry, outside: Path) -> str:
    target = outside / f"prefix-{entry.key[:8]}"
    shutil.move(entry.path.parent, target)
    entry.path.parent.symlink_to(target)
    return rf"the prefix folder '{entry.key[:2]}' is a symbolic link to .*; the cache never reads or writes"


def manifest_folder(entry: CacheEntry, outside: Path) -> str:
    entry.manifest_path.unlink()
    entry.manifest_path.mkdir()
    return r"manifest\.json is a directory, not a regular file"


def garbage_checksum(entry: CacheEntry, outside: Path) -> str:
    (entry.path / "shard-00002.parquet.sha256").write_bytes(b"\x00garbage\xff")
    return r"shard-00002\.parquet\.sha256 is unreadable"


def disagreeing_checksum(entry: CacheEntry, outside: Path) -> str:
    edit_json(entry.path / "shard-00000.parquet.sha256", lambda r: r.update(sha256="0" * 64))
    return r"shard-00000\.parquet\.sha256 disagrees with the manifest's record of shard 0"


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[CacheEntry, Path], str]


CASES = [
    Case("FIFO shard", fifo_shard),
    Case("shard linked to a FIFO", fifo_link_shard),
    Case("shard linked to /dev/zero", dev_zero_shard),
    Case("20 GiB sparse shard, records agreeing", sparse_huge_shard),
    Case("20 GiB sparse shard", sparse_grown_shard),
    Case("entry folder linked outside", linked_entry_folder),
    Case("prefix folder linked outside", linked_prefix_folder),
    Case("manifest.json a folder", manifest_folder),
    Case("garbage .sha256", garbage_checksum),
    Case(".sha256 disagreeing with the manifest", disagreeing_checksum),
]


def build_hostile_cache(root: Path, outside: Path) -> dict[str, tuple[CacheEntry, str]]:
    """A cache with one entry per case, each damaged its way: {case name: (entry, expected)}."""
    taken: set[str] = set()
    entries = {case.name: entry_with_new_prefix(root, taken) for case in CASES}
    return {case.name: (entries[case.name], case.damage(entries[case.name], outside)) for case in CASES}


def sparse_tar(path: Path, member: str) -> bool:
    """A GNU tar holding `member`, a 20 GiB sparse file; False when GNU tar is unavailable."""
    tar = shutil.which("tar")
    if tar is None:
        return False
    work = path.parent / f"sparse-{path.stem}"
    target = work / member
    target.parent.mkdir(parents=True)
    with open(target, "wb") as handle:
        handle.truncate(HUGE)
    done = subprocess.run(
        [tar, "--sparse", "--format=gnu", "-cf", str(path), "-C", str(work), member], capture_output=True
    )
    shutil.rmtree(work)
    return done.returncode == 0


def safe_snapshot(root: Path) -> dict[str, tuple]:
    """{relative path: what it is} of everything under `root`, without following a link or opening
    anything but a small regular file: (kind, target) for links, (size, sha256) for regular files
    up to 16 MiB, (size, mtime) for larger ones (20 GiB sparse files), (kind,) for the rest."""
    import hashlib
    import stat

    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            info = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode) and info.st_size <= 1 << 24:
                out[key] = (info.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
            elif stat.S_ISREG(info.st_mode):
                out[key] = (info.st_size, info.st_mtime_ns)
            else:
                out[key] = (stat.S_IFMT(info.st_mode),)
    return out


def forge_summary(entry: CacheEntry) -> None:
    """The summary of the entry's tokens with every rank halved, written with its .sha256 record and
    the manifest's record fixed: what a careful forger leaves."""
    stats = entry.read_stats()
    other = TokenStats(
        stats.doc, stats.position, stats.n_greater // 2, stats.n_equal, stats.nll, stats.vocab_size
    )
    data = summary_bytes(summarize(other), entry.key)
    record = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "version": SUMMARY_VERSION}
    entry.summary_path.write_bytes(data)
    (entry.path / f"{SUMMARY_FILE}.sha256").write_text(json.dumps(record))
    manifest = json.loads(entry.manifest_path.read_text())
    entry.manifest_path.write_text(json.dumps({**manifest, "summary": record}))
