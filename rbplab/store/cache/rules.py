"""The rules a cache entry is checked by, as the rows of one table (`RULES`): its files, its shards,
its manifest and its summary, each derived again rather than trusted.

A rule has a name, the kind of thing it checks (its scope: a spec file, a checksum record, a
manifest, a shard's bytes, a shard file as listed, a summary file, a summary's pooled tables and its
per-document tables, a summary against the one its shards give) and a check that yields what is
wrong, one line each, in the words `rbplab cache verify` prints. Verification is
`problems(subject)`: the rules of the subject's scope in table order; a rule marked `final` stops
its scope when broken, because the rules after it assume it holds.

The subjects come in two groups, each with its rows of the table, in table order:
- the entry's files (`ENTRY_RULES`): spec.json, the shards' checksum records, the manifest, the
  shards;
- the entry's summary (`SUMMARY_RULES`): its file (its bytes against its records), its pooled
  tables (`Summary`) and per-document tables (`SummaryDocuments`), read column by column as flat
  arrays with what they derive (the hit tables of each tie convention, the hit runs, the hits the
  rank pairs imply), and the summary against the one its verified shards give
  (`SummaryDerivation`: verify, repair and import).

`RULES` is the two in that order. Reading the files and parsing the summary's parquet is the
entry's job (`rbplab.store.cache.reading`, which builds an `EntrySummary` once the rules hold); the
rules only judge what was read.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.core.documents import file_kind
from rbplab.core.stats import DOC_RUN_KS, RUN_TIES, SUMMARY_VERSION, TIES, HitRuns, RankPairs, summary_ks
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    MIRRORED,
    MISSING,
    RANK_FORMAT_VERSION,
    SHA256_RE,
    SHARD_INDEX_META,
    SHARD_RE,
    SUMMARY_NLL_SQ_META,
    SUMMARY_TOKENS_META,
    SUMMARY_VERSION_META,
    SUMMARY_VOCAB_META,
    cache_key,
    canonical_json,
    count_at,
    lookup,
    max_shard_bytes,
    max_shard_rows,
    sha256_hex,
    shard_name,
)


@dataclass(frozen=True)
class Rule:
    name: str
    scope: type
    check: Callable[[Any], Iterator[str]]
    final: bool = False  # when broken, the scope's later rules are not checked (they assume it)


def judge(rules: Sequence[Rule], subject: Any, *, through: str | None = None) -> list[tuple[Rule, str]]:
    """(rule, problem) for each rule of `rules` in `subject`'s scope that it breaks, in order; a
    broken final rule ends the scope, and so does the rule named `through` (checking only that far)."""
    scope = [rule for rule in rules if rule.scope is type(subject)]
    if through is not None and through not in {rule.name for rule in scope}:
        raise ValueError(f"no rule {through!r} checks a {type(subject).__name__}")
    found: list[tuple[Rule, str]] = []
    for rule in scope:
        problems = [(rule, problem) for problem in rule.check(subject)]
        found += problems
        if (problems and rule.final) or rule.name == through:
            break
    return found


# The summary's columns read in groups, and those of floats (the others are int64).
PAIR_COLUMNS = ("pair_greater", "pair_equal", "pair_count", "pair_nll")
DOCUMENT_COLUMNS = ("doc_tokens", "doc_nll", "doc_p")
SEGMENT_COLUMNS = ("seg_doc", "seg_start", "seg_length")
_FLOAT_COLUMNS = frozenset({"pair_nll", "doc_nll", "doc_p", "hits_expected"})


class SummaryTables:
    """What the two summary scopes share: a parquet table of one row of list columns, read column
    by column as flat arrays; the hit tables it holds (one per tie convention, a row per bucket or
    document and a column per k of `ks`) and the hit-run histograms that summarise them."""

    table: pa.Table
    ks: np.ndarray
    tied: bool  # some token is tied: each convention has its own tables
    row_tokens: np.ndarray  # the tokens of each row of a hit table
    hit_columns: dict[str, str]  # tie convention -> the column of its hit table
    hit_label: str
    run_prefix: str
    run_ks: list[int]  # the thresholds that have hit runs
    run_hits: dict[str, np.ndarray]  # what the runs hold: per document, or pooled from the rank pairs
    pair_hits: dict[str, np.ndarray]  # what every hit table sums to (`Summary.pair_hits`)
    per_document: bool

    def lacks(self, name: str) -> str | None:
        """Why column `name` cannot be read as a list, None when it can."""
        if name not in self.table.column_names:
            return f"the summary lacks {name}"
        if not pa.types.is_list(self.table.column(name).type):
            return f"the summary's {name} is not a list"
        return None

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        return {}

    def column(self, name: str) -> np.ndarray:
        """List column `name` as one flat array (read once)."""
        if name not in self._arrays:
            values = self.table.column(name).combine_chunks().values.to_numpy(zero_copy_only=False)
            self._arrays[name] = np.asarray(values, dtype=np.float64 if name in _FLOAT_COLUMNS else np.int64)
        return self._arrays[name]

    @cached_property
    def hit_tables(self) -> dict[str, np.ndarray | None]:
        """Each convention's hit table as stored (rows, len(ks)); None where the file has none."""
        shape = (len(self.row_tokens), len(self.ks))
        return {
            ties: self.column(name).reshape(shape) if name in self.table.column_names else None
            for ties, name in self.hit_columns.items()
        }

    @cached_property
    def hits(self) -> dict[str, np.ndarray]:
        """Every convention's hit table, the optimistic one standing in for those the file omits
        (no token is tied, so they hold the same numbers)."""
        optimistic = self.hit_tables["optimistic"]
        return {ties: optimistic if table is None else table for ties, table in self.hit_tables.items()}

    @property
    def run_columns(self) -> tuple[str, ...]:
        fields = ("tie", "k", "length", "count") + (("doc",) if self.per_document else ())
        return tuple(f"{self.run_prefix}_{field}" for field in fields)

    @cached_property
    def runs(self) -> dict[tuple[str, int], HitRuns]:
        """(ties, k) -> the hit runs stored for it; without a tied token the pessimistic runs are
        the optimistic ones."""
        tie, k, length, count, *doc = (self.column(name) for name in self.run_columns)
        out = {}
        for ties in RUN_TIES if self.tied else ("optimistic",):
            for kk in self.run_ks:
                rows = (tie == RUN_TIES.index(ties)) & (k == kk)
                out[(ties, kk)] = HitRuns(length[rows], count[rows], *(d[rows] for d in doc))
        if not self.tied:
            out |= {("pessimistic", kk): runs for (_, kk), runs in list(out.items())}
        return out


