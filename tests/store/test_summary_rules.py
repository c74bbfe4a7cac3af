"""The summary's rules are rows of the cache's rule table (`rbplab.store.cache.rules.RULES`, scopes
`Summary` and `SummaryDocuments`): each is listed here by name and shown to fire on a summary
damaged in its own way. The summary is written out by hand, number by number, not by the package.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rbplab.store.cache import rules
from rbplab.store.cache.reading import SummaryError, parse_summary
from rbplab.store.cache.summary_rules import Summary, SummaryDocuments

KEY = "a" * 64
VOCAB, TOKENS = 10, 5
# Five tokens (n_greater, n_equal): document 0 holds (0, 1) (2, 1) (0, 2), document 1 (4, 1) (0, 1),
# each document one segment. Ranks: optimistic 1 3 1 5 1, pessimistic 1 3 2 5 1; the third token is
# tied, so every tie convention has its own tables. Bucket 0 holds the first token of each
# document, bucket 1 the others. The thresholds are the grid of |V| = 10.
KS = [1, 2, 3, 4, 5, 6, 7]
FLOATS = {"pair_nll", "doc_nll", "doc_p", "hits_expected"}
# (tie: 0 pessimistic, 1 optimistic), k -> (run length, how many runs) pooled over documents
RUNS = {
    (0, 1): [(1, 2)],
    (0, 2): [(1, 3)],
    **{(0, k): [(1, 1), (3, 1)] for k in (3, 4)},
    **{(0, k): [(2, 1), (3, 1)] for k in (5, 6, 7)},
    **{(1, k): [(1, 3)] for k in (1, 2)},
    **{(1, k): [(1, 1), (3, 1)] for k in (3, 4)},
    **{(1, k): [(2, 1), (3, 1)] for k in (5, 6, 7)},
}
# ... and per document (length, count, document), kept at k = 1, 2 and 5 only
DOC_RUNS = {
    (0, 1): [(1, 1, 0), (1, 1, 1)],
    (0, 2): [(1, 2, 0), (1, 1, 1)],
    (0, 5): [(3, 1, 0), (2, 1, 1)],
    (1, 1): [(1, 2, 0), (1, 1, 1)],
    (1, 2): [(1, 2, 0), (1, 1, 1)],
    (1, 5): [(3, 1, 0), (2, 1, 1)],
}


def _runs(prefix: str, runs: dict) -> dict[str, list]:
    rows = [(tie, k, *row) for (tie, k), part in runs.items() for row in part]
    fields = ["tie", "k", "length", "count", "doc"][: len(rows[0])]
    return {f"{prefix}_{name}": [row[i] for row in rows] for i, name in enumerate(fields)}


GOOD = {
    "ks": KS,
    "pair_greater": [0, 0, 2, 4],
    "pair_equal": [1, 2, 1, 1],
    "pair_count": [2, 1, 1, 1],
    "pair_nll": [0.5, 0.7, 1.9, 3.1],
    "doc_tokens": [3, 2],
    "doc_nll": [2.9, 3.3],
    "doc_p": [1.8, 1.1],
    "seg_doc": [0, 1],
    "seg_start": [0, 0],
    "seg_length": [3, 2],
    "bucket_tokens": [2, 3],
    # hit tables: a row per bucket (document), a column per k, flattened row by row
    "bucket_hits_pessimistic": [1, 1, 1, 1, 2, 2, 2] + [1, 2, 3, 3, 3, 3, 3],
    "bucket_hits_optimistic": [1, 1, 1, 1, 2, 2, 2] + [2, 2, 3, 3, 3, 3, 3],
    **_runs("run", RUNS),
    "hits_pessimistic": [1, 2, 3, 3, 3, 3, 3] + [1, 1, 1, 1, 2, 2, 2],
    "hits_optimistic": [2, 2, 3, 3, 3, 3, 3] + [1, 1, 1, 1, 2, 2, 2],
    "hits_expected": [1.5, 2, 3, 3, 3, 3, 3] + [1, 1, 1, 1, 2, 2, 2],
    **_runs("doc_run", DOC_RUNS),
}
META = {
    b"rbplab.entry_key": KEY.encode(),
    b"rbplab.summary_version": b"1",
    b"rbplab.vocab_size": b"10",
    b"rbplab.n_tokens": b"5",
    b"rbplab.nll_sq_sum": (25.5).hex().encode(),
}


@dataclass
class Parts:
    """A summary file as columns (each a list column of one row) and schema metadata."""

    columns: dict[str, list] = field(default_factory=lambda: copy.deepcopy(GOOD))
    meta: dict[bytes, bytes] = field(default_factory=lambda: dict(META))
    rows: int = 1
    plain: set[str] = field(default_factory=set)  # stored as numbers, not as lists

    def table(self) -> pa.Table:
        def array(name: str, values: list) -> pa.Array:
            kind = pa.float64() if name in FLOATS else pa.int64()
            if name in self.plain:
                return pa.array(values[:1] * self.rows, type=kind)
            return pa.array([values] * self.rows, type=pa.list_(kind))

        table = pa.table({name: array(name, values) for name, values in self.columns.items()})
        return table.replace_schema_metadata(self.meta)

    def data(self) -> bytes:
        sink = io.BytesIO()
        pq.write_table(self.table(), sink)
        return sink.getvalue()


def _meta(name: str, value: bytes) -> Callable[[Parts], None]:
    return lambda p: p.meta.update({b"rbplab." + name.encode(): value})


def _drop(name: str) -> Callable[[Parts], None]:
    return lambda p: p.columns.pop(name)


def _plain(name: str) -> Callable[[Parts], None]:
    return lambda p: p.plain.add(name)


def _set(name: str, values: list) -> Callable[[Parts], None]:
    return lambda p: p.columns.update({name: values})


def _shorten(name: str) -> Callable[[Parts], None]:
    return lambda p: p.columns.update({name: p.columns[name][:-1]})


def _set_at(name: str, index: int, value) -> Callable[[Parts], None]:
    return lambda p: p.columns[name].__setitem__(index, value)


def _add_run(prefix: str, *row: int) -> Callable[[Parts], None]:
    def damage(p: Parts) -> None:
        for name, value in zip(("tie", "k", "length", "count", "doc"), row, strict=False):
            p.columns[f"{prefix}_{name}"].append(value)

    return damage


def _run_count(prefix: str, tie: int, k: int, length: int, count: int) -> Callable[[Parts], None]:
    """The count of the first run of `length` at (tie, k) set to `count`."""

    def damage(p: Parts) -> None:
        c = p.columns
        rows = zip(c[f"{prefix}_tie"], c[f"{prefix}_k"], c[f"{prefix}_length"], strict=True)
        c[f"{prefix}_count"][list(rows).index((tie, k, length))] = count

    return damage


def _rows(n: int) -> Callable[[Parts], None]:
    return lambda p: setattr(p, "rows", n)


# (scope, rule) -> (a damage that breaks that rule first, the message a user sees), in table order
DAMAGES = {
    ("Summary", "summary names this entry"): (
        _meta("entry_key", b"b" * 64),
        "the summary was written for another entry",
    ),
    ("Summary", "summary version is this one"): (
        _meta("summary_version", b"2"),
        "the summary's version is not this one",
    ),
    ("Summary", "summary |V| is the entry's"): (_meta("vocab_size", b"11"), "the summary's |V| is not 10"),
    ("Summary", "summary holds the entry's tokens"): (
        _meta("n_tokens", b"6"),
        "the summary does not hold 5 tokens",
    ),
    ("Summary", "summary is one row"): (_rows(2), "the summary must be one row"),
    ("Summary", "nll moment is readable"): (
        _meta("nll_sq_sum", b"25,5"),
        "the summary's nll moment is unreadable",
    ),
    ("Summary", "ks is there"): (_drop("ks"), "the summary lacks ks"),
    ("Summary", "ks is the grid of |V|"): (
        _set("ks", [1, 2, 3, 4, 5, 6, 8]),
        "the summary's thresholds are not the grid of its |V|",
    ),
    ("Summary", "rank-pair columns are there"): (
        _plain("pair_count"),
        "the summary's pair_count is not a list",
    ),
    ("Summary", "rank-pair columns are of one length"): (_shorten("pair_nll"), "pair columns differ"),
    ("Summary", "rank pairs are in range"): (_set_at("pair_equal", 0, 0), "bad pair values"),
    ("Summary", "no rank beyond |V|"): (_set_at("pair_greater", 3, 10), "a pair's rank exceeds |V|"),
    ("Summary", "pair counts sum to the tokens"): (
        _set_at("pair_count", 0, 3),
        "the pair counts do not sum to the token count",
    ),
    ("Summary", "document columns are there"): (_drop("doc_p"), "the summary lacks doc_p"),
    ("Summary", "document columns are of one length"): (
        _set("doc_nll", [2.9, 3.3, 0.1]),
        "document columns differ in length",
    ),
    ("Summary", "document tokens sum to the tokens"): (
        _set("doc_tokens", [3, 3]),
        "bad document token counts",
    ),
    ("Summary", "segment columns are there"): (_drop("seg_length"), "the summary lacks seg_length"),
    ("Summary", "segment columns are of one length"): (
        _shorten("seg_start"),
        "segment columns differ in length",
    ),
    ("Summary", "segments have a start and a length"): (_set("seg_start", [0, -1]), "bad segments"),
    ("Summary", "segments name known documents"): (
        _set("seg_doc", [0, 2]),
        "a segment's document is unknown",
    ),
    ("Summary", "segments hold each document's tokens"): (
        _set("seg_length", [2, 3]),
        "the segments do not hold each document's tokens",
    ),
    ("Summary", "bucket_tokens is there"): (_drop("bucket_tokens"), "the summary lacks bucket_tokens"),
    ("Summary", "bucket tokens sum to the tokens"): (_set("bucket_tokens", [2, 4]), "bad bucket counts"),
    ("Summary", "hit tables are lists"): (
        _plain("bucket_hits_pessimistic"),
        "the summary's bucket_hits_pessimistic is not a list",
    ),
    ("Summary", "hit tables have a row per bucket and a column per k"): (
        _shorten("bucket_hits_optimistic"),
        "the summary's bucket_hits_optimistic has the wrong shape",
    ),
    ("Summary", "hits lie within their bucket's tokens"): (  # bucket 0 holds 2 tokens, not 3 hits
        _set("bucket_hits_optimistic", [2, 2, 2, 2, 3, 3, 3] + [1, 1, 2, 2, 2, 2, 2]),
        "bucket_hits_optimistic out of range",
    ),
    ("Summary", "hits never fall as k grows"): (  # the totals still hold
        _set("bucket_hits_optimistic", [1, 2, 1, 1, 2, 2, 2] + [2, 1, 3, 3, 3, 3, 3]),
        "bucket_hits_optimistic falls as k grows",
    ),
    ("Summary", "the optimistic hit table is there"): (
        _drop("bucket_hits_optimistic"),
        "the summary lacks bucket_hits_optimistic",
    ),
    ("Summary", "hit tables follow the tie conventions"): (  # a token is tied
        _drop("bucket_hits_pessimistic"),
        "the summary's tie conventions do not match",
    ),
    ("Summary", "hits sum to the rank pairs' hits"): (
        _set_at("bucket_hits_pessimistic", 7, 2),
        "bucket hits (pessimistic) do not hold the ranks' hits",
    ),
    ("Summary", "hit-run columns are there"): (_drop("run_count"), "the summary lacks run_count"),
    ("Summary", "hit-run columns are of one length"): (_shorten("run_k"), "run columns differ in length"),
    ("Summary", "hit-run lengths and counts are positive"): (  # a run of no hits: the totals hold
        _add_run("run", 1, 1, 0, 1),
        "bad run lengths or counts",
    ),
    ("Summary", "hit runs hold the hits"): (
        _run_count("run", 1, 3, 1, 2),
        "run at k=3 do not hold its hits",
    ),
    ("SummaryDocuments", "hit tables are lists"): (
        _plain("hits_expected"),
        "the summary's hits_expected is not a list",
    ),
    ("SummaryDocuments", "hit tables have a row per document and a column per k"): (
        _shorten("hits_pessimistic"),
        "the summary's hits_pessimistic has the wrong shape",
    ),
    ("SummaryDocuments", "hits lie within their document's tokens"): (  # document 1 holds 2 tokens
        _set("hits_expected", [0.5, 1, 2, 2, 2, 2, 2] + [2, 2, 2, 2, 3, 3, 3]),
        "hits_expected out of range",
    ),
    ("SummaryDocuments", "hits never fall as k grows"): (  # the totals still hold
        _set("hits_expected", [1.5, 3, 2, 3, 3, 3, 3] + [1, 0, 2, 1, 2, 2, 2]),
        "hits_expected falls as k grows",
    ),
    ("SummaryDocuments", "the optimistic hit table is there"): (
        _drop("hits_optimistic"),
        "the summary lacks hits_optimistic",
    ),
    ("SummaryDocuments", "hit tables follow the tie conventions"): (
        _drop("hits_expected"),
        "the summary's tie conventions do not match",
    ),
    ("SummaryDocuments", "hits sum to the rank pairs' hits"): (
        _set_at("hits_expected", 0, 1.0),
        "document hits (expected) do not hold the ranks' hits",
    ),
    ("SummaryDocuments", "hit-run columns are there"): (
        _drop("doc_run_doc"),
        "the summary lacks doc_run_doc",
    ),
    ("SummaryDocuments", "hit-run columns are of one length"): (
        _shorten("doc_run_count"),
        "doc_run columns differ in length",
    ),
    ("SummaryDocuments", "hit-run lengths and counts are positive"): (
        _add_run("doc_run", 1, 1, 0, 1, 0),
        "bad doc_run lengths or counts",
    ),
    ("SummaryDocuments", "hit runs name known documents"): (
        _set_at("doc_run_doc", 0, 5),
        "bad run docs",
    ),
    ("SummaryDocuments", "hit runs hold the hits"): (
        _run_count("doc_run", 1, 1, 1, 1),
        "doc_run at k=1 do not hold its hits",
    ),
}
SCOPES = (Summary, SummaryDocuments)


def _first_broken(parts: Parts) -> tuple[str, str, str] | None:
    """(scope, rule, problem) of the first rule the summary breaks, None if it breaks none."""
    table = parts.table()
    pooled = Summary(table, parts.meta, KEY, VOCAB, TOKENS)
    for subject in (pooled, SummaryDocuments(table, pooled)):
        found = rules.broken(subject)
        if found:
            rule, problem = found[0]
            return type(subject).__name__, rule.name, problem
    return None


def _read(data: bytes) -> None:
    parse_summary(data, KEY, VOCAB, TOKENS).load_documents()


def test_the_summary_rules_are_these():
    listed = [(rule.scope.__name__, rule.name) for rule in rules.RULES if rule.scope in SCOPES]
    assert listed == list(DAMAGES)
    assert all(rule.final for rule in rules.RULES if rule.scope in SCOPES)  # refused on the first


def test_the_hand_written_summary_keeps_every_rule():
    assert _first_broken(Parts()) is None
    summary = parse_summary(Parts().data(), KEY, VOCAB, TOKENS)
    hits, runs = summary.load_documents()
    assert summary.nll_sq_sum == 25.5 and summary.has_ties
    assert hits["optimistic"].tolist() == [[2, 2, 3, 3, 3, 3, 3], [1, 1, 1, 1, 2, 2, 2]]
    assert runs[("optimistic", 5)].doc.tolist() == [0, 1]


@pytest.mark.parametrize(("scope", "rule"), list(DAMAGES), ids=[f"{s}: {r}" for s, r in DAMAGES])
def test_each_summary_rule_fires_on_its_own_damage(scope, rule):
    damage, message = DAMAGES[(scope, rule)]
    parts = Parts()
    damage(parts)
    assert _first_broken(parts) == (scope, rule, message)
    with pytest.raises(SummaryError) as refused:
        _read(parts.data())
    assert str(refused.value) == message
