"""The cache's index: the pooled statistics of every entry in one columnar file, so a study of
thousands of entries opens, fits and sweeps k without reading their summaries.

An entry's summary (`rbplab.store.cache.reading`) is about 0.2 MB at 0.1M tokens; a fit or a k-sweep
needs a few numbers of it: RBP_k on the summary's k grid under each tie convention, the nll sums,
the target-probability sum, the token and document counts. One row per entry holds them
(`IndexRow`), in Parquet, one list column per tie convention.

The index is derived data, never trusted over the entries:
- a row is derived from a summary that passed every rule (`row_of`), and names that summary's
  sha256 and size; a read takes it only for the summary the entry's checked manifest records
  (a stale row is never used) and only when every relation its numbers must hold is there (the
  rules of scope `IndexRowCheck`); otherwise the read falls back on the summary, as before;
- `rbplab cache verify` derives each row again from the entry's verified summary and reports any
  row that differs (forged or damaged) or is stale; `rbplab cache repair` rebuilds the index;
- when an analysis reads a run's pooled tables (`IndexedSummary.full`), the row is derived again
  from them and compared, so a forged row cannot survive past the first look at its summary.

Files, under ``<root>/index/v1/``: ``index.parquet`` (the merged rows) and one
``row-<key>-<sha16>.arrow`` (an Arrow IPC stream) per completed entry not merged yet. Whoever
completes an entry (a Ray worker, a SLURM task) writes its own row file, atomically (temporary
name, fsync, rename), under a name no other entry uses: workers finishing at once never write the
same file, and a run killed before its row is renamed into place leaves no row (the read then reads
the summary). Readers merge row files into ``index.parquet`` under ``<root>/locks/index.lock``
(skipped when another process holds it), replacing it by rename and deleting only the row files
they merged. A row lost in a race costs one summary read, never a wrong number.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.core.errors import RbplabWarning
from rbplab.core.stats import TIES, EntrySummary, LastFew, RankCounts
from rbplab.store.cache import rules
from rbplab.store.cache.index_rules import IndexRowCheck
from rbplab.store.cache.layout import SUMMARY_FILE
from rbplab.store.cache.reading import CacheCorruptedError
from rbplab.store.files import (
    atomic_write,
    ensure_real_dir,
    folder_problem,
    held_lock,
    read_entry_file,
)

INDEX_VERSION = 1
MERGED_FILE = "index.parquet"
ROW_FILE_RE = re.compile(r"^row-([0-9a-f]{64})-([0-9a-f]{16})\.arrow$")
# Bounds of every read: a row is ~3 KB (three lists of ~60 numbers); the merged file holds a row per
# entry, so 1 GiB is ~300,000 entries.
MAX_ROW_FILE_BYTES = 1 << 16
MAX_MERGED_BYTES = 1 << 30

SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("summary_sha256", pa.string()),
        ("summary_bytes", pa.int64()),
        ("vocab_size", pa.int64()),
        ("n_tokens", pa.int64()),
        ("n_docs", pa.int64()),
        ("has_ties", pa.bool_()),
        ("nll_sum", pa.float64()),
        ("nll_sq_sum", pa.float64()),
        ("p_sum", pa.float64()),
        ("ks", pa.list_(pa.int64())),
        *((f"within_{ties}", pa.list_(pa.float64())) for ties in TIES),
    ],
    metadata={b"rbplab.index_version": str(INDEX_VERSION).encode()},
)
_SCALARS = ("summary_bytes", "vocab_size", "n_tokens", "n_docs", "has_ties", "nll_sum", "nll_sq_sum", "p_sum")


def index_dir(root: Path) -> Path:
    return root / "index" / f"v{INDEX_VERSION}"


@dataclass(frozen=True, eq=False)
class IndexRow:
    """One entry's pooled statistics: what its summary gives for a fit, a k-sweep or a k slider.
    `within[ties][j]`: tokens (expected tokens under "expected" ties) ranked within `ks[j]`, counted
    by `rbplab.core.stats.RankCounts` from the rank pairs: the counts `RBPCurve` gives, by
    construction (one function)."""

    key: str
    summary_sha256: str
    summary_bytes: int
    vocab_size: int
    n_tokens: int
    n_docs: int
    has_ties: bool
    nll_sum: float
    nll_sq_sum: float
    p_sum: float
    ks: np.ndarray
    within: dict[str, np.ndarray]

    def same(self, other: IndexRow) -> bool:
        """Whether two rows hold the same numbers (bit for bit: both are derived the same way)."""
        return (
            self.key == other.key
            and self.summary_sha256 == other.summary_sha256
            and all(getattr(self, f) == getattr(other, f) for f in _SCALARS)
            and np.array_equal(self.ks, other.ks)
            and all(np.array_equal(self.within[t], other.within[t]) for t in TIES)
        )

    @property
    def file_name(self) -> str:
        return f"row-{self.key}-{self.summary_sha256[:16]}.arrow"


def row_of(key: str, summary: EntrySummary, record: dict) -> IndexRow:
    """The index row of entry `key` whose checked summary is `summary`, stored as `record` (its
    {"sha256", "bytes"} in the manifest)."""
    ks = np.asarray(summary.ks, dtype=np.int64)
    return IndexRow(
        key=key,
        summary_sha256=str(record["sha256"]),
        summary_bytes=int(record["bytes"]),
        vocab_size=int(summary.vocab_size),
        n_tokens=int(summary.n_tokens),
        n_docs=int(summary.n_docs),
        has_ties=bool(summary.has_ties),
        nll_sum=float(summary.nll_sum),
        nll_sq_sum=float(summary.nll_sq_sum),
        p_sum=float(summary.doc_p.sum()),
        ks=ks,
        within={ties: RankCounts.of(summary.pairs, ties).count_within(ks) for ties in TIES},
    )


def _table(rows: Iterable[IndexRow]) -> pa.Table:
    rows = list(rows)
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for r in rows:
        columns["key"].append(r.key)
        columns["summary_sha256"].append(r.summary_sha256)
        for name in _SCALARS:
            columns[name].append(getattr(r, name))
        columns["ks"].append(r.ks)
        for ties in TIES:
            columns[f"within_{ties}"].append(r.within[ties])
    return pa.table(columns, schema=SCHEMA)


def _encode(rows: Iterable[IndexRow], *, merged: bool = True) -> bytes:
    """The merged file in Parquet (columnar, compressed); a row file as an Arrow IPC stream, which
    reads in a tenth of the time of a one-row Parquet file (a cold open reads thousands)."""
    table = _table(rows)
    sink = pa.BufferOutputStream()
    if merged:
        pq.write_table(table, sink, compression="zstd")
    else:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _flat(table: pa.Table, name: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of list column `name`."""
    column = table.column(name).combine_chunks()
    values = np.asarray(column.values.to_numpy(zero_copy_only=False), dtype=dtype)
    return values, np.asarray(column.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)


