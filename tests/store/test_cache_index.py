"""The cache index (`rbplab.store.cache.index`): rows derived from verified summaries, written by
whoever completes an entry (several at once included), merged by readers, never trusted over the
entries (a stale or forged row is refused on read or reported by verify), rebuilt by repair."""

from __future__ import annotations

import multiprocessing
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import metrics
from rbplab.cli import app as cli
from rbplab.core.runs import Run
from rbplab.store.cache import index as cache_index
from rbplab.store.cache.admin import index_problems, rebuild_index, remove_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
from rbplab.study import Study, emergence, load_study, size

VOCAB = 5000
TOKENS = 3000


def tokens(i: int) -> pd.DataFrame:
    """Lognormal ranks with a few ties, 30 documents: entry i's tokens."""
    rng = np.random.default_rng(i)
    ranks = np.clip(np.floor(np.exp(rng.normal(2.0 - 0.1 * (i % 6), 1.8, TOKENS))), 1, VOCAB).astype(np.int64)
    equal = np.where((rng.random(TOKENS) < 0.02) & (ranks < VOCAB), 2, 1)
    doc = np.arange(TOKENS) // 100
    return pd.DataFrame(
        {
            "doc_index": doc.astype(np.int32),
            "doc_id": pd.Series(doc).astype(str),
            "position": (np.arange(TOKENS) - doc * 100).astype(np.int32),
            "target_id": rng.integers(0, VOCAB, TOKENS).astype(np.int32),
            "n_greater": (ranks - 1).astype(np.int32),
            "n_equal": equal.astype(np.int32),
            "nll": rng.gamma(2.0, 1.5, TOKENS).astype(np.float32),
        }
    )


def write_entry(root: Path, i: int) -> str:
    entry = CacheEntry(root, {"index_test": i, "vocab": {"size": VOCAB}})
    with entry.lock():
        entry.write_shard(0, tokens(i))
        entry.finalize(
            {
                "vocab_size": VOCAB,
                "model": {"name": f"m-{i % 6}", "n_nonembedding": 1e6 * (1 + i % 6)},
                "corpus": {"name": f"c-{i // 6}"},
            }
        )
    return entry.key


@pytest.fixture
def cache(tmp_path):
    root = tmp_path / "cache"
    keys = [write_entry(root, i) for i in range(12)]
    return root, keys


def from_summaries(root: Path, study: Study) -> Study:
    """The same runs, each read whole from its summary as studies were before the index."""
    runs = []
    for run, summary in zip(study.runs, study_keys(study), strict=True):
        runs.append(Run(run.family, run.model, run.corpus, run.S, CacheEntry.open(summary, root).summary()))
    return Study(runs, ties=study.ties)


def study_keys(study: Study) -> list[str]:
    return [r.stats.row.key for r in study.runs]


def indexed(study: Study) -> bool:
    return all(isinstance(r.stats, cache_index.IndexedSummary) for r in study.runs)


def merged_rows(root: Path) -> dict[str, list[cache_index.IndexRow]]:
    return cache_index.CacheIndex(root).rows


def put_row(root: Path, row: cache_index.IndexRow) -> None:
    """Replace the entry's rows in the merged file by `row` (what someone with write access could)."""
    folder = cache_index.index_dir(root)
    others = [r for key, rows in merged_rows(root).items() if key != row.key for r in rows]
    for name in folder.glob("row-*.arrow"):
        name.unlink()
    (folder / cache_index.MERGED_FILE).write_bytes(cache_index._encode([row, *others]))


def test_a_row_holds_what_the_rank_pairs_give(cache):
    """Each count of a row is the curve's count computed independently from the summary's rank pairs
    (analysis.metrics.RBPCurve), bit for bit, under every tie convention; the totals are CE and
    mean p as metrics computes them from the summary."""
    root, keys = cache
    for key in keys[:3]:
        entry = CacheEntry.open(key, root)
        summary = entry.summary()
        row = cache_index.row_of(key, summary, entry.manifest()["summary"])
        assert row.has_ties
        for ties in ("pessimistic", "optimistic", "expected"):
            curve = metrics.rbp_curve(summary, ties)
            assert np.array_equal(row.within[ties], curve.count_within(row.ks))
        assert row.nll_sum / row.n_tokens == metrics.cross_entropy(summary)
        assert row.p_sum / row.n_tokens == metrics.mean_target_probability(summary)
        assert row.n_docs == 30


