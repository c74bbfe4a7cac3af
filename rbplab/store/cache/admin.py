"""The cache as a whole: listing entries with their status, and removing them.

A listing reads no shard bytes (a damaged entry is named, never stops it); removal takes each
entry's write lock, refuses short key prefixes, and deletes only names the cache itself writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock, Timeout

from rbplab.core.documents import parse_json
from rbplab.store.cache import index as cache_index
from rbplab.store.cache.entry import entry_at, remove_entry_dir
from rbplab.store.cache.layout import entry_dirs, matching_dirs, max_manifest_bytes, shard_index
from rbplab.store.cache.reading import CacheError, read_spec
from rbplab.store.files import (
    UnsafeFileError,
    cache_root,
    ensure_real_dir,
    entry_dir_problem,
    entry_file_problem,
    location_error,
    read_entry_file,
)

MIN_PREFIX = 8  # shortest key prefix `remove_entries` accepts
_HEX_RE = re.compile(r"^[0-9a-f]+$")

# The columns of `list_entries`, in order.
LISTING_COLUMNS = [
    "key",
    "model",
    "revision",
    "step",
    "corpus",
    "max_tokens",
    "context_length",
    "n_tokens",
    "head",
    "settled_rows",
    "complete",
    "status",
    "size_bytes",
    "created",
    "path",
]


def entry_dir_problems(path: Path, root: Path | None = None, summary: bool = True) -> list[str]:
    """Everything wrong with the entry directory `path`, one line each (what `rbplab cache verify`
    prints): a linked entry or prefix folder, no spec.json hashing to its name, then
    `CacheEntry.problems` (without the summary's with summary=False). Deletes nothing, follows no
    link."""
    folder = entry_dir_problem(path)
    if folder is not None:
        return [folder]
    entry = entry_at(path, root)
    if entry is None:
        odd = [p for p in (entry_file_problem(path / n) for n in ("spec.json", "manifest.json")) if p]
        return [*odd, "no spec.json that hashes to the directory name"]
    return entry.problems(summary=summary)


def _label(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("name", "name_or_path", "id", "path"):
            if value.get(key):
                return str(value[key])
        return json.dumps(value, sort_keys=True)
    return None if value is None else str(value)


def entry_status(path: Path) -> tuple[str, int | None, str | None]:
    """(status, n_tokens, problem) of an entry directory without reading shard bytes: status is
    "complete", "incomplete" or "damaged"; n_tokens is derived (rows of the checked shard
    records, or of the shards done so far) and None for a damaged entry."""
    folder = entry_dir_problem(path)
    if folder is not None:
        return "damaged", None, folder
    entry = entry_at(path)
    if entry is None:
        return "damaged", None, "no spec.json that hashes to the directory name"
    if entry.is_complete():
        try:
            manifest = entry.load_manifest()
        except UnsafeFileError as err:
            return "damaged", None, str(err)
        except (OSError, ValueError) as err:
            return "damaged", None, f"its manifest is unreadable ({err})"
        problems = entry.manifest_problems(manifest)
        files = {} if problems else entry.shard_file_problems(manifest)
        problem = problems[0] if problems else next(iter(files.values()), None)
        if problem is not None:
            return "damaged", None, problem
        return "complete", int(manifest["n_tokens"]), None
    n_tokens = 0
    for checksum in path.glob("shard-*.parquet.sha256"):
        index = shard_index(checksum.name[: -len(".sha256")])
        if index is not None:
            record, _ = entry.checksum_record(index)
            n_tokens += 0 if record is None else int(record["rows"])
    return "incomplete", n_tokens, None


def list_entries(root: str | Path | None = None) -> pd.DataFrame:
    """One row per cache entry: key, model, revision (None for a model's final weights), step (the
    checkpoint's training step when its manifest records one), corpus, max_tokens and
    context_length (the settings it was scored with; None: no cap, the model's maximum), n_tokens
    (so far, for incomplete entries; none for damaged ones), head and settled_rows (the heads that
    ranked it and the rows they settled by exact sign, from a complete entry's manifest), complete,
    status ("complete", "incomplete", "damaged"), size_bytes, created (UTC), path. Ordered by model,
    corpus and settings (max_tokens, context_length), then checkpoints in training order (the final weights
    last) and key, so one model's entries stand together however they were made. A damaged entry
    never stops the listing."""
    rows = []
    for path in entry_dirs(cache_root(root)):
        status, n_tokens, _ = entry_status(path)
        spec = read_spec(path) or {}
        created, step, head, settled = None, None, None, None
        if status == "complete":  # a complete entry's manifest passed its rules just now
            with contextlib.suppress(OSError, ValueError, AttributeError):
                raw = read_entry_file(path / "manifest.json", path, max_manifest_bytes(spec))
                manifest = parse_json(raw, "manifest.json")
                created = manifest.get("created")
                step = (manifest.get("training") or {}).get("step")
                provenance = manifest.get("provenance") or {}
                heads, settled = provenance.get("heads"), provenance.get("settled_rows")
                head = "+".join(heads) if isinstance(heads, list) and heads else None
        model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
        windows = spec.get("windows") if isinstance(spec.get("windows"), dict) else {}
        try:
            created_at = pd.Timestamp(created) if isinstance(created, str) else None
        except ValueError:
            created_at = None
        size = 0
        if entry_dir_problem(path) is None:
            for item in path.iterdir():
                with contextlib.suppress(OSError):
                    info = os.lstat(item)
                    size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        rows.append(
            {
                "key": path.name,
                "model": _label(spec.get("model")),
                "revision": model.get("revision"),
                "step": step if isinstance(step, int) else None,
                "corpus": _label(spec.get("corpus")),
                "max_tokens": spec.get("max_tokens"),
                "context_length": windows.get("context_length"),
                "n_tokens": n_tokens,
                "head": head,
                "settled_rows": settled
                if isinstance(settled, int) and not isinstance(settled, bool)
                else None,
                "complete": status == "complete",
                "status": status,
                "size_bytes": size,
                "created": created_at
                if created_at is not None
                else pd.Timestamp(os.lstat(path).st_mtime, unit="s"),
                "path": str(path),
            }
        )
    table = pd.DataFrame(rows, columns=LISTING_COLUMNS)
    for column in ("step", "max_tokens", "context_length", "n_tokens", "settled_rows"):
        table[column] = table[column].astype("Int64")
    table["complete"] = table["complete"].astype(bool)
    table["size_bytes"] = table["size_bytes"].astype("int64")
    table["created"] = pd.to_datetime(table["created"], utc=True)
    order = ["model", "corpus", "max_tokens", "context_length", "step", "revision", "key"]
    folded = {"model": table["model"].str.lower(), "corpus": table["corpus"].str.lower()}
    return (
        table.assign(**{f"_{c}": v for c, v in folded.items()})
        .sort_values([f"_{c}" if c in folded else c for c in order], kind="stable", na_position="last")
        .drop(columns=[f"_{c}" for c in folded])
        .reset_index(drop=True)
    )


def remove_entries(
    prefixes: str | Iterable[str] = (),
    *,
    root: str | Path | None = None,
    incomplete: bool = False,
    all_matching: bool = False,
    everything: bool = False,
) -> list[str]:
    """Delete entries whose key starts with any of `prefixes` (and, with `incomplete`, every
    incomplete entry; with `everything`, every entry). A prefix must be at least MIN_PREFIX hex
    characters, and one matching several entries is refused unless `all_matching`. Entries being
    written are refused. Returns removed keys."""
    root = cache_root(root)
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    targets: dict[str, Path] = {}
    for prefix in prefixes:
        text = prefix.strip().lower()
        if len(text) < MIN_PREFIX or not _HEX_RE.match(text):
            raise CacheError(
                f"refusing key prefix {prefix!r}: give at least {MIN_PREFIX} hex characters of a key "
                "(rbplab cache ls shows them); --all removes every entry"
            )
        matches = matching_dirs(root, text)
        if not matches:
            raise CacheError(f"no cache entry matches key prefix {prefix!r} under {root}")
        if len(matches) > 1 and not all_matching:
            raise CacheError(
                f"key prefix {prefix!r} matches {len(matches)} cache entries; give more characters "
                "or pass --all-matching"
            )
        targets.update((p.name, p) for p in matches)
    if incomplete:
        targets.update(
            (p.name, p)
            for p in entry_dirs(root)
            if entry_dir_problem(p) is None and not os.path.lexists(p / "manifest.json")
        )
    if everything:
        targets.update((p.name, p) for p in entry_dirs(root))
    removed = []
    for key, path in sorted(targets.items()):
        lock = FileLock(str(root / "locks" / f"{key}.lock"), timeout=0)
        try:
            ensure_real_dir(root / "locks", "the locks folder")
            with lock:
                remove_entry_dir(path)
        except Timeout as err:
            raise CacheError(
                f"cache entry {key[:12]} is being written by another process; not removed"
            ) from err
        except OSError as err:
            raise location_error(err, path) from err
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the <key[:2]> folder, when now empty
        removed.append(key)
    if removed:  # their index rows go too (a row is never read without its entry, but verify names it)
        gone = set(removed)
        index = cache_index.CacheIndex(root)
        if any(key in gone for key in index.rows):
            cache_index.merge(root, index, {}, wait=True, keep=lambda key: key not in gone)
    return removed


def _derived_rows(root: Path, dirs: Iterable[Path]) -> tuple[dict[str, cache_index.IndexRow], set[str]]:
    """(rows, complete): the index row of each complete entry among `dirs` whose manifest and stored
    summary pass every rule, derived now from that summary; and the keys of every complete entry."""
    rows: dict[str, cache_index.IndexRow] = {}
    complete: set[str] = set()
    for path in dirs:
        entry = None if entry_dir_problem(path) else entry_at(path, root)
        if entry is None or not entry.is_complete():
            continue
        complete.add(entry.key)
        try:
            manifest = entry.manifest(mark_damaged=False)
        except CacheError:
            continue  # the entry's own lines in verify say why
        problem, summary = entry.stored_summary_checked(manifest)
        if summary is not None:
            rows[entry.key] = cache_index.row_of(entry.key, summary, manifest["summary"])
    return rows, complete


def index_problems(root: str | Path | None, dirs: Iterable[Path] | None = None) -> list[str]:
    """One line per problem of the cache index (`rbplab cache verify`): files it cannot read, and rows
    of the entries `dirs` (default: every entry, and then rows of entries that are not complete too)
    that differ from the row their verified summary gives, or that are stale. Deletes nothing."""
    root = cache_root(root)
    every = dirs is None
    rows, complete = _derived_rows(root, entry_dirs(root) if every else dirs)
    return cache_index.index_problems(root, rows, complete if every else None)


def rebuild_index(root: str | Path | None, dirs: Iterable[Path] | None = None) -> int:
    """Derive the index rows of the entries `dirs` (default: all, and the index then holds nothing
    else) from their verified summaries and write them in place of what the index held for them;
    returns the number of rows written (`rbplab cache repair`)."""
    root = cache_root(root)
    if dirs is None:
        rows, _ = _derived_rows(root, entry_dirs(root))
        return cache_index.rebuild(root, rows)
    rows, _ = _derived_rows(root, dirs)
    cache_index.merge(root, cache_index.CacheIndex(root), rows, wait=True)
    return len(rows)
