"""Cache administration: list the entries under a cache root and remove them.

The entry layout, keys and locking are defined in rbplab.store.cache; this module only reads
entry directories to summarise them (list_entries) and deletes whole entries under their
write lock (remove_entries).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock, Timeout

from rbplab.store.cache import CacheError
from rbplab.store.files import _entry_dirs, _location_error, _matching_dirs, _read_spec, cache_root

ENTRY_COLUMNS = ["key", "model", "corpus", "n_tokens", "complete", "size_bytes", "created", "path"]


def _label(value: Any) -> str | None:
    if isinstance(value, dict):
        for key in ("name", "name_or_path", "id", "path"):
            if value.get(key):
                return str(value[key])
        return json.dumps(value, sort_keys=True)
    return None if value is None else str(value)


def list_entries(root: str | Path | None = None) -> pd.DataFrame:
    """One row per cache entry: key, model, corpus, n_tokens (so far, for incomplete entries),
    complete, size_bytes, created (UTC), path. Oldest first."""
    rows = []
    for path in _entry_dirs(cache_root(root)):
        manifest = None
        with contextlib.suppress(OSError, ValueError):
            manifest = json.loads((path / "manifest.json").read_text())
        spec = (manifest or {}).get("spec") or _read_spec(path) or {}
        if manifest is not None:
            n_tokens = manifest.get("n_tokens")
        else:
            n_tokens = 0
            for checksum in path.glob("shard-*.parquet.sha256"):
                with contextlib.suppress(OSError, ValueError, TypeError):
                    n_tokens += int(json.loads(checksum.read_text())["rows"])
        files = [f for f in path.iterdir() if f.is_file()]
        created = (manifest or {}).get("created")
        rows.append(
            {
                "key": path.name,
                "model": _label(spec.get("model")),
                "corpus": _label(spec.get("corpus")),
                "n_tokens": n_tokens,
                "complete": manifest is not None,
                "size_bytes": sum(f.stat().st_size for f in files),
                "created": pd.Timestamp(created) if created else pd.Timestamp(path.stat().st_mtime, unit="s"),
                "path": str(path),
            }
        )
    table = pd.DataFrame(rows, columns=ENTRY_COLUMNS)
    table["n_tokens"] = table["n_tokens"].astype("Int64")
    table["complete"] = table["complete"].astype(bool)
    table["size_bytes"] = table["size_bytes"].astype("int64")
    table["created"] = pd.to_datetime(table["created"], utc=True)
    return table.sort_values("created", kind="stable").reset_index(drop=True)


def remove_entries(
    prefixes: str | Iterable[str] = (), *, root: str | Path | None = None, incomplete: bool = False
) -> list[str]:
    """Delete entries whose key starts with any of `prefixes` (and, with `incomplete`, every
    incomplete entry). "" matches everything. Entries being written are refused. Returns removed keys."""
    root = cache_root(root)
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    targets: dict[str, Path] = {}
    for prefix in prefixes:
        matches = _matching_dirs(root, prefix)
        if not matches:
            raise CacheError(f"no cache entry matches key prefix {prefix!r} under {root}")
        targets.update((p.name, p) for p in matches)
    if incomplete:
        targets.update((p.name, p) for p in _entry_dirs(root) if not (p / "manifest.json").is_file())
    removed = []
    for key, path in sorted(targets.items()):
        lock = FileLock(str(root / "locks" / f"{key}.lock"), timeout=0)
        try:
            (root / "locks").mkdir(parents=True, exist_ok=True)
            with lock:
                shutil.rmtree(path)
        except Timeout as err:
            raise CacheError(
                f"cache entry {key[:12]} is being written by another process; not removed"
            ) from err
        except OSError as err:
            raise _location_error(err, path) from err
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the <key[:2]> folder, when now empty
        removed.append(key)
    return removed