def test_completion_writes_a_row_and_a_study_reads_only_rows(cache, monkeypatch):
    root, keys = cache
    folder = cache_index.index_dir(root)
    assert len(list(folder.glob("row-*.arrow"))) == 12  # one per completed entry, none merged yet
    first = load_study(entries=keys, cache_dir=root)
    assert indexed(first)
    assert not list(folder.glob("row-*.arrow")) and (folder / cache_index.MERGED_FILE).is_file()
    # A second open reads no summary at all: a summary read would fail here.
    monkeypatch.setattr(CacheEntry, "_stored_summary", lambda *a, **k: pytest.fail("summary read"))
    study = load_study(entries=keys, cache_dir=root)
    assert indexed(study) and len(merged_rows(root)) == 12
    fit, sweep = size.fit_table(study), size.ksweep(study)
    monkeypatch.undo()
    for ties in ("pessimistic", "optimistic", "expected"):
        a = Study(study.runs, ties=ties)
        b = from_summaries(root, a)
        pd.testing.assert_frame_equal(size.fit_table(a), size.fit_table(b), check_exact=True)
        pd.testing.assert_frame_equal(size.ksweep(a), size.ksweep(b), check_exact=True)
        # 7 and 333 are off the summary grid: read from the rank pairs then
        ks = [1, 7, 10, 333, 1000, VOCAB]
        pd.testing.assert_frame_equal(a.points(ks), b.points(ks), check_exact=True)
        pd.testing.assert_frame_equal(a.run_table(), b.run_table(), check_exact=True)
    pd.testing.assert_frame_equal(fit, size.fit_table(from_summaries(root, study)), check_exact=True)
    assert len(sweep)
    # Analyses that need the summaries' tables read them through the row's entry: the same numbers.
    b = from_summaries(root, study)
    pd.testing.assert_frame_equal(
        size.bootstrap(study, [1, 10], n_boot=20), size.bootstrap(b, [1, 10], n_boot=20), check_exact=True
    )
    pd.testing.assert_frame_equal(
        emergence.table(study, [1, 10], [1, 2, 4], n_boot=20),
        emergence.table(b, [1, 10], [1, 2, 4], n_boot=20),
        check_exact=True,
    )


def _complete(root: str, first: int, count: int, start) -> None:
    start.wait()
    for i in range(first, first + count):
        write_entry(Path(root), i)


def _read_repeatedly(root: str, start, done) -> None:
    start.wait()
    while not done.is_set():
        index = cache_index.CacheIndex(Path(root))
        cache_index.merge(Path(root), index, {}, wait=False)