@dataclass(frozen=True, eq=False)
class Summary(SummaryTables):
    """A summary file's pooled tables as read (`table`: every column but the per-document ones;
    `meta`: its parquet schema metadata), against the entry it was read for: its key, |V| and token
    count (from the entry's spec and verified manifest)."""

    table: pa.Table
    meta: dict[bytes, bytes]
    key: str
    vocab_size: int
    n_tokens: int

    hit_label = "bucket hits"
    run_prefix = "run"
    per_document = False

    @property
    def hit_columns(self) -> dict[str, str]:
        return {ties: f"bucket_hits_{ties}" for ties in RUN_TIES}

    @cached_property
    def nll_sq_sum(self) -> float | None:
        try:
            return float.fromhex(self.meta.get(SUMMARY_NLL_SQ_META, b"").decode())
        except ValueError:
            return None

    @property
    def ks(self) -> np.ndarray:
        return self.column("ks")

    @cached_property
    def pairs(self) -> RankPairs:
        return RankPairs(*(self.column(name) for name in PAIR_COLUMNS))

    @cached_property
    def tied(self) -> bool:
        return bool(np.any(self.pairs.equal > 1))

    @cached_property
    def pair_hits(self) -> dict[str, np.ndarray]:
        """Tokens ranked within each k under each convention, from the rank pairs: what every
        table of hits must sum to."""
        return {ties: _pair_hits(self.pairs, self.ks, ties) for ties in TIES}

    @property
    def row_tokens(self) -> np.ndarray:
        return self.column("bucket_tokens")

    @property
    def run_ks(self) -> list[int]:
        return [int(k) for k in self.ks]

    @property
    def run_hits(self) -> dict[str, np.ndarray]:
        return self.pair_hits


@dataclass(frozen=True, eq=False)
class SummaryDocuments(SummaryTables):
    """A summary file's per-document tables as read (`table`), against its pooled tables (`pooled`,
    checked)."""

    table: pa.Table
    pooled: Summary

    hit_label = "document hits"
    run_prefix = "doc_run"
    per_document = True

    @property
    def hit_columns(self) -> dict[str, str]:
        return {ties: f"hits_{ties}" for ties in TIES}

    @property
    def ks(self) -> np.ndarray:
        return self.pooled.ks

    @property
    def tied(self) -> bool:
        return self.pooled.tied

    @property
    def row_tokens(self) -> np.ndarray:
        return self.pooled.column("doc_tokens")

    @property
    def pair_hits(self) -> dict[str, np.ndarray]:
        return self.pooled.pair_hits

    @property
    def run_ks(self) -> list[int]:
        return [int(k) for k in self.ks if k in DOC_RUN_KS]

    @property
    def run_hits(self) -> dict[str, np.ndarray]:
        return self.hits


def _pair_hits(pairs: RankPairs, ks: np.ndarray, ties: str) -> np.ndarray:
    if ties == "expected":
        share = np.clip((ks[None, :] - pairs.greater[:, None]) / pairs.equal[:, None], 0.0, 1.0)
        return pairs.count @ share
    rank = pairs.greater + pairs.equal if ties == "pessimistic" else pairs.greater + 1
    order = np.argsort(rank, kind="stable")
    cumulative = np.r_[0, np.cumsum(pairs.count[order])]
    return cumulative[np.searchsorted(rank[order], ks, side="right")].astype(np.float64)


@dataclass(frozen=True)
class SpecFile:
    """spec.json as parsed, against the key of the entry it sits in."""

    key: str
    on_disk: Any

    @cached_property
    def on_disk_key(self) -> str | None:
        """The key spec.json hashes to; None when it is no JSON object (hashed once for two rules)."""
        return _key_or_none(self.on_disk)


def _key_or_none(spec: Any) -> str | None:
    try:
        return cache_key(spec)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Record:
    """A shard's checksum record ({"sha256", "rows", "bytes", ...}) under the entry's spec."""

    record: Any
    spec: Any


@dataclass(frozen=True)
class Manifest:
    """A complete entry's parsed manifest.json, with what else its rules look at: the entry's key
    and spec, what is wrong with its spec.json (None: nothing), the names in its folder."""

    key: str
    spec: dict
    manifest: Any
    spec_problem: str | None
    names: tuple[str, ...]

    @cached_property
    def records_ok(self) -> bool:
        shards = self.manifest.get("shards")
        return isinstance(shards, list) and bool(shards) and all(isinstance(r, dict) for r in shards)

    @cached_property
    def records(self) -> list[dict]:
        return self.manifest["shards"] if self.records_ok else []


