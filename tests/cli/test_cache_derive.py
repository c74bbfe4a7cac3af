"""Issue 20 with a real (tiny) model: what only the corpus, the tokenizer or the model can tell.

A truncated entry (last shard record and files dropped, n_tokens fixed to match) passes every store
check; its shard counts derived from the spec and the corpus catch it in `cache verify`,
`load_stats` and `cache repair`, and where the corpus cannot be opened verify says the counts were
not derived. A shard rewritten together with both of its checksum records passes every check but
`cache verify --rederive`, which recomputes it with the model. Extraction and repair never write
through an entry or prefix folder linked out of the cache."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings

import numpy as np
import pytest
from helpers.cache_rows import entry_rows
from helpers.cli import run
from helpers.extraction import extract_run
from helpers.models import DOCUMENTS
from helpers.untrusted import read_only, snapshot

from rbplab.extraction.reading import load_stats
from rbplab.grid import Grid
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.layout import SUMMARY_FILE
from rbplab.store.cache.reading import CacheCorruptedError

CTX = 16
SHARD_TOKENS = 24


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in DOCUMENTS))
    return path


def settings(root):
    return {"context_length": CTX, "shard_tokens": SHARD_TOKENS, "cache_dir": root, "progress": False}


@pytest.fixture
def built(gpt2_dir, corpus_file, tmp_path):
    """(clean stats, entry) of the tiny GPT-2 over the corpus file, several shards."""
    root = tmp_path / "cache"
    stats = load_stats(str(gpt2_dir), str(corpus_file), **settings(root))
    result = extract_run(str(gpt2_dir), str(corpus_file), **settings(root))
    entry = CacheEntry(root, result.manifest["spec"])
    assert len(result.manifest["shards"]) >= 3
    return stats, entry


def truncate(entry: CacheEntry, keep_summary: bool = False) -> tuple[int, int]:
    """Drop the last shard record and its files and fix n_tokens: (tokens before, after). The
    summary, which still counts every token, goes too unless `keep_summary` (a careful forger)."""
    manifest = json.loads(entry.manifest_path.read_text())
    last = manifest["shards"].pop()
    before = manifest["n_tokens"]
    manifest["n_tokens"] -= last["rows"]
    if not keep_summary:
        manifest.pop("summary", None)
        for name in (SUMMARY_FILE, SUMMARY_FILE + ".sha256"):
            (entry.path / name).unlink()
    entry.manifest_path.write_text(json.dumps(manifest))
    for name in (last["file"], last["file"] + ".sha256"):
        (entry.path / name).unlink()
    return before, manifest["n_tokens"]


def test_a_truncation_that_leaves_the_summary_is_caught_by_the_store(built, capsys):
    _, entry = built
    before, after = truncate(entry, keep_summary=True)
    assert entry.problems() == [f"its summary is refused: the summary does not hold {after} tokens"]
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--no-derive")
    assert status == 1 and f"CORRUPT  {entry.key[:12]}  its summary is refused" in out


def test_truncated_entry_is_caught_where_the_corpus_can_be_opened(built, gpt2_dir, corpus_file, capsys):
    clean, entry = built
    root = entry.root
    n_shards = len(entry.manifest()["shards"])
    before, after = truncate(entry)
    assert entry.problems() == []  # the store alone cannot tell (the README says so)
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify")
    assert status == 1, out
    assert (
        f"CORRUPT  {entry.key[:12]}  it has {n_shards - 1} shards ({after} tokens) but its spec and corpus "
        f"give {n_shards} ({before} tokens)"
    ) in out
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify", "--no-derive")
    assert status == 0 and f"ok       {entry.key[:12]}" in out  # what --no-derive gives up
    untouched = snapshot(root)
    with read_only(root), warnings.catch_warnings():  # a read-only cache: refused, never read short
        warnings.simplefilter("ignore")
        with pytest.raises(CacheCorruptedError, match="shards are missing or extra"):
            load_stats(str(gpt2_dir), str(corpus_file), **settings(root))
    assert snapshot(root) == untouched
    with pytest.warns(UserWarning, match=r"is damaged: it has .* shards .* recomputing the damaged shards"):
        again = load_stats(str(gpt2_dir), str(corpus_file), **settings(root))
    assert len(again) == before == len(clean)
    assert np.array_equal(again.n_greater, clean.n_greater) and np.array_equal(again.nll, clean.nll)


def test_repair_recomputes_a_truncated_entry(built, capsys):
    clean, entry = built
    before, after = truncate(entry)
    status, out, err = run(
        capsys, "cache", "--cache-dir", entry.root, "repair", entry.key[:8], "--no-progress"
    )
    assert status == 0, err
    assert re.search(rf"repaired {entry.key[:12]}  {before} tokens \({before - after} recomputed\)", out), out
    stats = CacheEntry(entry.root, entry.spec).read_stats()
    assert np.array_equal(stats.n_greater, clean.n_greater) and np.array_equal(stats.nll, clean.nll)
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "repair", entry.key[:8])
    assert status == 0 and f"ok       {entry.key[:12]}  nothing to repair" in out


def test_default_repair_sweep_finds_a_truncated_entry(built, capsys):
    _, entry = built
    before, _ = truncate(entry)
    status, out, err = run(capsys, "cache", "--cache-dir", entry.root, "repair", "--no-progress")
    assert status == 0 and f"repaired {entry.key[:12]}  {before} tokens" in out, err


def test_extract_repairs_a_truncated_entry(built, gpt2_dir, corpus_file, capsys):
    """Issue 31 item 2: `rbplab extract` of the very request derives the counts before calling the
    entry a hit; the truncated entry is reported in one line, its missing shard computed, its
    manifest rewritten, and the full token count returned."""
    clean, entry = built
    n_shards = len(entry.manifest()["shards"])
    before, after = truncate(entry)
    kept = {name: (entry.path / name).read_bytes() for name in (f"shard-{i:05d}.parquet" for i in range(2))}
    args = ["extract", "-m", gpt2_dir, "-c", corpus_file, "--cache-dir", entry.root, "--context-length", CTX]
    status, out, err = run(capsys, *args, "--shard-tokens", SHARD_TOKENS, "--no-progress")
    assert status == 0, err
    assert f"{before} tokens\textracted\t{entry.key[:12]}" in out, out  # not a hit of {after}
    damage = [line for line in err.splitlines() if "is damaged" in line]  # one `rbplab: warning:` line
    assert len(damage) == 1 and damage[0].startswith("rbplab: warning: "), err
    assert (
        f"it has {n_shards - 1} shards ({after} tokens) but its spec and corpus give {n_shards}" in damage[0]
    )
    manifest = entry.manifest()
    assert manifest["n_tokens"] == before and len(manifest["shards"]) == n_shards
    assert entry.problems() == []
    assert all((entry.path / name).read_bytes() == data for name, data in kept.items())  # only the lost shard
    stats = entry.read_stats()
    assert np.array_equal(stats.n_greater, clean.n_greater) and np.array_equal(stats.nll, clean.nll)
    status, out, _ = run(capsys, *args, "--shard-tokens", SHARD_TOKENS, "--no-progress")
    assert status == 0 and f"{before} tokens\tcached\t{entry.key[:12]}" in out, out


def test_extract_api_never_returns_a_truncated_entry(built, gpt2_dir, corpus_file):
    _, entry = built
    before, _ = truncate(entry)
    with pytest.warns(UserWarning, match="shards are missing or extra.*recomputing the damaged shards now"):
        result = extract_run(str(gpt2_dir), str(corpus_file), **settings(entry.root))
    assert result.n_tokens == before and not result.from_cache
    assert extract_run(str(gpt2_dir), str(corpus_file), **settings(entry.root)).from_cache


def test_extract_drops_a_shard_of_another_size(built, gpt2_dir, corpus_file):
    """A shard whose rows differ from the plan's (records and manifest forged to agree) is removed
    and recomputed, not kept by the resume."""
    clean, entry = built
    frame = entry_rows(entry)
    manifest = json.loads(entry.manifest_path.read_text())
    rows = manifest["shards"][1]["rows"]
    start = manifest["shards"][0]["rows"]
    short = frame.iloc[start : start + rows - 1].reset_index(drop=True)  # one row fewer
    data = entry.encode_shard(1, short)
    entry.shard_path(1).write_bytes(data)
    record = {"sha256": hashlib.sha256(data).hexdigest(), "rows": len(short), "bytes": len(data)}
    (entry.path / (entry.shard_path(1).name + ".sha256")).write_text(json.dumps(record))
    manifest["shards"][1].update(record)
    manifest["n_tokens"] -= 1
    manifest.pop("summary", None)
    for name in (SUMMARY_FILE, SUMMARY_FILE + ".sha256"):
        (entry.path / name).unlink()
    entry.manifest_path.write_text(json.dumps(manifest))
    assert entry.problems() == []  # the store alone cannot tell
    with pytest.warns(UserWarning, match=f"shard 1 has {rows - 1} rows but its spec and corpus give {rows}"):
        result = extract_run(str(gpt2_dir), str(corpus_file), **settings(entry.root))
    assert result.n_tokens == len(clean) and entry.problems() == []
    stats = entry.read_stats()
    assert np.array_equal(stats.n_greater, clean.n_greater) and np.array_equal(stats.nll, clean.nll)


def test_a_read_only_cache_refuses_a_truncated_entry_in_one_line(built, gpt2_dir, corpus_file, capsys):
    _, entry = built
    truncate(entry)
    untouched = snapshot(entry.root)
    args = ["extract", "-m", gpt2_dir, "-c", corpus_file, "--cache-dir", entry.root, "--context-length", CTX]
    with read_only(entry.root):
        status, out, err = run(capsys, *args, "--shard-tokens", SHARD_TOKENS, "--no-progress")
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert "shards are missing or extra" in err and "cannot be marked incomplete here" in err, err
    assert snapshot(entry.root) == untouched


def test_run_recomputes_a_truncated_entry(built, gpt2_dir, corpus_file, tmp_path):
    """The runner's planning derives the counts too: a truncated entry is not 'cached'."""
    from rbplab.runner import run_study
    from rbplab.runner.units import plan_study

    clean, entry = built
    before, _ = truncate(entry)
    study = tmp_path / "study.toml"
    study.write_text(
        f'models = ["{gpt2_dir}"]\ncorpora = ["{corpus_file}"]\n'
        f"[settings]\ncontext_length = {CTX}\nshard_tokens = {SHARD_TOKENS}\n"
    )
    with pytest.warns(UserWarning, match="shards are missing or extra"):
        plan = plan_study(Grid.read(study), entry.root)
    assert [e.cached for e in plan.entries] == [False] and plan.entries[0].n_tokens == before
    result = run_study(Grid.read(study), cache_dir=entry.root, progress=False)
    assert result.ok and result.table["state"].tolist() == ["computed"], result.table
    assert entry.manifest()["n_tokens"] == before and entry.problems() == []
    stats = entry.read_stats()
    assert np.array_equal(stats.n_greater, clean.n_greater)


