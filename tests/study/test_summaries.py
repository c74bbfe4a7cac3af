"""Studies from entry summaries: the same numbers as the per-token analysis, stored and refused like shards.

The reference is the per-token code as it was before summaries (`helpers.token_reference`), run on
the tokens the cache holds; the summary side reads the summary file back from disk.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.token_reference import bootstrap as ref_bootstrap
from helpers.token_reference import emergence as ref_emergence
from helpers.token_reference import metrics as ref_metrics
from helpers.untrusted import read_only, snapshot

from rbplab.analysis import emergence, metrics
from rbplab.core import Run, TokenStats
from rbplab.core.stats import DOC_RUN_KS, summarize, summary_ks
from rbplab.grid import Grid
from rbplab.store.cache.admin import list_entries
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import SUMMARY_FILE
from rbplab.store.cache.reading import SummaryError, parse_summary, summary_bytes
from rbplab.study import Study, distribution, load_study, size
from rbplab.study import emergence as study_emergence
from rbplab.study.lookup import MissingRunsError, resolve_entries

MICRO = ["micro-1-25K", "micro-3-200K", "micro-5-1.2M"]
SETTINGS = {"max_tokens": 6000, "shard_tokens": 2048, "context_length": 256}
TIES = ("pessimistic", "optimistic", "expected")
KS = [1, 2, 10, 50, 100, 1000]
NS = [1, 2, 4, 8, 16]


def _tied_stats(seed: int = 0) -> TokenStats:
    """Ranks with ties on ~15 % of tokens and gaps in the scored positions, over 40 documents."""
    rng = np.random.default_rng(seed)
    n, vocab = 30_000, 2_000
    doc = np.sort(rng.integers(0, 40, n))
    position = np.concatenate([np.arange((doc == d).sum()) for d in range(40)])
    position = position + (position > 50) * 3  # a gap after position 50 of every document
    greater = np.minimum(np.floor(np.exp(rng.normal(1.0, 2.0, n))).astype(np.int64), vocab - 5)
    equal = np.where(rng.random(n) < 0.15, rng.integers(2, 5, n), 1)
    nll = rng.gamma(2.0, 1.5, n)
    return TokenStats(doc, position, greater, equal, nll, vocab)


@pytest.fixture(scope="module")
def micro_cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("summaries") / "cache"
    load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root, extract=True)
    return root


def _entries(root: Path) -> list[CacheEntry]:
    return [CacheEntry.open(key, root) for key in list_entries(root)["key"]]


def _stored(stats: TokenStats):
    key = "f" * 64
    data = summary_bytes(summarize(stats), key)
    return parse_summary(data, key, stats.vocab_size, len(stats)), data


def _assert_frames(new: pd.DataFrame, old: pd.DataFrame) -> None:
    assert list(new.columns) == list(old.columns)
    pd.testing.assert_frame_equal(new.reset_index(drop=True), old.reset_index(drop=True), rtol=1e-12, atol=0)


def _token_sets(micro_cache: Path) -> list[TokenStats]:
    return [e.read_stats() for e in _entries(micro_cache)] + [_tied_stats()]


@pytest.mark.parametrize("ties", TIES)
def test_rank_distribution_and_documents_equal_the_token_reference(micro_cache, ties) -> None:
    for stats in _token_sets(micro_cache):
        summary, _ = _stored(stats)
        np.testing.assert_allclose(
            metrics.rank_histogram(summary, ties),
            ref_metrics.rank_histogram(stats, ties),
            rtol=1e-12,
            atol=1e-9,
        )
        assert metrics.cross_entropy(summary) == pytest.approx(ref_metrics.cross_entropy(stats), rel=1e-12)
        assert metrics.mean_target_probability(summary) == pytest.approx(
            ref_metrics.mean_target_probability(stats), rel=1e-12
        )
        ks = summary_ks(stats.vocab_size)
        new, old = metrics.doc_stats(summary, ks, ties), ref_bootstrap.doc_stats(stats, ks, ties)
        for field in ("hits", "n_tokens", "nll_sum", "p_sum"):
            np.testing.assert_allclose(getattr(new, field), getattr(old, field), rtol=1e-12, atol=1e-9)
        _assert_frames(
            metrics.bootstrap_ci(summary, [1, 10, 100], ties, n_boot=40, seed=3),
            ref_bootstrap.bootstrap_ci(stats, [1, 10, 100], ties, n_boot=40, seed=3),
        )


@pytest.mark.parametrize("ties", TIES)
def test_emergence_from_summaries_equals_the_token_reference(micro_cache, ties) -> None:
    for stats in _token_sets(micro_cache):
        summary, _ = _stored(stats)
        if ties == "expected":  # the token fallback: attach the tokens as the cache would
            summary = type(summary)(**{**summary.__dict__, "load_tokens": lambda st=stats: st})
        ks = [k for k in KS if k < stats.vocab_size]
        for n_boot in (0, 30):
            new = emergence.sequence_table([Run("f", "m", "c", 1e6, summary)], NS, ks, ties, n_boot=n_boot)
            old = ref_emergence.sequence_table([Run("f", "m", "c", 1e6, stats)], NS, ks, ties, n_boot=n_boot)
            _assert_frames(new, old)


def test_study_from_the_cache_holds_no_tokens_and_gives_the_in_memory_tables(micro_cache) -> None:
    cached = load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=micro_cache)
    assert all(not isinstance(r.stats, TokenStats) for r in cached.runs)
    in_memory = Study([Run(r.family, r.model, r.corpus, r.S, r.token_stats()) for r in cached.runs])
    for study in (cached, in_memory):
        assert len(study.stats("micro-1-25K", "humaneval")) == 6000  # tokens on request
    tables = {
        "points": lambda s: s.points([1, 10, 100], n_boot=30),
        "fits": lambda s: size.fits(s, [1, 10, 50, 100]),
        "bands": lambda s: size.bands(s, [1, 10]),
        "fit_table": lambda s: size.fit_table(s, [1, 10, 100]),
        "ksweep": lambda s: size.ksweep(s, n_boot=10),
        "bootstrap": lambda s: size.bootstrap(s, [1, 10, 100], n_boot=40),
        "extrapolation": lambda s: size.extrapolation(s, [1, 10, 100]),
        "emergence": lambda s: study_emergence.table(s, [1, 10, 100], [1, 2, 4, 8, 16, 32], n_boot=20),
        "emergence_fits": lambda s: study_emergence.fits(s),
        "lognormal": lambda s: distribution.lognormal(s),
        "rank_pmf": lambda s: distribution.rank_pmf(s, "humaneval"),
        "ce_comparison": lambda s: distribution.ce_comparison(s),
        "run_table": lambda s: s.run_table(),
    }
    for name, table in tables.items():
        try:
            _assert_frames(table(cached), table(in_memory))
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None


def test_summary_is_written_with_the_entry_and_recorded_in_its_manifest(micro_cache) -> None:
    for entry in _entries(micro_cache):
        record = json.loads((entry.path / (SUMMARY_FILE + ".sha256")).read_text())
        assert entry.manifest()["summary"] == record
        assert record["bytes"] == (entry.path / SUMMARY_FILE).stat().st_size
        assert entry.problems() == []


def test_missing_runs_are_refused_in_one_line_unless_extract(micro_cache, tmp_path) -> None:
    with pytest.raises(MissingRunsError, match=r"1 run\(s\) are not in the cache.*micro-2-85K on humaneval"):
        load_study(
            Grid.from_names("micro", "humaneval", SETTINGS, models=["micro-1-25K", "micro-2-85K"]),
            cache_dir=micro_cache,
        )
    assert len(list_entries(micro_cache)) == len(MICRO)  # nothing was computed


def _copy_cache(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_old_entry_gets_its_summary_on_first_read_and_keeps_its_key(micro_cache, tmp_path) -> None:
    root = _copy_cache(micro_cache, tmp_path / "cache")
    keys = set(list_entries(root)["key"])
    for entry in _entries(root):  # as written before summaries existed
        (entry.path / SUMMARY_FILE).unlink()
        (entry.path / (SUMMARY_FILE + ".sha256")).unlink()
        manifest = json.loads(entry.manifest_path.read_text())
        del manifest["summary"]
        entry.manifest_path.write_text(json.dumps(manifest))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # deriving a missing summary is silent
        study = load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root)
    assert set(list_entries(root)["key"]) == keys
    for entry in _entries(root):
        assert (entry.path / SUMMARY_FILE).is_file() and entry.problems() == []
    reference = load_study(
        Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=micro_cache
    )
    _assert_frames(size.fit_table(study, [1, 10]), size.fit_table(reference, [1, 10]))


def test_read_only_cache_derives_summaries_in_memory(micro_cache, tmp_path) -> None:
    root = _copy_cache(micro_cache, tmp_path / "cache")
    for entry in _entries(root):
        (entry.path / SUMMARY_FILE).unlink()
    before = snapshot(root)
    with read_only(root), pytest.warns(UserWarning, match="summary derived in memory, not stored"):
        study = load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root)
    assert snapshot(root) == before
    reference = load_study(
        Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=micro_cache
    )
    _assert_frames(study.points([1, 10, 100]), reference.points([1, 10, 100]))


def _rewrite(entry: CacheEntry, data: bytes, record_manifest: bool) -> None:
    from rbplab.store.cache.layout import sha256_hex

    (entry.path / SUMMARY_FILE).write_bytes(data)
    record = {"sha256": sha256_hex(data), "bytes": len(data), "version": 1}
    (entry.path / (SUMMARY_FILE + ".sha256")).write_text(json.dumps(record))
    manifest = json.loads(entry.manifest_path.read_text())
    if record_manifest:
        manifest["summary"] = record
    else:
        manifest.pop("summary", None)
    entry.manifest_path.write_text(json.dumps(manifest))


def _tampered_cases(a: CacheEntry, b: CacheEntry):
    """(description, bytes, record in manifest too, expected reason)."""
    stats = a.read_stats()
    good = summary_bytes(summarize(stats), a.key)
    foreign = (b.path / SUMMARY_FILE).read_bytes()
    wrong = summarize(stats)
    wrong.pairs.count[0] += 1  # one token too many, checksums made to match
    return [
        ("garbage", b"not parquet at all", True, "not a readable parquet file"),
        ("another entry's summary", foreign, True, "written for another entry"),
        (
            "counts changed, checksums fixed",
            summary_bytes(wrong, a.key),
            False,
            "do not sum to the token count",
        ),
        ("valid bytes, other record", good, None, "failed its checksum"),
    ]


def test_damaged_foreign_or_tampered_summaries_are_refused_and_derived_again(micro_cache, tmp_path) -> None:
    """A summary whose bytes are not those its manifest records is refused where it is read: at the
    open, when the index row no longer matches the manifest, else when an analysis first needs
    more than the row (the rank pairs); derived again from the shards then, and stored."""
    root = _copy_cache(micro_cache, tmp_path / "cache")
    a, b = _entries(root)[:2]
    truth = size.fit_table(
        load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=micro_cache),
        [1, 10],
    )
    for what, data, in_manifest, reason in _tampered_cases(a, b):
        if in_manifest is None:  # right bytes, but the record names other bytes
            (a.path / SUMMARY_FILE).write_bytes(data)
            (a.path / (SUMMARY_FILE + ".sha256")).write_text(json.dumps({"sha256": "0" * 64}))
        else:
            _rewrite(a, data, in_manifest)
        problems = a.problems()
        assert len(problems) == 1 and reason in problems[0], (what, problems)
        with pytest.warns(UserWarning, match=reason):
            study = load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root)
            for run in study.runs:
                assert run.stats.pairs.count.sum() == run.n_tokens  # each summary read whole
        _assert_frames(size.fit_table(study, [1, 10]), truth)
        assert a.problems() == [], what  # derived again and stored


def test_summary_that_is_a_fifo_or_a_link_out_of_the_entry_is_refused_without_blocking(micro_cache, tmp_path):
    root = _copy_cache(micro_cache, tmp_path / "cache")
    entry = _entries(root)[0]
    outside = tmp_path / "elsewhere.parquet"
    shutil.copy(entry.path / SUMMARY_FILE, outside)
    for make in (lambda p: os.mkfifo(p), lambda p: p.symlink_to(outside)):
        (entry.path / SUMMARY_FILE).unlink()
        make(entry.path / SUMMARY_FILE)
        problems = entry.problems()  # named by the store's odd-file check or by the summary's read
        assert len(problems) == 1 and "summary" in problems[0] and "not a regular file" in problems[0]
        assert entry.summary() is not None  # refused, then derived again (the odd item replaced)


def test_parse_summary_checks_what_it_derives() -> None:
    stats = _tied_stats(1)
    summary, data = _stored(stats)
    assert summary.has_ties and summary.doc_run_ks.tolist() == [k for k in DOC_RUN_KS if k < stats.vocab_size]
    with pytest.raises(SummaryError, match="does not hold 29999 tokens"):
        parse_summary(data, "f" * 64, stats.vocab_size, len(stats) - 1)
    with pytest.raises(SummaryError, match=r"\|V\| is not"):
        parse_summary(data, "f" * 64, stats.vocab_size + 1, len(stats))
    with pytest.raises(KeyError, match="k = 3 is not one of them"):
        summary.hit_runs("pessimistic", 3, per_document=True)
    n_bytes = len(summary_bytes(summarize(stats), "f" * 64))
    assert n_bytes < 300_000  # 30,000 tokens, 40 documents: a few hundred KB at most


def test_entry_truncated_with_its_summary_is_refused_by_a_study(micro_cache, tmp_path) -> None:
    """With no summary to vouch for its token count, the study derives the count from the corpus."""
    root = _copy_cache(micro_cache, tmp_path / "cache")
    entry = _entries(root)[0]
    manifest = json.loads(entry.manifest_path.read_text())
    last = manifest["shards"].pop()
    manifest["n_tokens"] -= last["rows"]
    del manifest["summary"]
    entry.manifest_path.write_text(json.dumps(manifest))
    for name in (last["file"], last["file"] + ".sha256", SUMMARY_FILE, SUMMARY_FILE + ".sha256"):
        (entry.path / name).unlink()
    with pytest.raises(MissingRunsError, match="shards are missing or extra.*or load with extract=True"):
        load_study(Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root)
    assert not entry.is_complete()  # marked incomplete: extraction resumes it
    study = load_study(
        Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO), cache_dir=root, extract=True
    )
    assert all(r.n_tokens == 6000 for r in study.runs) and entry.problems() == []


def test_damaged_entry_named_by_its_plan_record_is_refused_or_recomputed(micro_cache, tmp_path) -> None:
    """An entry whose plan record holds (so no model is planned for it) but whose manifest no longer
    adds up: named with its damage, or, with extract=True, planned then and recomputed."""
    grid = Grid.from_names("micro", "humaneval", SETTINGS, models=MICRO)

    def damaged_copy(name: str) -> tuple[Path, CacheEntry]:
        root = _copy_cache(micro_cache, tmp_path / name)
        resolved = resolve_entries(grid, root)
        assert [r.plan for r in resolved] == [None] * len(MICRO)  # every run found through its record
        entry = resolved[1].entry
        manifest = json.loads(entry.manifest_path.read_text())
        entry.manifest_path.write_text(json.dumps({**manifest, "n_tokens": manifest["n_tokens"] + 1}))
        return root, entry

    root, _ = damaged_copy("refused")
    with pytest.raises(MissingRunsError, match="n_tokens 6001 is not the sum.*or load with extract=True"):
        load_study(grid, cache_dir=root)
    root, entry = damaged_copy("recomputed")
    with pytest.warns(UserWarning, match="recomputing the damaged shards now"):
        study = load_study(grid, cache_dir=root, extract=True)
    assert [r.n_tokens for r in study.runs] == [6000] * len(MICRO) and entry.problems() == []
    _assert_frames(
        size.fit_table(study, [1, 10]), size.fit_table(load_study(grid, cache_dir=micro_cache), [1, 10])
    )


def test_document_hits_at_k_of_the_vocabulary_are_every_token() -> None:
    """A summary read from disk keeps hits below |V| only; at k >= |V| every token is a hit."""
    stats = _tied_stats(2)
    summary, _ = _stored(stats)
    assert summary.stats is None and summary.ks.max() < stats.vocab_size
    tokens = np.bincount(stats.doc, minlength=stats.n_docs).astype(float)
    for ties in TIES:
        got = summary.doc_hits([1, stats.vocab_size, stats.vocab_size + 5], ties)
        np.testing.assert_array_equal(got[:, 1], tokens)
        np.testing.assert_array_equal(got[:, 2], tokens)
        rank = stats.n_greater + (stats.n_equal if ties == "pessimistic" else 1)
        if ties != "expected":
            np.testing.assert_array_equal(
                got[:, 0], np.bincount(stats.doc, weights=rank <= 1, minlength=stats.n_docs)
            )


def test_forged_grids_and_falling_hits_are_refused() -> None:
    """Summaries whose every total still adds up, forged in what only the reader's own rules catch."""
    stats = _tied_stats(3)
    key = "f" * 64
    # thresholds beside the grid of |V| (a k the grid lacks)
    extra = summarize(stats, ks=[8])
    assert 8 not in summary_ks(stats.vocab_size)
    with pytest.raises(SummaryError, match="thresholds are not the grid"):
        parse_summary(summary_bytes(extra, key), key, stats.vocab_size, len(stats))
    # per-document hits that fall as k grows, moved between two documents so the totals still match
    forged = summarize(stats)
    forged.complete()
    hits = forged.hits["expected"].copy()
    gain = np.diff(hits, axis=1)  # gain[:, j - 1]: hits won from threshold j - 1 to j
    # a threshold j without per-document runs (their check would catch it too), where a document
    # with at least one hit gains less than one and another gains at least one on the next threshold
    slow = (gain[:, :-1] < 1) & (hits[:, 1:-1] >= 1)
    j = next(
        j
        for j in range(1, len(forged.ks) - 1)
        if forged.ks[j] not in DOC_RUN_KS and slow[:, j - 1].any() and (gain[:, j] >= 1).sum() > 1
    )
    a = int(np.flatnonzero(slow[:, j - 1])[0])
    b = int(np.flatnonzero((gain[:, j] >= 1) & (np.arange(len(hits)) != a))[0])
    hits[a, j] -= 1
    hits[b, j] += 1
    assert np.any(np.diff(hits, axis=1) < 0) and np.allclose(
        hits.sum(axis=0), forged.hits["expected"].sum(axis=0)
    )
    forged.hits["expected"] = hits
    summary = parse_summary(summary_bytes(forged, key), key, stats.vocab_size, len(stats))
    with pytest.raises(SummaryError, match="hits_expected falls as k grows"):
        summary.doc_hits([1], "expected")