@dataclass(frozen=True)
class Shard:
    """The bytes read for shard `index` against its (checked) record."""

    key: str
    index: int
    record: dict
    data: bytes


@dataclass(frozen=True)
class ShardFile:
    """Shard `index` of a checked manifest as the file system lists it (`info`: its lstat, None when
    it cannot be had): what a listing checks without reading shard bytes."""

    index: int
    record: dict
    info: os.stat_result | None


@dataclass(frozen=True)
class ShardRecords:
    """Shard `index`'s two records: the manifest's (`record`, checked) and its .sha256 file as read
    (`checksum`: (record, None), or (None, why it has no usable one))."""

    index: int
    record: dict
    checksum: tuple[dict | None, str | None]


# ---------------------------------------------------------------------------------------------
# The checks


def _spec_is_object(s: SpecFile) -> Iterator[str]:
    if s.on_disk_key is None:
        yield "spec.json is not a JSON object"


def _spec_is_the_entrys(s: SpecFile) -> Iterator[str]:
    key = s.on_disk_key
    if key != s.key:
        yield f"spec.json hashes to {key[:12]}, not to the entry's key (copied from another entry?)"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _record_is_object(r: Record) -> Iterator[str]:
    if not isinstance(r.record, dict):
        yield "is not a record"


def _record_sha256(r: Record) -> Iterator[str]:
    if not isinstance(r.record.get("sha256"), str) or not SHA256_RE.match(r.record["sha256"]):
        yield "has no valid sha256"


def _record_rows(r: Record) -> Iterator[str]:
    rows = r.record.get("rows")
    if not _is_int(rows) or rows < 0:
        yield "has no valid row count"


def _record_rows_bound(r: Record) -> Iterator[str]:
    rows, bound = r.record["rows"], max_shard_rows(r.spec)
    if rows > bound:
        yield f"claims {rows} rows, more than one shard holds under its spec ({bound})"


def _record_bytes(r: Record) -> Iterator[str]:
    size = r.record.get("bytes")
    if not _is_int(size) or size <= 0:
        yield "has no valid byte count"


def _record_bytes_bound(r: Record) -> Iterator[str]:
    rows, size = r.record["rows"], r.record["bytes"]
    if size > max_shard_bytes(rows):
        yield f"claims {size} bytes, more than a shard of {rows} rows takes ({max_shard_bytes(rows)})"


def _manifest_spec_file(m: Manifest) -> Iterator[str]:
    if m.spec_problem:
        yield m.spec_problem


def _manifest_is_object(m: Manifest) -> Iterator[str]:
    if not isinstance(m.manifest, dict):
        yield "manifest.json is not a JSON object"


def _manifest_key(m: Manifest) -> Iterator[str]:
    manifest = m.manifest
    if "key" not in manifest:
        yield "the manifest records no key (an empty or foreign manifest.json)"
    elif manifest.get("key") != m.key:
        yield (
            f"the manifest's key {str(manifest.get('key'))[:12]!r} is not the entry's key "
            "(manifest copied from another entry?)"
        )
    elif not isinstance(manifest.get("spec"), dict) or _key_or_none(manifest["spec"]) != m.key:
        # m.key is the hash of the entry's spec: equal hashes, equal canonical texts
        yield "the manifest's spec differs from the entry's spec"


def _manifest_format_version(m: Manifest) -> Iterator[str]:
    version = m.manifest.get("rank_format_version", RANK_FORMAT_VERSION)
    if version != RANK_FORMAT_VERSION:
        yield f"rank_format_version {version!r} is not {RANK_FORMAT_VERSION}"


def _manifest_shard_list(m: Manifest) -> Iterator[str]:
    if not m.records_ok:
        yield "the manifest has no list of shard records"


def _manifest_shard_order(m: Manifest) -> Iterator[str]:
    indices = [r.get("index") for r in m.records]
    if m.records_ok and indices != list(range(len(m.records))):
        yield f"shard records are not exactly 0..{len(m.records) - 1} in order (indices {indices})"


def _manifest_shard_records(m: Manifest) -> Iterator[str]:
    for position, record in enumerate(m.records):
        index = record.get("index")
        label = index if _is_int(index) else position
        if record.get("file") != shard_name(label):
            yield (
                f"shard record {label} names file {record.get('file')!r}; only {shard_name(label)!r} "
                "is allowed"
            )
        problem = _record_problem(record, m.spec)
        if problem is not None:
            yield f"shard record {label} {problem}"


def _record_problem(record: Any, spec: Any) -> str | None:
    # A manifest's records, judged by the Record rows below: the rows `verify.RULES` holds (this
    # module cannot ask `verify`, which imports it).
    found = judge(ENTRY_RULES, Record(record, spec))
    return found[0][1] if found else None


def _row_counts(m: Manifest) -> list[int] | None:
    counts = [r.get("rows") for r in m.records]
    return counts if m.records_ok and all(_is_int(n) for n in counts) else None


def _manifest_n_tokens(m: Manifest) -> Iterator[str]:
    counts = _row_counts(m)
    if counts is not None and m.manifest.get("n_tokens") != sum(counts):
        yield f"n_tokens {m.manifest.get('n_tokens')!r} is not the sum of the shard rows ({sum(counts)})"