def test_verify_says_when_the_corpus_is_gone(built, corpus_file, capsys):
    _, entry = built
    truncate(entry)
    corpus_file.rename(corpus_file.with_suffix(".moved"))
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify")
    assert status == 0  # undetectable without the corpus, and said so
    assert re.search(
        rf"ok       {entry.key[:12]}  token and shard counts not derived \(cannot derive the token and shard "
        r"counts of cache entry \w+: corpus 'docs' cannot be re-resolved",
        out,
    ), out


# ---------------------------------------------------------------------------------------------
# --rederive


def forge_shard(entry: CacheEntry, index: int) -> None:
    """Rewrite shard `index` with other ranks, and both of its checksum records to match."""
    frame = entry_rows(CacheEntry(entry.root, entry.spec))
    manifest = json.loads(entry.manifest_path.read_text())
    start = sum(r["rows"] for r in manifest["shards"][:index])
    part = frame.iloc[start : start + manifest["shards"][index]["rows"]].reset_index(drop=True)
    part["n_greater"] = part["n_greater"] // 2  # a model that looks better than it is
    data = entry.encode_shard(index, part)
    entry.shard_path(index).write_bytes(data)
    record = {"sha256": hashlib.sha256(data).hexdigest(), "rows": len(part), "bytes": len(data)}
    (entry.path / (entry.shard_path(index).name + ".sha256")).write_text(json.dumps(record))
    manifest["shards"][index].update(record)
    entry.manifest_path.write_text(json.dumps(manifest))


