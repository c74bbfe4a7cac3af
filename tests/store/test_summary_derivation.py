"""A summary forged from other tokens, consistent in every relation its rules derive and with its
checksum records fixed, passes every check a read makes; `cache verify` (and `repair`, `import`)
derive the summary from the verified shards and compare: a mismatch is CORRUPT, and repair and
import derive the summary again. Plain reads stay on the fast path (no shard is read)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cli import run
from helpers.factories import complete_entry
from helpers.hostile import forge_summary

from rbplab.core.stats import TokenStats, summarize
from rbplab.store.archive import export_entries, import_archive
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import summary_bytes

MISMATCH = "its summary is not the one its shards give"


@pytest.fixture
def forged(tmp_path):
    entry = complete_entry(tmp_path / "cache")
    truth = summarize(entry.read_stats())
    forge_summary(entry)
    assert entry.problems() == []  # every rule of the summary itself holds
    assert not np.array_equal(entry.summary().pairs.greater, truth.pairs.greater)
    return entry, truth


def test_the_summary_is_compared_with_the_one_its_shards_give(forged):
    entry, _ = forged
    assert entry.problems(derive=True) == [f"{MISMATCH} (pair_greater differs)"]
    assert entry.summary_problems(derive=True) == [f"{MISMATCH} (pair_greater differs)"]


def test_a_sound_summary_agrees_with_its_shards(tmp_path):
    entry = complete_entry(tmp_path / "cache")
    assert entry.problems(derive=True) == []


def test_verify_reports_a_forged_summary_and_deletes_nothing(forged, capsys):
    entry, _ = forged
    before = sorted((p.name, p.read_bytes()) for p in entry.path.iterdir())
    for flags in ([], ["--no-derive"]):
        status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", *flags)
        assert status == 1 and f"CORRUPT  {entry.key[:12]}  {MISMATCH} (pair_greater differs)" in out, out
    assert sorted((p.name, p.read_bytes()) for p in entry.path.iterdir()) == before


def test_repair_derives_the_summary_again_without_the_model(forged, capsys):
    entry, truth = forged
    status, out, err = run(capsys, "cache", "--cache-dir", entry.root, "repair")
    assert status == 0 and f"repaired {entry.key[:12]}  {MISMATCH}" in out, (out, err)
    assert entry.problems(derive=True) == []
    np.testing.assert_array_equal(entry.summary().pairs.greater, truth.pairs.greater)
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--no-derive")
    assert status == 0 and f"ok       {entry.key[:12]}" in out


def test_import_derives_a_forged_summary_again(forged, tmp_path):
    entry, truth = forged
    archive = tmp_path / "entries.tar"
    export_entries([entry.key], archive, root=entry.root)
    with pytest.warns(
        UserWarning, match=rf"{MISMATCH} \(pair_greater differs\); its summary was derived again"
    ):
        assert import_archive(archive, root=tmp_path / "other") == [(entry.key, "imported")]
    imported = CacheEntry.open(entry.key, tmp_path / "other")
    assert imported.problems(derive=True) == []
    np.testing.assert_array_equal(imported.summary().pairs.greater, truth.pairs.greater)


def test_a_plain_read_reads_no_shard(forged, monkeypatch):
    entry, _ = forged

    def no_shards(*_args, **_kwargs):
        raise AssertionError("a summary read must not read a shard")

    monkeypatch.setattr(CacheEntry, "shard_problem", no_shards)
    monkeypatch.setattr(CacheEntry, "read_stats", no_shards)
    fresh = CacheEntry.open(entry.key, entry.root)
    assert fresh.summary().n_tokens == 20


def test_the_comparison_allows_last_bits_of_floats_only(tmp_path):
    from helpers.factories import random_stats

    from rbplab.store.cache import rules
    from rbplab.store.cache.reading import summary_table
    from rbplab.store.cache.summary_rules import SummaryDerivation

    stats = random_stats(np.random.default_rng(0), n=500, vocab=100, n_docs=5)
    derived = summary_table(summary_bytes(summarize(stats), "a" * 64))

    def with_nll(scale: float) -> TokenStats:
        return TokenStats(
            stats.doc, stats.position, stats.n_greater, stats.n_equal, stats.nll * scale, stats.vocab_size
        )

    close = summary_table(summary_bytes(summarize(with_nll(1 + 1e-13)), "a" * 64))
    assert rules.first_problem(SummaryDerivation(close, derived)) is None
    other = summary_table(summary_bytes(summarize(with_nll(1 + 1e-6)), "a" * 64))
    assert rules.first_problem(SummaryDerivation(other, derived)) == f"{MISMATCH} (pair_nll differs)"
    moment = other.replace_schema_metadata(
        {**other.schema.metadata, b"rbplab.nll_sq_sum": (2.0).hex().encode()}
    )
    no_moment = derived.replace_schema_metadata({**derived.schema.metadata, b"rbplab.nll_sq_sum": b"x"})
    assert (
        rules.first_problem(SummaryDerivation(no_moment, derived)) == f"{MISMATCH} (its nll moment differs)"
    )
    assert rules.first_problem(SummaryDerivation(moment, other)) == f"{MISMATCH} (its nll moment differs)"


def test_import_replaces_a_copy_whose_summary_is_not_its_shards(forged, tmp_path):
    entry, truth = forged
    sound = complete_entry(tmp_path / "sound")  # the same spec, so the same key and tokens
    assert sound.key == entry.key
    archive = tmp_path / "entries.tar"
    export_entries([sound.key], archive, root=sound.root)
    assert import_archive(archive, root=entry.root) == [(entry.key, "imported")]
    assert entry.problems(derive=True) == []
    np.testing.assert_array_equal(entry.summary().pairs.greater, truth.pairs.greater)