def _manifest_full_shards(m: Manifest) -> Iterator[str]:
    # Every shard but the last holds at least shard_tokens targets. (How many shards there must
    # be follows from the corpus: `rbplab.extraction.plan.count_problems`.)
    counts, shard_tokens = _row_counts(m), count_at(m.spec, ("windows", "shard_tokens"))
    if counts is not None and shard_tokens:
        short = [i for i, rows in enumerate(counts[:-1]) if rows < shard_tokens]
        if short:
            yield (
                f"shard records {short} hold fewer than the {shard_tokens} rows every shard but the "
                "last holds under the spec"
            )


def _manifest_token_budget(m: Manifest) -> Iterator[str]:
    counts, budget = _row_counts(m), count_at(m.spec, ("max_tokens",))
    if counts is not None and budget and sum(counts) > budget:
        yield f"the shards hold {sum(counts)} rows, more than max_tokens ({budget})"


def _manifest_no_extra_shards(m: Manifest) -> Iterator[str]:
    listed = len(m.records)
    extra = sorted(
        int(match.group(1))
        for match in (SHARD_RE.match(name) for name in m.names)
        if match and int(match.group(1)) >= listed
    )
    if extra:
        yield f"shard files {extra} exist beyond the {listed} shards the manifest lists"


def _manifest_mirrors_spec(m: Manifest) -> Iterator[str]:
    for manifest_path, spec_path in MIRRORED.items():
        expected = lookup(m.spec, spec_path)
        if expected is MISSING:
            continue
        found = lookup(m.manifest, manifest_path)
        if found is MISSING:
            if manifest_path == ("vocab_size",):
                yield "the manifest records no vocab_size"
            continue
        if canonical_json(found) != canonical_json(expected):
            yield f"manifest {'.'.join(manifest_path)} is {found!r} but the spec says {expected!r}"


def _shard_size(s: Shard) -> Iterator[str]:
    if len(s.data) != s.record["bytes"]:
        yield f"shard {s.index} has {len(s.data)} bytes but its record says {s.record['bytes']}"


def _shard_checksum(s: Shard) -> Iterator[str]:
    if sha256_hex(s.data) != s.record["sha256"]:
        yield f"shard {s.index} failed its checksum"


def _shard_identity(s: Shard) -> Iterator[str]:
    try:
        metadata = pq.read_schema(pa.BufferReader(s.data)).metadata or {}
    except (pa.ArrowException, OSError, ValueError) as err:
        yield f"shard {s.index} is not a readable parquet file ({err})"
        return
    key, written_index = metadata.get(ENTRY_KEY_META), metadata.get(SHARD_INDEX_META)
    if key is None and written_index is None:
        yield (
            f"shard {s.index} does not record which entry it belongs to (no rbplab.entry_key metadata: "
            "written by a development build before 0.1.0, or not by rbplab)"
        )
        return
    key_text = (key or b"").decode(errors="replace")
    if key_text != s.key:
        yield f"shard {s.index} belongs to another entry ({key_text[:12] or 'unknown'}), not to this one"
    elif written_index != b"%d" % s.index:
        yield f"shard file {s.index} holds shard {(written_index or b'?').decode(errors='replace')}"


def _shard_rows(s: Shard) -> Iterator[str]:
    try:
        rows = pq.read_metadata(pa.BufferReader(s.data)).num_rows
    except (pa.ArrowException, OSError, ValueError) as err:
        yield f"shard {s.index} is not a readable parquet file ({err})"
        return
    if rows != s.record["rows"]:
        yield f"shard {s.index} has {rows} rows but its record says {s.record['rows']}"


def _listed_shard_present(f: ShardFile) -> Iterator[str]:
    if f.info is None:
        yield f"shard {f.index} is missing or unreadable"


def _listed_shard_regular(f: ShardFile) -> Iterator[str]:
    if not stat.S_ISREG(f.info.st_mode):
        yield f"{shard_name(f.index)} is {file_kind(f.info.st_mode)}, not a regular file"


def _listed_shard_size(f: ShardFile) -> Iterator[str]:
    if f.info.st_size != f.record["bytes"]:
        yield f"shard {f.index} has {f.info.st_size} bytes but its record says {f.record['bytes']}"


def _records_agree(f: ShardRecords) -> Iterator[str]:
    checksum, problem = f.checksum
    if problem is not None:
        yield problem
    elif any(checksum[field] != f.record.get(field) for field in ("sha256", "rows", "bytes")):
        yield f"{shard_name(f.index)}.sha256 disagrees with the manifest's record of shard {f.index}"


# ---------------------------------------------------------------------------------------------
# The rows

# Rules named by the readers that check a shard only so far (`broken(..., through=...)`).
SHARD_CHECKSUM = "shard matches its checksum"
SHARD_IDENTITY = "shard metadata names this entry and index"