def test_rederive_confirms_a_sound_entry(built, capsys):
    _, entry = built
    n_shards = len(entry.manifest()["shards"])
    status, out, err = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--rederive")
    assert status == 0, out + err
    assert f"ok       {entry.key[:12]}  {n_shards} shards and " in out
    assert "every shard recomputed with the model: identical" in out
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--sample", "2")
    assert status == 0 and re.search(r"shards \[\d+, \d+\] recomputed with the model: identical", out), out


def test_rederive_catches_a_shard_forged_with_its_checksums(built, capsys):
    _, entry = built
    forge_shard(entry, 1)
    assert entry.problems() == []  # every store check passes: the records were rewritten too
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify")
    # the summary still holds the true ranks: verify derives it from the shards and compares
    assert status == 1 and f"CORRUPT  {entry.key[:12]}  its summary is not the one its shards give" in out
    entry.derive_summary()  # a careful forger derives the summary from the forged shard too
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify")
    assert status == 0  # ... and then every check passes, the derived counts too
    before = snapshot(entry.root)
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--rederive")
    assert status == 1
    assert re.search(
        rf"CORRUPT  {entry.key[:12]}  shard 1 differs from its recomputation: n_greater in \d+ of \d+ rows",
        out,
    ), out
    assert snapshot(entry.root) == before  # verify deletes nothing
    n_shards = len(entry.manifest()["shards"])
    status, out, _ = run(capsys, "cache", "--cache-dir", entry.root, "verify", "--sample", str(n_shards))
    assert status == 1 and "shard 1 differs from its recomputation" in out


