"""The cache index's rules at their edges (`rbplab.store.cache.index_rules`, and the checks of
`rbplab.store.cache.index`): the summary's size a row records, a row's |V| and token count, its
scalar columns, the sha256 in a row file's name, and a merge while another process holds the lock.
Each rule is shown to hold at its limit and to fire one step either side of it."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from rbplab.core.errors import RbplabWarning
from rbplab.core.stats import EntrySummary, TokenStats, summarize
from rbplab.store.cache import index as cache_index
from rbplab.store.cache import rules
from rbplab.store.cache.index_rules import IndexRowCheck
from rbplab.store.cache.reading import CacheCorruptedError

KEY = "ab" * 32
SHA = "0123456789abcdef" * 4
VOCAB = 600
SUMMARY_BYTES = 4096


@pytest.fixture(scope="module")
def summary() -> EntrySummary:
    """The summary of 2,000 tokens in 20 documents, a few of them tied."""
    rng = np.random.default_rng(7)
    n = 2000
    greater = np.minimum(rng.geometric(0.05, n) - 1, VOCAB - 3)
    equal = np.where(rng.random(n) < 0.05, 3, 1)
    stats = TokenStats(
        doc=np.repeat(np.arange(20), n // 20),
        position=np.tile(np.arange(n // 20), 20),
        n_greater=greater.astype(np.int64),
        n_equal=equal.astype(np.int64),
        nll=rng.gamma(2.0, 1.0, n),
        vocab_size=VOCAB,
    )
    return summarize(stats)


@pytest.fixture(scope="module")
def row(summary) -> cache_index.IndexRow:
    return cache_index.row_of(KEY, summary, {"sha256": SHA, "bytes": SUMMARY_BYTES})


def summary_file(tmp_path: Path, size: int) -> os.stat_result:
    path = tmp_path / f"summary-{size}.parquet"
    path.write_bytes(b"\0" * size)
    return os.lstat(path)


def manifest(row: cache_index.IndexRow, **summary) -> dict:
    return {
        "n_tokens": row.n_tokens,
        "summary": {"sha256": row.summary_sha256, "bytes": row.summary_bytes} | summary,
    }


def problem(row, tmp_path, *, listed=None, vocab_size=VOCAB, info=None) -> str | None:
    info = summary_file(tmp_path, row.summary_bytes) if info is None else info
    return rules.first_problem(IndexRowCheck(row, listed or manifest(row), vocab_size, info))


def with_(row: cache_index.IndexRow, **fields) -> cache_index.IndexRow:
    return dataclasses.replace(row, **fields)


def test_the_row_as_derived_keeps_every_rule(row, tmp_path):
    assert problem(row, tmp_path) is None


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_summary_of_another_size_than_the_manifest_records(row, tmp_path, delta):
    listed = manifest(row, bytes=SUMMARY_BYTES + delta)
    assert problem(row, tmp_path, listed=listed) == (
        "its index row gives another size for the summary than the manifest records"
    )


@pytest.mark.parametrize("size", [SUMMARY_BYTES - 1, SUMMARY_BYTES + 1])
def test_a_summary_file_of_another_size_than_the_row_records(row, tmp_path, size):
    assert problem(row, tmp_path, info=summary_file(tmp_path, size)) == (
        "its summary file is not the regular file of the size its index row records"
    )


def test_a_summary_that_is_a_folder_or_missing_is_not_in_place(row, tmp_path):
    folder = tmp_path / "summary-v1.parquet"
    folder.mkdir()
    expected = "its summary file is not the regular file of the size its index row records"
    assert problem(row, tmp_path, info=os.lstat(folder)) == expected
    assert rules.first_problem(IndexRowCheck(row, manifest(row), VOCAB, None)) == expected


@pytest.mark.parametrize(
    ("vocab_size", "n_tokens"),
    [(VOCAB - 1, 0), (VOCAB + 1, 0), (VOCAB, -1), (VOCAB, 1)],
    ids=["|V| one under", "|V| one over", "a token fewer", "a token more"],
)
def test_a_row_of_another_vocabulary_size_or_token_count(row, tmp_path, vocab_size, n_tokens):
    """The entry's |V| (from its spec and manifest) and token count against the row's, one apart."""
    listed = manifest(row) | {"n_tokens": row.n_tokens + n_tokens}
    assert problem(row, tmp_path, listed=listed, vocab_size=vocab_size) == (
        "its index row does not hold the entry's tokens and |V|"
    )


def test_a_row_of_another_vocabulary_size_than_its_thresholds(row, tmp_path):
    """A row whose |V| agrees with the entry but whose grid is another |V|'s."""
    other = cache_index.row_of(
        KEY, summarize(TokenStats.from_ranks(np.arange(1, 101), 100_000)), {"sha256": SHA, "bytes": 1}
    )
    forged = with_(row, ks=other.ks, within={t: w[: len(other.ks)] for t, w in row.within.items()})
    assert problem(forged, tmp_path) == "its index row's thresholds are not the grid of its |V|"