ENTRY_RULES: tuple[Rule, ...] = (
    Rule("spec.json is an object", SpecFile, _spec_is_object, final=True),
    Rule("spec.json hashes to the entry's key", SpecFile, _spec_is_the_entrys),
    Rule("record is an object", Record, _record_is_object, final=True),
    Rule("record has a sha256", Record, _record_sha256, final=True),
    Rule("record has a row count", Record, _record_rows, final=True),
    Rule("record rows within the spec's bound", Record, _record_rows_bound, final=True),
    Rule("record has a byte count", Record, _record_bytes, final=True),
    Rule("record bytes within the rows' bound", Record, _record_bytes_bound, final=True),
    Rule("spec.json is the entry's", Manifest, _manifest_spec_file),
    Rule("manifest is an object", Manifest, _manifest_is_object, final=True),
    Rule("manifest key and spec are the entry's", Manifest, _manifest_key),
    Rule("rank format version", Manifest, _manifest_format_version),
    Rule("manifest lists shard records", Manifest, _manifest_shard_list),
    Rule("shard records are 0..n-1 in order", Manifest, _manifest_shard_order),
    Rule("shard records name their own file and are sound", Manifest, _manifest_shard_records),
    Rule("n_tokens is the sum of the shard rows", Manifest, _manifest_n_tokens),
    Rule("every shard but the last is full", Manifest, _manifest_full_shards),
    Rule("no more rows than max_tokens", Manifest, _manifest_token_budget),
    Rule("no shard files beyond the list", Manifest, _manifest_no_extra_shards),
    Rule("manifest fields mirror the spec", Manifest, _manifest_mirrors_spec),
    Rule("shard has its recorded bytes", Shard, _shard_size, final=True),
    Rule(SHARD_CHECKSUM, Shard, _shard_checksum, final=True),
    Rule(SHARD_IDENTITY, Shard, _shard_identity, final=True),
    Rule("shard has its recorded rows", Shard, _shard_rows, final=True),
    Rule("listed shard exists", ShardFile, _listed_shard_present, final=True),
    Rule("listed shard is a regular file", ShardFile, _listed_shard_regular, final=True),
    Rule("listed shard has its recorded bytes", ShardFile, _listed_shard_size, final=True),
    Rule("both records of a shard agree", ShardRecords, _records_agree, final=True),
)


@dataclass(frozen=True)
class SummaryFile:
    """The summary's bytes, its .sha256 record and what the manifest lists for it."""

    data: bytes
    record: Any
    listed: Any


@dataclass(frozen=True)
class SummaryDerivation:
    """A stored summary (whose own rules hold) and the summary its verified shards give now, each
    read whole (`summary_file.summary_table`): checked by `rbplab cache verify`, `cache repair` and
    `cache import`, which read every shard anyway, never by a plain read."""

    stored: pa.Table
    derived: pa.Table


# ---------------------------------------------------------------------------------------------
# The checks


def _summary_checksum(s: SummaryFile) -> Iterator[str]:
    if not isinstance(s.record, dict) or s.record.get("sha256") != sha256_hex(s.data):
        yield "its summary failed its checksum"


def _summary_listed(s: SummaryFile) -> Iterator[str]:
    if isinstance(s.listed, dict) and s.listed.get("sha256") != s.record["sha256"]:
        yield "its summary is not the one the manifest records"


def _summary_key(s: Summary) -> Iterator[str]:
    if s.meta.get(ENTRY_KEY_META) != s.key.encode():
        yield "the summary was written for another entry"


def _summary_version(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_VERSION_META) != str(SUMMARY_VERSION).encode():
        yield "the summary's version is not this one"


def _summary_vocab(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_VOCAB_META) != str(s.vocab_size).encode():
        yield f"the summary's |V| is not {s.vocab_size}"


def _summary_tokens(s: Summary) -> Iterator[str]:
    if s.meta.get(SUMMARY_TOKENS_META) != str(s.n_tokens).encode():
        yield f"the summary does not hold {s.n_tokens} tokens"


def _summary_one_row(s: Summary) -> Iterator[str]:
    if s.table.num_rows != 1:
        yield "the summary must be one row"


def _summary_nll_moment(s: Summary) -> Iterator[str]:
    if s.nll_sq_sum is None:
        yield "the summary's nll moment is unreadable"


def _has(*names: str) -> Callable[[SummaryTables], Iterator[str]]:
    """The check that columns `names` are there as lists (each read, in this order)."""

    def check(s: SummaryTables) -> Iterator[str]:
        for name in names:
            problem = s.lacks(name)
            if problem is not None:
                yield problem
                return
            s.column(name)

    return check


def _thresholds(s: Summary) -> Iterator[str]:
    if not np.array_equal(s.ks, summary_ks(s.vocab_size)):
        yield "the summary's thresholds are not the grid of its |V|"


def _pair_values(s: Summary) -> Iterator[str]:
    p = s.pairs
    if len(p.greater) and not (p.greater.min() >= 0 and p.equal.min() >= 1 and p.count.min() >= 1):
        yield "bad pair values"


def _pair_ranks(s: Summary) -> Iterator[str]:
    if len(s.pairs.greater) and (s.pairs.greater + s.pairs.equal).max() > s.vocab_size:
        yield "a pair's rank exceeds |V|"


def _pair_counts_sum(s: Summary) -> Iterator[str]:
    if int(s.pairs.count.sum()) != s.n_tokens:
        yield "the pair counts do not sum to the token count"


def _same_lengths(names: tuple[str, ...], problem: str) -> Callable[[Summary], Iterator[str]]:
    """The check that columns `names` are of one length."""

    def check(s: Summary) -> Iterator[str]:
        if len({len(s.column(name)) for name in names}) != 1:
            yield problem

    return check


_PAIR_LENGTHS = _same_lengths(PAIR_COLUMNS, "pair columns differ")
_DOCUMENT_LENGTHS = _same_lengths(DOCUMENT_COLUMNS, "document columns differ in length")
_SEGMENT_LENGTHS = _same_lengths(SEGMENT_COLUMNS, "segment columns differ in length")


def _document_tokens(s: Summary) -> Iterator[str]:
    tokens = s.column("doc_tokens")
    if not (tokens.min(initial=0) >= 0 and int(tokens.sum()) == s.n_tokens):
        yield "bad document token counts"


def _segment_values(s: Summary) -> Iterator[str]:
    if not (s.column("seg_length").min(initial=1) >= 1 and s.column("seg_start").min(initial=0) >= 0):
        yield "bad segments"