def test_rederive_without_the_model_is_unchecked(gpt2_dir, corpus_file, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(gpt2_dir, model)
    root = tmp_path / "cache"
    result = extract_run(str(model), str(corpus_file), **settings(root))
    shutil.rmtree(model)
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify", "--rederive")
    assert status == 1
    assert re.search(rf"UNCHECKED {result.key[:12]}  cannot rederive cache entry .*model 'model'", out), out


# ---------------------------------------------------------------------------------------------
# Linked folders during extraction and repair


@pytest.mark.parametrize("level", ["entry", "prefix"])
def test_extraction_and_repair_never_write_through_linked_folders(
    gpt2_dir, corpus_file, tmp_path, capsys, level
):
    root = tmp_path / "cache"
    result = extract_run(str(gpt2_dir), str(corpus_file), **settings(root))
    folder = result.path if level == "entry" else result.path.parent
    outside = tmp_path / "outside"
    shutil.move(folder, outside)
    folder.symlink_to(outside)
    if level == "entry":
        for item in outside.iterdir():
            if item.name != "spec.json":
                item.unlink()  # an incomplete entry, so extraction has something to write
    else:
        (outside / result.key / "manifest.json").unlink()
    before = snapshot(outside)
    args = ["extract", "-m", gpt2_dir, "-c", corpus_file, "--cache-dir", root, "--context-length", CTX]
    status, out, err = run(capsys, *args, "--shard-tokens", SHARD_TOKENS, "--no-progress")
    assert status == 1 and err.strip().splitlines()[-1].startswith("rbplab: error: ")
    assert f"the {level} folder" in err and "refusing to write through it" in err, err
    status, out, err = run(capsys, "cache", "--cache-dir", root, "repair", "--no-progress")
    assert status == 1 and f"cannot repair cache entry {result.key[:12]}: the {level} folder" in err, err
    status, out, _ = run(capsys, "cache", "--cache-dir", root, "verify")
    assert status == 1 and f"CORRUPT  {result.key[:12]}  the {level} folder" in out
    assert snapshot(outside) == before


def test_repair_refuses_a_spec_of_another_layout_in_one_line(built):
    """A spec this rbplab does not write (a development build's, a hand-made one) is not planned by
    trying settings until a key matches: it is refused, with what to do."""
    from rbplab.extraction.verify import replan
    from rbplab.store.cache.reading import CacheError

    _, entry = built
    older = {k: v for k, v in entry.spec.items() if k != "tokenizer"}
    with pytest.raises(CacheError) as caught:
        replan(CacheEntry(entry.root, older))
    message = str(caught.value)
    assert "\n" not in message and "spec.json is not one this rbplab writes" in message
    assert "rbplab cache rm" in message and "tokenizer" in message
