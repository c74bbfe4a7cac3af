"""The cache key names the bytes that were scored: a local model's weight files rewritten between or
during extractions (in place or renamed over, with the modification time the write gave or put
back) end in an entry keyed by the weights it holds, or in a one-line error with nothing finished;
never in an entry keyed by one version of the weights holding another's ranks.

Every shard the cache under test holds is compared byte for byte with the shard that extracting
the version its key names gives in a fresh cache (the key holds the weights fingerprint, and the
model's path, which stays the same)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.extraction import extract_run
from helpers.models import DOCUMENTS
from helpers.studies import shard_bytes
from helpers.weights import HOW, MTIME, rewrite, scaled_gguf, scaled_safetensors

import rbplab.runner.executors as executors
from rbplab.catalog.corpora import Corpus, Document, open_corpus
from rbplab.cli import app as cli
from rbplab.core.errors import RbplabError
from rbplab.extraction import pipeline, scoring
from rbplab.extraction.fingerprints import WeightsChangedError
from rbplab.extraction.pipeline import extract_plan
from rbplab.extraction.plan import plan_extraction
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.store import CacheEntry

SETTINGS = {"context_length": 16, "shard_tokens": 48}  # the tiny corpus in several shards


@pytest.fixture
def model(gpt2_dir, tmp_path) -> tuple[Path, Path, bytes, bytes]:
    """(model folder, its weight file, the file's bytes, other weights of the same size): a copy of
    the tiny GPT-2 that this test may rewrite."""
    folder = tmp_path / "model"
    shutil.copytree(gpt2_dir, folder)
    weights = folder / "model.safetensors"
    return folder, weights, weights.read_bytes(), scaled_safetensors(weights)


def reference_shards(target: str, weights: Path, versions: list[bytes], corpora, root: Path) -> dict:
    """Every shard (path under the cache root: bytes) that extracting `corpora` with each version
    of `weights` in place gives in fresh caches; the file is left holding its first version."""
    found: dict[str, bytes] = {}
    for number, data in enumerate(versions):
        rewrite(weights, data, "rename", "kept")
        for corpus in corpora:
            extract_run(target, corpus, cache_dir=root / f"v{number}", progress=False, **SETTINGS)
        found |= shard_bytes(root / f"v{number}")
    rewrite(weights, versions[0], "rename", "kept")
    return found


def assert_shards_hold_their_keys(cache: Path, reference: dict[str, bytes]) -> None:
    found = shard_bytes(cache)
    assert found, "nothing was cached"
    wrong = [name for name, data in found.items() if reference.get(name) != data]
    assert not wrong, f"shards keyed by one version of the weights hold another's ranks: {wrong}"


def complete_keys(cache: Path) -> set[str]:
    return {p.parent.name for p in cache.rglob("manifest.json")}


@pytest.mark.parametrize("how", HOW)
def test_two_calls_with_the_mtime_put_back(model, tiny_corpus, tmp_path, how):
    """The reproduction of issue 41: weights rewritten between two `extract` calls of one process,
    their modification time put back, then restored: each call is keyed by what it scored."""
    folder, weights, old, new = model
    cache = tmp_path / "cache"
    first = extract_run(str(folder), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    rewrite(weights, new, how, "put back")
    second = extract_run(str(folder), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    assert not second.from_cache and second.key != first.key
    rewrite(weights, old, how, "put back")
    third = extract_run(str(folder), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    assert third.from_cache and third.key == first.key
    reference = reference_shards(str(folder), weights, [old, new], [tiny_corpus], tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)


@pytest.mark.parametrize("mtime", MTIME)
@pytest.mark.parametrize("how", HOW)
def test_rewritten_between_planning_and_loading(model, tiny_corpus, tmp_path, how, mtime):
    folder, weights, old, new = model
    touched = plan_extraction(str(folder), tiny_corpus, **SETTINGS)
    rewrite(weights, old, how, "kept")  # the same bytes written again: hashed again, and accepted
    assert not extract_plan(touched, cache_dir=tmp_path / "touched", progress=False).from_cache
    cache = tmp_path / "cache"
    plan = plan_extraction(str(folder), tiny_corpus, **SETTINGS)
    assert plan.key_spec == touched.key_spec
    rewrite(weights, new, how, mtime)
    with pytest.raises(
        WeightsChangedError, match=rf"^the weight file {weights} changed since the run was planned"
    ):
        extract_plan(plan, cache_dir=cache, progress=False)
    assert not CacheEntry(cache, plan.key_spec).path.exists()  # nothing left behind


@pytest.mark.parametrize("mtime", MTIME)
@pytest.mark.parametrize("how", HOW)
def test_rewritten_while_scoring(model, tiny_corpus, tmp_path, monkeypatch, how, mtime):
    """A file rewritten after the first shard is scored: that shard (scored before) is kept, the
    next is not written, no manifest; the resume on the restored file finishes the entry right."""
    folder, weights, old, new = model
    cache = tmp_path / "cache"
    scored = []
    original = scoring.layer_frames

    def rewriting_before_the_second_shard(*args, **kwargs):
        if len(scored) == 1:
            rewrite(weights, new, how, mtime)
        frames = original(*args, **kwargs)
        scored.append(len(frames[None][0]))
        return frames

    monkeypatch.setattr(scoring, "layer_frames", rewriting_before_the_second_shard)
    with pytest.raises(
        WeightsChangedError, match=rf"^the weight file {weights} changed while shard 1 was scored"
    ):
        extract_run(str(folder), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    assert len(scored) == 2 and not complete_keys(cache)
    assert len(shard_bytes(cache)) == 1  # shard 0, scored before the file changed
    monkeypatch.setattr(scoring, "layer_frames", original)
    rewrite(weights, old, how, mtime)
    resumed = extract_run(str(folder), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    assert not resumed.from_cache and complete_keys(cache) == {resumed.key}
    reference = reference_shards(str(folder), weights, [old], [tiny_corpus], tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)
    assert len(shard_bytes(cache)) > 2


def _corpus_files(tmp_path: Path) -> list[Path]:
    """Two .txt corpora (one document each) from the tiny corpus's documents."""
    files = []
    for name, documents in (("first", DOCUMENTS[:3]), ("second", DOCUMENTS[3:])):
        path = tmp_path / f"{name}.txt"
        path.write_text(" ".join(text for _, text in documents) + "\n")
        files.append(path)
    return files


@pytest.mark.parametrize("mtime", MTIME)
@pytest.mark.parametrize("how", HOW)
def test_one_extract_command_two_corpora(model, tmp_path, monkeypatch, capsys, how, mtime):
    """`rbplab extract` with two corpora, the weights rewritten after the first: the second entry is
    keyed by the weights it scored (the command describes a model again when its files changed)."""
    folder, weights, old, new = model
    cache = tmp_path / "cache"
    corpora = _corpus_files(tmp_path)
    done = []
    original = pipeline.extract_plans

    def extracting_then_rewriting(plans, **kwargs):
        results = original(plans, **kwargs)
        done.extend(result.key for result in results)
        if len(done) == 1:
            rewrite(weights, new, how, mtime)
        return results

    monkeypatch.setattr(pipeline, "extract_plans", extracting_then_rewriting)
    argv = [
        "extract",
        "-m",
        str(folder),
        "-c",
        *map(str, corpora),
        "--cache-dir",
        str(cache),
        "--no-progress",
    ]
    argv += ["--context-length", "16", "--shard-tokens", "48"]
    assert cli.main(argv) == 0
    assert len(done) == 2 and complete_keys(cache) == set(done)
    opened = [open_corpus(str(path)) for path in corpora]
    reference = reference_shards(str(folder), weights, [old, new], opened, tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)
    capsys.readouterr()


def _study(folder: Path, tiny_corpus) -> Grid:
    other = Corpus(
        "other", tuple(Document(f"o{i}", d.text[::-1]) for i, d in enumerate(tiny_corpus.documents)), {}
    )
    return Grid.from_names([str(folder)], [tiny_corpus, other], **SETTINGS)


@pytest.mark.parametrize("how", HOW)
def test_run_units_after_a_rewrite(model, tiny_corpus, tmp_path, monkeypatch, how):
    """`rbplab run` in one process, the weights rewritten (mtime put back) after its first unit: the
    units after it fail in one line each (their entries were planned under the old weights), the
    kept model is not used for them, and no shard holds other weights than its key names."""
    folder, weights, old, new = model
    cache = tmp_path / "cache"
    ran = []
    original = executors.run_unit

    def running_then_rewriting(unit, cache_dir, on_tokens=None):
        result = original(unit, cache_dir, on_tokens)
        ran.append(unit.name)
        if len(ran) == 1:
            rewrite(weights, new, how, "put back")
        return result

    monkeypatch.setattr(executors, "run_unit", running_then_rewriting)
    grid = _study(folder, tiny_corpus)
    run = run_study(grid, cache_dir=cache, progress=False, shards_per_unit=2)
    assert len(ran) == 1 and not run.ok
    assert all("changed since the run was planned" in line for line in run.failures)
    assert all("\n" not in line for line in run.failures)
    reference = reference_shards(str(folder), weights, [old], grid.corpora, tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)


@pytest.mark.parametrize("how", HOW)
def test_run_unit_rewritten_while_scoring(model, tiny_corpus, tmp_path, monkeypatch, how):
    folder, weights, old, new = model
    cache = tmp_path / "cache"
    scored = []
    original = scoring.layer_frames

    def rewriting_before_the_second_shard(*args, **kwargs):
        if len(scored) == 1:
            rewrite(weights, new, how, "put back")
        frames = original(*args, **kwargs)
        scored.append(len(frames[None][0]))
        return frames

    monkeypatch.setattr(scoring, "layer_frames", rewriting_before_the_second_shard)
    grid = _study(folder, tiny_corpus)
    run = run_study(grid, cache_dir=cache, progress=False, shards_per_unit=4)
    assert not run.ok and not complete_keys(cache)
    assert f"the weight file {weights} changed while shard 1 was scored" in run.failures[0]
    reference = reference_shards(str(folder), weights, [old], grid.corpora, tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)


@pytest.fixture
def gguf_model(gguf_files, tmp_path) -> tuple[Path, bytes, bytes]:
    path = tmp_path / "gguf" / "tiny.gguf"
    path.parent.mkdir()
    shutil.copy(gguf_files["with_tokenizer"], path)
    return path, path.read_bytes(), scaled_gguf(path)


@pytest.mark.parametrize("how", HOW)
def test_gguf_rewritten_with_the_mtime_put_back(gguf_model, tiny_corpus, tmp_path, how):
    path, old, new = gguf_model
    cache = tmp_path / "cache"
    first = extract_run(str(path), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    rewrite(path, new, how, "put back")
    second = extract_run(str(path), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS)
    assert not second.from_cache and second.key != first.key
    rewrite(path, old, how, "put back")
    assert extract_run(str(path), tiny_corpus, cache_dir=cache, progress=False, **SETTINGS).key == first.key
    reference = reference_shards(str(path), path, [old, new], [tiny_corpus], tmp_path / "ref")
    assert_shards_hold_their_keys(cache, reference)


def test_gguf_reader_follows_a_rewrite_with_the_mtime_put_back(gguf_model):
    from rbplab.extraction.gguf import gguf_reader

    path, _, new = gguf_model
    first = gguf_reader(path)
    rewrite(path, new, "in place", "put back")
    assert gguf_reader(path) is not first


def test_the_error_is_one_line_at_the_command_line(model, tiny_corpus, tmp_path, monkeypatch, capsys):
    folder, weights, _, new = model
    corpus = _corpus_files(tmp_path)[0]
    original = scoring.layer_frames

    def scoring_then_rewriting(*args, **kwargs):
        frames = original(*args, **kwargs)
        rewrite(weights, new, "in place", "put back")
        return frames

    monkeypatch.setattr(scoring, "layer_frames", scoring_then_rewriting)
    argv = [
        "extract",
        "-m",
        str(folder),
        "-c",
        str(corpus),
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-progress",
    ]
    assert cli.main([*argv, "--context-length", "16"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"the weight file {weights} changed while shard 0 was scored" in err
    assert issubclass(WeightsChangedError, RbplabError) and not any((tmp_path / "c").rglob("manifest.json"))
    assert os.path.getsize(weights) == len(new)