def _segment_documents(s: Summary) -> Iterator[str]:
    doc = s.column("seg_doc")
    if not (doc.min(initial=0) >= 0 and doc.max(initial=-1) < len(s.column("doc_tokens"))):
        yield "a segment's document is unknown"


def _segments_hold_documents(s: Summary) -> Iterator[str]:
    tokens = s.column("doc_tokens")
    held = np.bincount(s.column("seg_doc"), weights=s.column("seg_length"), minlength=len(tokens))
    if not np.array_equal(held, tokens):
        yield "the segments do not hold each document's tokens"


def _bucket_tokens(s: Summary) -> Iterator[str]:
    tokens = s.column("bucket_tokens")
    if not (int(tokens.sum()) == s.n_tokens and tokens.min(initial=0) >= 0):
        yield "bad bucket counts"


def _stored_hit_columns(s: SummaryTables) -> list[str]:
    return [name for name in s.hit_columns.values() if name in s.table.column_names]


def _hit_lists(s: SummaryTables) -> Iterator[str]:
    for name in _stored_hit_columns(s):
        problem = s.lacks(name)
        if problem is not None:
            yield problem
            return


def _hit_shapes(s: SummaryTables) -> Iterator[str]:
    for name in _stored_hit_columns(s):
        if len(s.column(name)) != len(s.row_tokens) * len(s.ks):
            yield f"the summary's {name} has the wrong shape"
            return


def _hit_range(s: SummaryTables) -> Iterator[str]:
    bound = s.row_tokens[:, None] + 1e-9
    for values, name in zip(s.hit_tables.values(), s.hit_columns.values(), strict=True):
        if values is not None and not (np.all(values >= 0) and np.all(values <= bound)):
            yield f"{name} out of range"
            return


def _hits_rise_with_k(s: SummaryTables) -> Iterator[str]:
    for values, name in zip(s.hit_tables.values(), s.hit_columns.values(), strict=True):
        if values is not None and not np.all(np.diff(values, axis=1) >= -1e-9):
            yield f"{name} falls as k grows"
            return


def _optimistic_hits(s: SummaryTables) -> Iterator[str]:
    if s.hit_tables["optimistic"] is None:
        yield f"the summary lacks {s.hit_columns['optimistic']}"


def _hit_conventions(s: SummaryTables) -> Iterator[str]:
    if all(table is not None for table in s.hit_tables.values()) != s.tied:
        yield "the summary's tie conventions do not match"


def _hits_hold_pair_hits(s: SummaryTables) -> Iterator[str]:
    for ties, values in s.hits.items():
        if not np.allclose(values.sum(axis=0), s.pair_hits[ties], rtol=1e-9, atol=1e-6):
            yield f"{s.hit_label} ({ties}) do not hold the ranks' hits"
            return


def _run_columns(s: SummaryTables) -> Iterator[str]:
    yield from _has(*s.run_columns)(s)


def _run_lengths(s: SummaryTables) -> Iterator[str]:
    if len({len(s.column(name)) for name in s.run_columns[:4]}) != 1:
        yield f"{s.run_prefix} columns differ in length"


def _run_values(s: SummaryTables) -> Iterator[str]:
    length, count = s.column(f"{s.run_prefix}_length"), s.column(f"{s.run_prefix}_count")
    if not (length.min(initial=1) >= 1 and count.min(initial=1) >= 1):
        yield f"bad {s.run_prefix} lengths or counts"


def _run_documents(s: SummaryDocuments) -> Iterator[str]:
    doc, tie = s.column("doc_run_doc"), s.column("doc_run_tie")
    if not (len(doc) == len(tie) and doc.min(initial=0) >= 0 and doc.max(initial=-1) < len(s.row_tokens)):
        yield "bad run docs"


def _runs_hold_hits(s: SummaryTables) -> Iterator[str]:
    for (ties, k), runs in s.runs.items():
        if ties == "pessimistic" and not s.tied:
            continue  # the optimistic runs, checked as such
        j = int(np.searchsorted(s.ks, k))
        held = runs.length * runs.count
        if runs.doc is None:
            holds = held.sum() == s.run_hits[ties][j]
        else:
            per_doc = np.bincount(runs.doc, weights=held, minlength=len(s.row_tokens))
            holds = np.array_equal(per_doc, s.run_hits[ties][:, j])
        if not holds:
            yield f"{s.run_prefix} at k={k} do not hold its hits"
            return


# Floats derived again on another machine may differ in their last bits (a BLAS dot product); a
# summary of other tokens differs by far more.
_DERIVED_RTOL = 1e-9