def _read_table(data: bytes, merged: bool) -> pa.Table:
    """The table of one index file, its schema checked; ValueError when it is not one (a damaged or
    foreign file)."""
    try:
        if merged:
            table = pq.read_table(pa.BufferReader(data))
        else:
            table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
    except (pa.ArrowException, OSError) as err:
        kind = "parquet file" if merged else "Arrow stream"
        raise ValueError(f"not a readable {kind} ({_problem(err)})") from None
    if not table.schema.remove_metadata().equals(SCHEMA.remove_metadata()):
        raise ValueError("its columns are not those of this index version")
    if (table.schema.metadata or {}).get(b"rbplab.index_version") != str(INDEX_VERSION).encode():
        raise ValueError("it is not of this index version")
    if table.num_rows and any(table.column(n).null_count for n in SCHEMA.names):
        raise ValueError("it has empty cells")
    return table


def _rows(table: pa.Table) -> list[IndexRow]:
    """The rows of a checked index table (several files' tables concatenated: decoded at once)."""
    scalars = {name: table.column(name).to_pylist() for name in ("key", "summary_sha256", *_SCALARS)}
    ks, ks_off = _flat(table, "ks", np.int64)
    lists = {ties: _flat(table, f"within_{ties}", np.float64) for ties in TIES}
    return [
        IndexRow(
            **{name: values[i] for name, values in scalars.items()},
            ks=ks[ks_off[i] : ks_off[i + 1]],
            within={t: v[o[i] : o[i + 1]] for t, (v, o) in lists.items()},
        )
        for i in range(table.num_rows)
    ]


