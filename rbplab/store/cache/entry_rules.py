"""The rules of a cache entry's files (`ENTRY_RULES`), each derived again rather than trusted:
spec.json (`SpecFile`), the shards' checksum records (`Record`), the manifest (`Manifest`), a
shard's bytes (`Shard`), a shard file as listed (`ShardFile`) and a shard's two records
(`ShardRecords`). Reading the files is the entry's job (`rbplab.store.cache.reading`); the rules
only judge what was read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rbplab.core.documents import file_kind
from rbplab.store.cache.layout import (
    ENTRY_KEY_META,
    MIRRORED,
    MISSING,
    RANK_FORMAT_VERSION,
    SHA256_RE,
    SHARD_INDEX_META,
    SHARD_RE,
    cache_key,
    canonical_json,
    count_at,
    lookup,
    max_shard_bytes,
    max_shard_rows,
    sha256_hex,
    shard_name,
)
from rbplab.store.cache.rule import Rule, judge


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
        problem = record_problem(record, m.spec)
        if problem is not None:
            yield f"shard record {label} {problem}"


def record_problem(record: Any, spec: Any) -> str | None:
    """What is wrong with a shard's checksum record under `spec` (the first broken `Record` rule),
    or None."""
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