def _flat(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    if pa.types.is_list(column.type):
        column = column.values
    return column.to_numpy(zero_copy_only=False)


def _summary_derived(s: SummaryDerivation) -> Iterator[str]:
    what = "its summary is not the one its shards give"
    stored, derived = s.stored, s.derived
    if stored.num_rows != derived.num_rows or set(stored.column_names) != set(derived.column_names):
        yield f"{what} (other columns)"
        return
    for name in derived.column_names:
        a, b = _flat(stored, name), _flat(derived, name)
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            same = a.shape == b.shape and np.allclose(a, b, rtol=_DERIVED_RTOL, atol=0.0)
        else:
            same = np.array_equal(a, b)
        if not same:
            yield f"{what} ({name} differs)"
            return
    moments = [(t.schema.metadata or {}).get(SUMMARY_NLL_SQ_META, b"") for t in (stored, derived)]
    try:
        a, b = (float.fromhex(m.decode()) for m in moments)
    except ValueError:
        a, b = 0.0, 1.0  # unreadable: differs
    if not np.isclose(a, b, rtol=_DERIVED_RTOL, atol=0.0):
        yield f"{what} (its nll moment differs)"


# ---------------------------------------------------------------------------------------------
# The rows

SUMMARY_RULES: tuple[Rule, ...] = (
    Rule("summary matches its checksum", SummaryFile, _summary_checksum, final=True),
    Rule("summary is the manifest's", SummaryFile, _summary_listed, final=True),
    # A summary's pooled tables, checked as it is opened. It is refused on the first rule it breaks,
    # so every rule of its two scopes is final.
    Rule("summary names this entry", Summary, _summary_key, final=True),
    Rule("summary version is this one", Summary, _summary_version, final=True),
    Rule("summary |V| is the entry's", Summary, _summary_vocab, final=True),
    Rule("summary holds the entry's tokens", Summary, _summary_tokens, final=True),
    Rule("summary is one row", Summary, _summary_one_row, final=True),
    Rule("nll moment is readable", Summary, _summary_nll_moment, final=True),
    Rule("ks is there", Summary, _has("ks"), final=True),
    Rule("ks is the grid of |V|", Summary, _thresholds, final=True),
    Rule("rank-pair columns are there", Summary, _has(*PAIR_COLUMNS), final=True),
    Rule("rank-pair columns are of one length", Summary, _PAIR_LENGTHS, final=True),
    Rule("rank pairs are in range", Summary, _pair_values, final=True),
    Rule("no rank beyond |V|", Summary, _pair_ranks, final=True),
    Rule("pair counts sum to the tokens", Summary, _pair_counts_sum, final=True),
    Rule("document columns are there", Summary, _has(*DOCUMENT_COLUMNS), final=True),
    Rule("document columns are of one length", Summary, _DOCUMENT_LENGTHS, final=True),
    Rule("document tokens sum to the tokens", Summary, _document_tokens, final=True),
    Rule("segment columns are there", Summary, _has(*SEGMENT_COLUMNS), final=True),
    Rule("segment columns are of one length", Summary, _SEGMENT_LENGTHS, final=True),
    Rule("segments have a start and a length", Summary, _segment_values, final=True),
    Rule("segments name known documents", Summary, _segment_documents, final=True),
    Rule("segments hold each document's tokens", Summary, _segments_hold_documents, final=True),
    Rule("bucket_tokens is there", Summary, _has("bucket_tokens"), final=True),
    Rule("bucket tokens sum to the tokens", Summary, _bucket_tokens, final=True),
    Rule("hit tables are lists", Summary, _hit_lists, final=True),
    Rule("hit tables have a row per bucket and a column per k", Summary, _hit_shapes, final=True),
    Rule("hits lie within their bucket's tokens", Summary, _hit_range, final=True),
    Rule("hits never fall as k grows", Summary, _hits_rise_with_k, final=True),
    Rule("the optimistic hit table is there", Summary, _optimistic_hits, final=True),
    Rule("hit tables follow the tie conventions", Summary, _hit_conventions, final=True),
    Rule("hits sum to the rank pairs' hits", Summary, _hits_hold_pair_hits, final=True),
    Rule("hit-run columns are there", Summary, _run_columns, final=True),
    Rule("hit-run columns are of one length", Summary, _run_lengths, final=True),
    Rule("hit-run lengths and counts are positive", Summary, _run_values, final=True),
    Rule("hit runs hold the hits", Summary, _runs_hold_hits, final=True),
    # The per-document tables, checked when an analysis first reads them.
    Rule("hit tables are lists", SummaryDocuments, _hit_lists, final=True),
    Rule("hit tables have a row per document and a column per k", SummaryDocuments, _hit_shapes, final=True),
    Rule("hits lie within their document's tokens", SummaryDocuments, _hit_range, final=True),
    Rule("hits never fall as k grows", SummaryDocuments, _hits_rise_with_k, final=True),
    Rule("the optimistic hit table is there", SummaryDocuments, _optimistic_hits, final=True),
    Rule("hit tables follow the tie conventions", SummaryDocuments, _hit_conventions, final=True),
    Rule("hits sum to the rank pairs' hits", SummaryDocuments, _hits_hold_pair_hits, final=True),
    Rule("hit-run columns are there", SummaryDocuments, _run_columns, final=True),
    Rule("hit-run columns are of one length", SummaryDocuments, _run_lengths, final=True),
    Rule("hit-run lengths and counts are positive", SummaryDocuments, _run_values, final=True),
    Rule("hit runs name known documents", SummaryDocuments, _run_documents, final=True),
    Rule("hit runs hold the hits", SummaryDocuments, _runs_hold_hits, final=True),
    # The summary against the tokens of its verified shards (read whole: verify, repair, import).
    Rule("summary is the one its shards give", SummaryDerivation, _summary_derived, final=True),
)


# ---------------------------------------------------------------------------------------------
# The cache index's rows (`rbplab.store.cache.index`): derived from summaries, never trusted. A read
# takes a row only for the summary the entry's verified manifest records, and only when every
# relation its numbers must hold is there; otherwise it reads the summary itself.

INDEX_TIES = ("pessimistic", "optimistic", "expected")


@dataclass(frozen=True)
class IndexRowCheck:
    """An index row (`rbplab.store.cache.index.IndexRow`) against the entry it would stand for:
    the entry's checked manifest, its |V|, and the lstat of its summary file (None when absent)."""

    row: Any
    manifest: dict
    vocab_size: int
    summary_info: os.stat_result | None


def _index_row_summary(c: IndexRowCheck) -> Iterator[str]:
    listed = c.manifest.get("summary")
    if not isinstance(listed, dict) or listed.get("sha256") != c.row.summary_sha256:
        yield "its index row is stale: it was derived from another summary than the manifest records"
    elif listed.get("bytes") != c.row.summary_bytes:
        yield "its index row gives another size for the summary than the manifest records"


def _index_row_summary_file(c: IndexRowCheck) -> Iterator[str]:
    info = c.summary_info
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size != c.row.summary_bytes:
        yield "its summary file is not the regular file of the size its index row records"


def _index_row_counts(c: IndexRowCheck) -> Iterator[str]:
    if c.row.n_tokens != c.manifest.get("n_tokens") or c.row.vocab_size != c.vocab_size:
        yield "its index row does not hold the entry's tokens and |V|"


@functools.lru_cache(maxsize=64)
def _summary_grid(vocab_size: int) -> np.ndarray:
    grid = summary_ks(vocab_size)
    grid.flags.writeable = False  # shared by every row of that |V|
    return grid


def _index_row_grid(c: IndexRowCheck) -> Iterator[str]:
    if not np.array_equal(c.row.ks, _summary_grid(c.vocab_size)):
        yield "its index row's thresholds are not the grid of its |V|"
        return
    for ties in INDEX_TIES:
        if c.row.within[ties].shape != c.row.ks.shape:
            yield f"its index row's {ties} counts are not one per threshold"
            return


def _index_row_within(c: IndexRowCheck) -> Iterator[str]:
    n = c.row.n_tokens
    w = np.stack([c.row.within[ties] for ties in INDEX_TIES])  # one pass for the three conventions
    for ties, counts, finite in zip(INDEX_TIES, w, np.isfinite(w).all(axis=1), strict=True):
        if not finite or (len(counts) and (counts.min() < 0 or counts.max() > n)):
            yield f"its index row's {ties} counts lie outside 0..{n}"
            return
    falls = (np.diff(w, axis=1) < 0).any(axis=1)
    if falls.any():
        yield f"its index row's {INDEX_TIES[int(np.argmax(falls))]} counts fall as k grows"
        return
    for ties in RUN_TIES:  # hits are whole tokens under the 0/1 conventions
        if np.any(c.row.within[ties] != np.round(c.row.within[ties])):
            yield f"its index row's {ties} counts are not whole tokens"
            return


def _index_row_conventions(c: IndexRowCheck) -> Iterator[str]:
    w = c.row.within
    # Within rounding of the expected shares: a tied token counts 0..1 of a hit.
    slack = 1e-9 * max(c.row.n_tokens, 1)
    ordered = np.all(w["pessimistic"] <= w["expected"] + slack) and np.all(
        w["expected"] <= w["optimistic"] + slack
    )
    if not ordered:
        yield "its index row's counts break pessimistic <= expected <= optimistic"
    elif not c.row.has_ties and not (
        np.array_equal(w["pessimistic"], w["optimistic"]) and np.allclose(w["expected"], w["optimistic"])
    ):
        yield "its index row records no tied token, but its tie conventions differ"


def _index_row_totals(c: IndexRowCheck) -> Iterator[str]:
    r, n = c.row, c.row.n_tokens
    sums = np.array([r.nll_sum, r.nll_sq_sum, r.p_sum], dtype=np.float64)
    if not np.all(np.isfinite(sums)) or sums.min() < 0 or r.p_sum > n * (1 + 1e-12) or r.n_docs < 0:
        yield "its index row's totals are impossible (nll, nll², probability or document counts)"
    elif n and r.nll_sq_sum < r.nll_sum**2 / n * (1 - 1e-9):  # Cauchy-Schwarz: sum x² >= (sum x)² / n
        yield "its index row's nll moments are impossible (sum nll² < (sum nll)² / n)"


INDEX_RULES: tuple[Rule, ...] = (
    Rule("index row names the manifest's summary", IndexRowCheck, _index_row_summary, final=True),
    Rule("index row's summary file is in place", IndexRowCheck, _index_row_summary_file, final=True),
    Rule("index row holds the entry's tokens and |V|", IndexRowCheck, _index_row_counts, final=True),
    Rule("index row's grid is that of |V|", IndexRowCheck, _index_row_grid, final=True),
    Rule(
        "index row's counts lie in range and never fall with k", IndexRowCheck, _index_row_within, final=True
    ),
    Rule("index row's counts follow the tie conventions", IndexRowCheck, _index_row_conventions, final=True),
    Rule("index row's totals are possible", IndexRowCheck, _index_row_totals, final=True),
)


# The entry's files first, then its summary, then its index row (the order rules are listed,
# checked and reported in).
RULES: tuple[Rule, ...] = ENTRY_RULES + SUMMARY_RULES + INDEX_RULES


def broken(subject: Any, *, through: str | None = None) -> list[tuple[Rule, str]]:
    """(rule, problem) for each rule of `subject`'s scope it breaks, in table order; a broken final
    rule ends the scope, and so does the rule named `through` (checking only that far)."""
    return judge(RULES, subject, through=through)


def problems(subject: Any, *, through: str | None = None) -> list[str]:
    """Every problem of `subject` (`broken` without the rules)."""
    return [problem for _, problem in broken(subject, through=through)]


def first_problem(subject: Any, *, through: str | None = None) -> str | None:
    """The first problem of `subject`, None when its rules hold."""
    found = broken(subject, through=through)
    return found[0][1] if found else None


def record_problem(record: Any, spec: Any) -> str | None:
    """What is wrong with a shard's checksum record under `spec`, or None."""
    return first_problem(Record(record, spec))