def _decode(data: bytes, *, merged: bool = True) -> list[IndexRow]:
    """The rows of one index file; ValueError when it is not one."""
    return _rows(_read_table(data, merged))


def _problem(err: OSError | ValueError) -> str:
    return " ".join(str(err).split())


class CacheIndex:
    """The index rows of a cache as read now (the merged file and the row files not merged yet):
    `rows[key]` lists every row found for an entry (several after a summary was derived again).
    Nothing in it is believed before `row_for` checks it against the entry."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.folder = index_dir(self.root)
        self.rows: dict[str, list[IndexRow]] = {}
        self.row_files: list[str] = []  # names of row files read (merged at the next `merge`)
        self.problems: list[str] = []  # files that could not be read: reported by verify, skipped here
        problem = folder_problem(self.folder.parent, "the index folder") or folder_problem(
            self.folder, "the index folder"
        )
        if problem is not None:
            self.problems.append(problem)
            return
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return
        except OSError as err:
            self.problems.append(f"the index folder cannot be listed ({err.strerror or err})")
            return
        tables = []
        for name in names:
            match = ROW_FILE_RE.match(name)
            if name != MERGED_FILE and match is None:
                continue
            try:
                data = read_entry_file(
                    self.folder / name, self.folder, MAX_ROW_FILE_BYTES if match else MAX_MERGED_BYTES
                )
                table = _read_table(data, merged=match is None)
            except FileNotFoundError:
                continue  # merged away meanwhile: its row is in the merged file now
            except (OSError, ValueError) as err:
                self.problems.append(f"index file {name} is refused: {_problem(err)}")
                continue
            if match is not None:
                keys, shas = table.column("key").to_pylist(), table.column("summary_sha256").to_pylist()
                if keys != [match[1]] or shas[0][:16] != match[2]:
                    self.problems.append(f"index file {name} does not hold the row its name gives")
                    continue
                self.row_files.append(name)
            tables.append(table)
        # Every file's rows decoded at once: thousands of row files cost one pass, not thousands.
        rows = _rows(pa.concat_tables(tables)) if tables else []
        for row in rows:
            known = self.rows.setdefault(row.key, [])
            if not any(row.same(other) for other in known):
                known.append(row)

    def row_for(self, entry, manifest: dict) -> tuple[IndexRow | None, str | None]:
        """(row, None) when the index holds a row for the summary `manifest` (checked) records and
        every rule of an index row holds; (None, why not) otherwise, why None when there is no row."""
        rows = self.rows.get(entry.key, [])
        listed = manifest.get("summary")
        sha = listed.get("sha256") if isinstance(listed, dict) else None
        matching = [r for r in rows if r.summary_sha256 == sha]
        if not matching:
            if not rows:
                return None, None
            matching = rows[:1]  # stale: the rules below say so
        if len(matching) > 1:
            return None, "its index holds rows that disagree for one summary"
        try:
            info = os.lstat(entry.path / SUMMARY_FILE)
        except OSError:
            info = None
        problem = rules.first_problem(IndexRowCheck(matching[0], manifest, entry.vocab_size(manifest), info))
        return (None, problem) if problem is not None else (matching[0], None)


def write_row(root: Path, row: IndexRow) -> None:
    """Add `row` to the index as its own file (what whoever completes an entry does): atomic, under a
    name that only this entry's summary gives, so concurrent writers never collide."""
    folder = index_dir(root)
    ensure_real_dir(folder.parent, "the index folder")
    ensure_real_dir(folder, "the index folder")
    atomic_write(folder / row.file_name, _encode([row], merged=False))