IMPOSSIBLE = "its index row's totals are impossible (nll, nll², probability or document counts)"
MOMENTS = "its index row's nll moments are impossible (sum nll² < (sum nll)² / n)"


def test_the_totals_at_their_limits(row, tmp_path):
    """Every target probability 1 (p_sum = n), every nll equal (sum nll² = (sum nll)² / n) and no
    document are possible; one step past each is not."""
    n = row.n_tokens
    assert problem(with_(row, p_sum=float(n)), tmp_path) is None
    assert problem(with_(row, p_sum=n * (1 + 1e-11)), tmp_path) == IMPOSSIBLE
    equal = with_(row, nll_sum=2.0 * n, nll_sq_sum=4.0 * n)
    assert problem(equal, tmp_path) is None
    assert problem(with_(equal, nll_sq_sum=4.0 * n * (1 - 1e-8)), tmp_path) == MOMENTS
    assert problem(with_(row, n_docs=0), tmp_path) is None
    assert problem(with_(row, n_docs=-1), tmp_path) == IMPOSSIBLE
    assert problem(with_(row, nll_sum=0.0, nll_sq_sum=0.0, p_sum=0.0), tmp_path) is None
    for name in ("nll_sum", "nll_sq_sum", "p_sum"):
        for bad in (-5e-324, float("nan"), float("inf")):  # the least negative float, and no number
            assert problem(with_(row, **{name: bad}), tmp_path) == IMPOSSIBLE, (name, bad)


SCALARS = ("summary_bytes", "vocab_size", "n_tokens", "n_docs", "has_ties", "nll_sum", "nll_sq_sum", "p_sum")


def nudged(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, float):
        return float(np.nextafter(value, np.inf))  # one float apart
    return value + 1


def test_every_scalar_column_is_compared_bit_for_bit(row, summary, tmp_path):
    """A row that differs from the one its summary gives in one scalar column, by the least step
    (one float apart, one count apart), is another row: verify reports it, and a study that reads
    the summary stops. Every column of the schema but the key, the sha and the lists is one."""
    listed = [name for name in cache_index.SCHEMA.names if name not in ("key", "summary_sha256", "ks")]
    assert [n for n in listed if not n.startswith("within_")] == list(SCALARS)
    assert row.same(with_(row)) and row.same(cache_index._decode(cache_index._encode([row]))[0])
    for name in SCALARS:
        assert not row.same(with_(row, **{name: nudged(getattr(row, name))})), name
    for ties, counts in row.within.items():
        other = counts.copy()
        other[-1] = np.nextafter(other[-1], -np.inf)
        assert not row.same(with_(row, within={**row.within, ties: other})), ties
    assert not row.same(with_(row, summary_sha256="f" * 64)) and not row.same(with_(row, key="cd" * 32))

    root = tmp_path / "cache"
    forged = with_(row, nll_sum=nudged(row.nll_sum))
    cache_index.write_row(root, forged)
    assert cache_index.index_problems(root, {KEY: row}) == [
        f"{KEY[:12]}  index row is not the one its summary gives (forged or damaged)"
    ]
    for name in ("nll_sum", "nll_sq_sum", "p_sum", "n_docs", "has_ties"):
        forged = with_(row, **{name: nudged(getattr(row, name))})
        with pytest.raises(CacheCorruptedError, match="its index row is not the one its summary gives"):
            cache_index.IndexedSummary(forged, lambda: summary).full()
    assert cache_index.IndexedSummary(row, lambda: summary).full() is summary


