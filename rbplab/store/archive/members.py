"""An archive's members, read as untrusted input, before anything is written.

Import never lets tarfile place anything: a first pass reads the member headers only, and each
member must be a regular, non-sparse file named ``<key>/<name>`` where `name` is a name the cache
itself writes (`rbplab.store.cache.layout.is_cache_file`), or the folder ``<key>``; every declared
size is bounded (spec.json and the .sha256 records by fixed limits, the manifest by what its spec
allows, each shard and the summary by exactly the bytes its manifest record gives), so a member
declaring 20 GB is refused before a byte of it is read. Members are then copied, at most their
declared size, to paths built from those validated parts (`unpack`).
"""

from __future__ import annotations

import contextlib
import tarfile
from collections.abc import Iterator
from pathlib import Path

from rbplab.core.documents import parse_json
from rbplab.core.errors import BadFileError
from rbplab.store.cache.layout import (
    MAX_RECORD_BYTES,
    MAX_SPEC_BYTES,
    SHA256_RE,
    SUMMARY_FILE,
    is_cache_file,
    max_manifest_bytes,
    max_shard_bytes,
    max_shard_rows,
    max_summary_bytes,
    shard_index,
)
from rbplab.store.cache.reading import CacheError

_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
_MEMBER_KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}


class ArchiveError(CacheError):
    """An archive that cannot be imported as it is; nothing was imported from it."""


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why a member is not a plain regular file or folder, or None."""
    if member.isdir():
        return None
    if member.type not in _FILE_TYPES:
        kind = _MEMBER_KINDS.get(member.type, f"of tar type {member.type!r}")
        return f"member {member.name!r} is {kind}, not a regular file"
    if member.sparse is not None:
        return f"member {member.name!r} is a sparse file, not a regular file"
    return None


def _member_limit(name: str) -> int:
    """The most bytes a member called `name` may declare before its entry's manifest is known."""
    if name == "spec.json":
        return MAX_SPEC_BYTES
    if name.endswith(".sha256"):
        return MAX_RECORD_BYTES
    if name == "manifest.json":
        return max_manifest_bytes(None)
    if name == SUMMARY_FILE:
        return max_summary_bytes(None)
    return max_shard_bytes(max_shard_rows(None))


def _refusal(archive: Path, why: str) -> ArchiveError:
    return ArchiveError(f"refusing archive {archive}: {why}")


@contextlib.contextmanager
def open_tar(handle, archive: Path) -> Iterator[tarfile.TarFile]:
    """The open tar file of `handle`; a damaged or truncated one is refused wherever it shows."""
    try:
        tar = tarfile.open(fileobj=handle, mode="r:*")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise _refusal(archive, f"not a readable tar file ({err})") from None
    with tar:
        try:
            yield tar
        except (tarfile.TarError, EOFError) as err:
            raise _refusal(archive, f"it is damaged or truncated ({err})") from None


def check_members(
    tar: tarfile.TarFile, archive: Path
) -> tuple[dict[tuple[str, str], tarfile.TarInfo], dict[tuple[str, str], bytes]]:
    """Every member of `archive` as ((key, name) -> header, (key, name) -> bytes of the small
    ones), refusing anything else; reads headers and the small members only, writes nothing."""

    def refuse(why: str) -> ArchiveError:
        return _refusal(archive, why)

    files: dict[tuple[str, str], tarfile.TarInfo] = {}
    for member in tar:  # headers only: nothing is read from a member before all are checked
        problem = _member_problem(member)
        if problem is not None:
            raise refuse(problem)
        key, _, name = member.name.rstrip("/").partition("/")
        if member.isdir():
            if SHA256_RE.match(key) and not name:
                continue  # the entry's own folder, as other tar tools write it
            raise refuse(f"member {member.name!r} is a folder other than an entry's <key>/")
        if not SHA256_RE.match(key) or "/" in name or not is_cache_file(name, temporary=False):
            raise refuse(
                f"member {member.name!r} is not a cache file (only <key>/spec.json, manifest.json, "
                "shard and summary files are allowed)"
            )
        if (key, name) in files:
            raise refuse(f"member {member.name!r} appears twice")
        if member.size > _member_limit(name):
            raise refuse(f"member {member.name!r} declares {member.size} bytes, more than a {name} can hold")
        files[(key, name)] = member
    small = {
        item: _read_member(tar, member, refuse)
        for item, member in files.items()
        if shard_index(item[1]) is None
    }
    for (key, name), data in small.items():
        if name == "manifest.json":  # read for the sizes below: one that cannot be is refused here
            try:
                parse_json(data, f"member {key}/{name}")
            except BadFileError as err:
                raise refuse(str(err)) from None
    for (key, name), member in files.items():
        if name == SUMMARY_FILE:
            expected = _recorded_summary_bytes(small.get((key, "manifest.json")))
            if expected is not None and expected != member.size:
                raise refuse(
                    f"member {member.name!r} declares {member.size} bytes but its manifest records {expected}"
                )
        index = shard_index(name)
        if index is not None:
            expected = _recorded_bytes(small.get((key, "manifest.json")), index)
            if expected != member.size:
                raise refuse(
                    f"member {member.name!r} declares {member.size} bytes but its manifest records "
                    f"{'none' if expected is None else expected}"
                )
    if not files:
        raise refuse("it holds no cache entries")
    return files, small


def unpack(
    tar: tarfile.TarFile,
    files: dict[tuple[str, str], tarfile.TarInfo],
    small: dict[tuple[str, str], bytes],
    archive: Path,
    staging: Path,
) -> list[str]:
    """Copy the checked members (`check_members`) into `staging/<key[:2]>/<key>/<name>`; their keys."""
    for (key, name), member in files.items():
        target = staging / key[:2] / key / name  # built from the validated parts only
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as out:
            if (key, name) in small:
                out.write(small[(key, name)])
            else:
                _copy_member(tar, member, out, lambda why: _refusal(archive, why))
    return sorted({key for key, _ in files})


def _recorded_summary_bytes(manifest: bytes | None) -> int | None:
    """The summary size a manifest records, None when it records none (older entries)."""
    try:
        record = parse_json(manifest or b"{}", "manifest.json").get("summary")
    except (ValueError, AttributeError):
        return None
    size = record.get("bytes") if isinstance(record, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, refuse) -> bytes:
    source = tar.extractfile(member)
    data = source.read(member.size + 1) if source is not None else b""
    if len(data) != member.size:
        raise refuse(f"member {member.name!r} holds {len(data)} bytes, not the {member.size} it declares")
    return data


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, out, refuse) -> None:
    source = tar.extractfile(member)
    copied = 0
    while source is not None:
        chunk = source.read(min(1 << 20, member.size + 1 - copied))
        if not chunk:
            break
        out.write(chunk)
        copied += len(chunk)
        if copied > member.size:
            break
    if copied != member.size:
        raise refuse(f"member {member.name!r} holds {copied} bytes, not the {member.size} it declares")


def _recorded_bytes(manifest_bytes: bytes | None, index: int) -> int | None:
    """The byte count the manifest records for shard `index`, None when it records none."""
    try:
        shards = parse_json(manifest_bytes or b"", "manifest.json")["shards"]
        record = next(r for r in shards if isinstance(r, dict) and r.get("index") == index)
    except (ValueError, TypeError, KeyError, StopIteration):
        return None
    size = record.get("bytes")
    return size if isinstance(size, int) and not isinstance(size, bool) else None