def add_row(root: Path, row: IndexRow, *, replace: bool = False) -> None:
    """`write_row`, with a one-line warning instead of an error (the entry is complete without
    its row: a read derives it from the summary). With `replace`, the entry's other rows are merged
    away at once when no other process holds the index (a summary was derived again)."""
    try:
        write_row(root, row)
        if replace:
            merge(root, CacheIndex(root), {row.key: row}, wait=False)
    except OSError as err:
        warnings.warn(
            f"cache entry {row.key[:12]}: its index row was not written ({_problem(err)}); reads will "
            "use its summary",
            RbplabWarning,
            stacklevel=3,
        )


@contextlib.contextmanager
def _index_lock(root: Path, wait: bool) -> Iterator[bool]:
    locks = root / "locks"
    ensure_real_dir(locks, "the locks folder")
    with held_lock(locks / "index.lock", wait) as held:
        yield held


def merge(
    root: Path,
    index: CacheIndex,
    checked: dict[str, IndexRow],
    *,
    wait: bool,
    keep: Callable[[str], bool] | None = None,
) -> bool:
    """Write the merged file again: for each key of `checked` (rows just checked against, or derived
    from, the entry) that row alone; for every other key the rows `index` holds (those `keep`
    accepts, when given). Then delete the row files `index` read, which the new file now holds.
    Returns False when another process holds the index lock and `wait` is false (nothing written)."""
    with _index_lock(root, wait) as held:
        if not held:
            return False
        fresh = CacheIndex(root)  # rows written since `index` was read are kept too
        rows = dict(checked)
        others: dict[str, list[IndexRow]] = {}  # by key: a row is compared with its entry's only
        for source in (index, fresh):
            for key, found in source.rows.items():
                if key in rows or (keep is not None and not keep(key)):
                    continue
                kept = others.setdefault(key, [])
                kept += [r for r in found if not any(r.same(o) for o in kept)]
        folder = index_dir(root)
        ensure_real_dir(folder.parent, "the index folder")
        ensure_real_dir(folder, "the index folder")
        atomic_write(
            folder / MERGED_FILE, _encode([*rows.values(), *(r for kept in others.values() for r in kept)])
        )
        for name in sorted(set(index.row_files) | set(fresh.row_files)):
            with contextlib.suppress(OSError):
                (folder / name).unlink()
    return True


def index_temporaries(root: Path) -> list[Path]:
    """Temporary files of killed index writes (atomic_write's names)."""
    folder = index_dir(Path(root))
    if folder_problem(folder, "the index folder") is not None or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(".") and ".tmp-" in p.name)


# -- runs read from the index ------------------------------------------------------------------

# Pooled tables of the last runs whose summary was read: a view asks for the same runs again,
# while a study of thousands of runs holds only this many.
RECENT_FULL_SUMMARIES = 8
_RECENT = LastFew(RECENT_FULL_SUMMARIES, "_full")

# What a run read from the index reads from its summary when first asked for it.
_FROM_SUMMARY = frozenset(
    {
        "pairs",
        "doc_tokens",
        "doc_nll",
        "doc_p",
        "hits",
        "seg_doc",
        "seg_start",
        "seg_length",
        "bucket_tokens",
        "bucket_hits",
        "runs",
        "doc_runs",
    }
)