def test_a_row_file_holds_the_row_its_name_gives(row, tmp_path):
    """The key and the first 16 hex digits of the summary's sha256 in a row file's name are those
    of the row it holds; one digit off, the file is refused; a name of 15 or 17 digits is no row
    file at all (never read)."""
    root = tmp_path / "cache"
    cache_index.write_row(root, row)
    folder = cache_index.index_dir(root)
    name = row.file_name
    assert name == f"row-{KEY}-{SHA[:16]}.arrow"
    index = cache_index.CacheIndex(root)
    assert index.problems == [] and [r.same(row) for r in index.rows[KEY]] == [True]
    off_sha = f"row-{KEY}-{SHA[:15]}0.arrow"  # its last digit is "f"
    off_key = f"row-{'ab' * 31}ac-{SHA[:16]}.arrow"
    for wrong in (off_sha, off_key):
        (folder / name).rename(folder / wrong)
        index = cache_index.CacheIndex(root)
        assert index.rows == {} and index.problems == [
            f"index file {wrong} does not hold the row its name gives"
        ], wrong
        (folder / wrong).rename(folder / name)
    for foreign in (f"row-{KEY}-{SHA[:15]}.arrow", f"row-{KEY}-{SHA[:17]}.arrow"):
        (folder / name).rename(folder / foreign)
        index = cache_index.CacheIndex(root)
        assert index.rows == {} and index.problems == [] and index.row_files == [], foreign
        (folder / foreign).rename(folder / name)


def _hold(lock_path: str, held, release) -> None:
    with FileLock(lock_path):
        held.set()
        release.wait(60)


def test_a_merge_while_another_process_holds_the_lock(row, tmp_path):
    """A reader's merge skips while another process holds the index lock (writing and deleting
    nothing: the row files stay and still read), and a rebuild waits for it, saying so."""
    root = tmp_path / "cache"
    cache_index.write_row(root, row)
    folder = cache_index.index_dir(root)
    context = multiprocessing.get_context("fork")
    held, release = context.Event(), context.Event()
    (root / "locks").mkdir(parents=True, exist_ok=True)
    holder = context.Process(target=_hold, args=(str(root / "locks" / "index.lock"), held, release))
    holder.start()
    try:
        assert held.wait(30)
        before = sorted(p.name for p in folder.iterdir())
        assert cache_index.merge(root, cache_index.CacheIndex(root), {}, wait=False) is False
        assert sorted(p.name for p in folder.iterdir()) == before == [row.file_name]
        assert [r.same(row) for r in cache_index.CacheIndex(root).rows[KEY]] == [True]
        threading.Timer(0.5, release.set).start()
        start = time.monotonic()
        with pytest.warns(RbplabWarning, match="waiting for a lock another process holds"):
            assert cache_index.rebuild(root, {KEY: row}) == 1  # waits for the holder, and says so
        assert time.monotonic() - start >= 0.4
    finally:
        release.set()
        holder.join(30)
    assert holder.exitcode == 0
    assert sorted(p.name for p in folder.iterdir()) == [cache_index.MERGED_FILE]
    assert [r.same(row) for r in cache_index.CacheIndex(root).rows[KEY]] == [True]
    assert cache_index.merge(root, cache_index.CacheIndex(root), {}, wait=False) is True