def test_concurrent_completion_loses_no_row(tmp_path):
    """Four workers completing entries at once while a reader merges the index over and over:
    every entry ends with its one row, and a study reads them all from the index."""
    root = tmp_path / "cache"
    root.mkdir()
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(5), context.Event()
    workers = [context.Process(target=_complete, args=(str(root), 100 + 4 * w, 4, start)) for w in range(4)]
    reader = context.Process(target=_read_repeatedly, args=(str(root), start, done))
    for process in [*workers, reader]:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    done.set()
    reader.join(60)
    assert reader.exitcode == 0
    keys = [CacheEntry(root, {"index_test": i, "vocab": {"size": VOCAB}}).key for i in range(100, 116)]
    rows = merged_rows(root)
    assert sorted(rows) == sorted(keys) and all(len(found) == 1 for found in rows.values())
    assert not cache_index.index_temporaries(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no row refused
        study = load_study(entries=keys, cache_dir=root)
    assert indexed(study)
    assert index_problems(root) == []


def test_a_stale_row_is_never_used(cache):
    """A row derived from another summary than the manifest records (the summary was derived again
    since) is refused on read, the summary read instead, and the row derived again."""
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    entry = CacheEntry.open(keys[0], root)
    true = merged_rows(root)[keys[0]][0]
    other = cache_index.row_of(
        keys[0], CacheEntry.open(keys[1], root).summary(), {"sha256": "f" * 64, "bytes": 1}
    )
    put_row(root, other)
    with pytest.warns(UserWarning, match="index row is stale"):
        study = load_study(entries=keys, cache_dir=root)
    assert study.runs[0].stats.row.same(true)
    assert merged_rows(root)[keys[0]][0].same(true)  # merged again from the summary
    assert entry.manifest()["summary"]["sha256"] == true.summary_sha256
    put_row(root, other)
    assert any("stale index row" in p for p in index_problems(root))


def test_a_forged_row_breaking_a_relation_is_refused_on_read(cache):
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    true = merged_rows(root)[keys[2]][0]
    within = dict(true.within)
    within["pessimistic"] = within["pessimistic"][::-1].copy()  # falls with k
    put_row(root, cache_index.IndexRow(**{**true.__dict__, "within": within}))
    with pytest.warns(UserWarning, match="counts fall as k grows; reading its summary"):
        study = load_study(entries=keys, cache_dir=root)
    assert study.runs[2].stats.row.same(true)


def test_a_consistent_forged_row_is_caught_by_verify_and_by_the_summary(cache):
    """A row forged within every relation (a larger RBP at k >= 10, its sha kept) reads as its
    numbers until the summary is looked at: verify reports it, an analysis that reads the run's
    summary stops in one line, and repair rebuilds the index."""
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    true = merged_rows(root)[keys[3]][0]
    within = {
        t: np.where(true.ks >= 10, np.maximum(w, np.minimum(w + 50, true.n_tokens)), w)
        for t, w in true.within.items()
    }
    forged = cache_index.IndexRow(**{**true.__dict__, "within": within})
    put_row(root, forged)
    assert index_problems(root) == [
        f"{keys[3][:12]}  index row is not the one its summary gives (forged or damaged)"
    ]
    study = load_study(entries=keys, cache_dir=root)
    with pytest.raises(CacheCorruptedError, match="index row is not the one its summary gives"):
        study.runs[3].stats.doc_hits([1], "pessimistic")
    status = cli.main(["cache", "--cache-dir", str(root), "verify", "--no-derive"])
    assert status == 1
    assert rebuild_index(root) == 12
    assert index_problems(root) == []
    assert load_study(entries=keys, cache_dir=root).runs[3].stats.row.same(true)


def test_repair_rebuilds_a_damaged_or_missing_index(cache, capsys):
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    merged = cache_index.index_dir(root) / cache_index.MERGED_FILE
    merged.write_bytes(b"PAR1 not a parquet file")
    problems = index_problems(root)
    assert len(problems) == 1 and problems[0].startswith("index file index.parquet is refused")
    with pytest.warns(UserWarning, match="index file index.parquet is refused"):
        study = load_study(entries=keys, cache_dir=root)  # reads the summaries, writes the index again
    assert indexed(study) and index_problems(root) == []
    merged.unlink()
    status = cli.main(["cache", "--cache-dir", str(root), "repair", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0 and "index    12 row(s) derived again" in out
    assert sorted(merged_rows(root)) == sorted(keys) and index_problems(root) == []


def test_an_incomplete_entry_is_never_read_through_its_row(cache):
    """A row outlives its entry's manifest (removed, or the run killed after its row): the entry
    reads as incomplete, never as its row; verify names the row."""
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    (CacheEntry.open(keys[5], root).path / "manifest.json").unlink()
    with pytest.raises(CacheError, match="is not complete"):
        load_study(entries=keys, cache_dir=root)
    assert f"{keys[5][:12]}  index row of an entry that is not complete in this cache" in index_problems(root)


def test_a_killed_row_write_leaves_no_row(cache, monkeypatch):
    """A row write that dies before its rename leaves a temporary only: no row reads as complete."""
    root, keys = cache
    folder = cache_index.index_dir(root)
    for name in folder.glob("row-*.arrow"):
        name.unlink()
    (folder / f".row-{keys[0]}-0123456789abcdef.arrow.tmp-1-deadbeef").write_bytes(b"half a row")
    assert cache_index.CacheIndex(root).rows == {}
    assert indexed(load_study(entries=keys, cache_dir=root))


def test_removing_an_entry_removes_its_row(cache):
    root, keys = cache
    load_study(entries=keys, cache_dir=root)
    assert remove_entries(keys[4][:12], root=root) == [keys[4]]
    assert keys[4] not in merged_rows(root) and len(merged_rows(root)) == 11
    assert index_problems(root) == []


def test_an_index_folder_that_is_a_link_is_never_read_or_written_through(cache, tmp_path):
    root, keys = cache
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = cache_index.index_dir(root)
    for item in folder.iterdir():
        item.unlink()
    folder.rmdir()
    folder.symlink_to(outside)
    with pytest.warns(UserWarning, match="the index folder is a symbolic link"):
        study = load_study(entries=keys, cache_dir=root)
    assert list(outside.iterdir()) == [] and folder.is_symlink()
    ref = from_summaries(root, Study(study.runs))
    pd.testing.assert_frame_equal(size.fit_table(study), size.fit_table(ref), check_exact=True)


def test_an_indexed_curve_computes_its_whole_curve_once(cache, monkeypatch):
    """A study's curve read through the index answers its grid from the row and any other k from
    the run's whole curve, computed on the first such query and kept: never once per query."""
    root, keys = cache
    study = load_study(entries=keys[:1], cache_dir=root)
    (curve,) = study.curves.values()
    assert isinstance(curve, metrics.IndexedRBPCurve)
    built = []
    real = metrics._rbp_curve
    monkeypatch.setattr(metrics, "_rbp_curve", lambda data, ties: built.append(ties) or real(data, ties))
    assert curve.rbp(10) == curve.rbp(10.5) and built == []  # on the summary's grid: the row
    reference = metrics.rbp_curve(CacheEntry.open(keys[0], root).summary(), study.ties)
    built.clear()
    for k in (7, 333, [7, 333, 4999]):
        np.testing.assert_array_equal(curve.rbp(k), reference.rbp(k))
    np.testing.assert_array_equal(curve.histogram, reference.histogram)
    assert built == [study.ties]