class IndexedSummary(EntrySummary):
    """An entry's summary as a study holds it when the index has its row: the row's numbers, and
    the summary file read (every rule checked, by `load`) only when an analysis asks for a part the
    row lacks (rank pairs, per-document and per-bucket tables, hit runs). The row is derived again
    from what is read and compared: a row that differs stops the analysis in one line."""

    def __init__(self, row: IndexRow, load: Callable[[], EntrySummary]):
        object.__setattr__(self, "row", row)
        object.__setattr__(self, "_load", load)
        object.__setattr__(self, "vocab_size", row.vocab_size)
        object.__setattr__(self, "n_tokens", row.n_tokens)
        object.__setattr__(self, "nll_sq_sum", row.nll_sq_sum)
        object.__setattr__(self, "ks", row.ks)

    def __repr__(self) -> str:
        return f"IndexedSummary(key={self.row.key[:12]}..., n_tokens={self.n_tokens}, |V|={self.vocab_size})"

    def full(self) -> EntrySummary:
        """The entry's summary, read from its file (kept for the last few runs read)."""
        held = self.__dict__.get("_full")
        if held is None:
            held = self._load()
            derived = row_of(
                self.row.key, held, {"sha256": self.row.summary_sha256, "bytes": self.row.summary_bytes}
            )
            if not derived.same(self.row):
                raise CacheCorruptedError(
                    f"cache entry {self.row.key[:12]}: its index row is not the one its summary gives "
                    "(forged, damaged or stale); run rbplab cache repair, then open the study again"
                )
            _RECENT.keep(self, held)
        return held

    def __getattr__(self, name: str):
        if name in _FROM_SUMMARY:
            return getattr(self.full(), name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # Fields with defaults exist on the class: read them from the summary too.
    @property
    def load_tokens(self):
        return self.full().load_tokens

    @property
    def load_documents(self):
        return self.full().load_documents

    @property
    def n_docs(self) -> int:
        return self.row.n_docs

    @property
    def nll_sum(self) -> float:
        return self.row.nll_sum

    @property
    def has_ties(self) -> bool:
        return self.row.has_ties

    def within(self, ks: np.ndarray, ties: str) -> np.ndarray | None:
        """Tokens ranked within each of `ks` under `ties` from the row, or None when some k is
        neither on the row's grid nor at least |V| (then the summary's rank pairs give it)."""
        ks = np.asarray(ks, dtype=np.int64)
        index = np.searchsorted(self.row.ks, ks)
        on = (index < len(self.row.ks)) & (self.row.ks[np.minimum(index, len(self.row.ks) - 1)] == ks)
        full = ks >= self.vocab_size
        if not np.all(on | full):
            return None
        counts = self.row.within[ties]
        return np.where(full, float(self.n_tokens), counts[np.minimum(index, len(counts) - 1)])


def index_problems(root: Path, derived: dict[str, IndexRow], complete: set[str] | None = None) -> list[str]:
    """One line per thing wrong with the index, for `rbplab cache verify`: files it cannot read, and
    for each entry of `derived` (its row derived now from its verified summary) a row of that
    entry that differs (forged or damaged) or names another summary (stale). With `complete` (the
    keys of every complete entry), rows of entries that are not complete are reported too."""
    index = CacheIndex(root)
    found = list(index.problems)
    for key, row in derived.items():
        for other in index.rows.get(key, []):
            if other.summary_sha256 != row.summary_sha256:
                found.append(f"{key[:12]}  stale index row (of a summary the entry no longer has)")
            elif not other.same(row):
                found.append(f"{key[:12]}  index row is not the one its summary gives (forged or damaged)")
    if complete is not None:
        for key in sorted(set(index.rows) - complete):
            found.append(f"{key[:12]}  index row of an entry that is not complete in this cache")
    return found


def rebuild(root: Path, rows: dict[str, IndexRow]) -> int:
    """Replace the whole index by `rows` (derived from every complete entry's checked summary),
    waiting for the index lock; returns the number of rows written."""
    root = Path(root)
    merge(root, CacheIndex(root), rows, wait=True, keep=lambda key: False)
    return len(rows)
