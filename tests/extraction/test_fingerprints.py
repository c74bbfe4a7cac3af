"""rbplab.extraction.fingerprints: weight and tokenizer identities as `describe_model` reports them,
and the weights identity held to the end of a run: a weight file added to the model's folder after
planning is a change (a file of another name is not), and weights rewritten after the last shard
was scored stop the manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.models import edit_saved
from helpers.weights import rewrite, scaled_safetensors

from rbplab.extraction import scoring
from rbplab.extraction.fingerprints import WeightsChangedError
from rbplab.extraction.pipeline import extract_plan
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.sources import describe_model
from rbplab.store import CacheEntry


def test_fingerprint_follows_the_weights(gpt2_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(gpt2_dir, copy)
    original = describe_model(str(gpt2_dir)).info
    assert describe_model(str(copy)).info.fingerprint == original.fingerprint  # path-independent
    edit_saved(copy, lambda model: model.lm_head.weight[0, 0].add_(1.0))
    changed = describe_model(str(copy)).info
    assert changed.fingerprint != original.fingerprint
    assert changed.tokenizer_fingerprint == original.tokenizer_fingerprint


SETTINGS = {"context_length": 16, "shard_tokens": 48}  # the tiny corpus in several shards


@pytest.fixture
def model(gpt2_dir, tmp_path) -> Path:
    """A copy of the tiny GPT-2 that a test may add files to or rewrite."""
    folder = tmp_path / "model"
    shutil.copytree(gpt2_dir, folder)
    return folder


@pytest.mark.parametrize(
    ("name", "noticed"),
    [
        ("extra.safetensors", True),
        ("extra.bin", True),
        ("extra.pt", True),
        ("extra.pth", True),
        ("extra.gguf", True),
        ("extra.safetensors.part", False),  # not a weight file by its name
        ("notes.txt", False),
    ],
)
def test_a_weight_file_added_after_planning_is_noticed(model, tiny_corpus, name, noticed):
    plan = plan_extraction(str(model), tiny_corpus, **SETTINGS)
    added = model / name
    added.write_bytes(b"\0" * 64)
    weights = plan.described.weights
    assert weights.changed() == ([str(added)] if noticed else [])
    if noticed:
        told = rf"^the weight file {added} changed since the run was planned"
        with pytest.raises(WeightsChangedError, match=told):
            weights.check("since the run was planned")
    else:
        weights.check("since the run was planned")  # nothing the fingerprint covers changed


def test_a_run_whose_folder_gained_a_weight_file_writes_nothing(model, tiny_corpus, tmp_path):
    plan = plan_extraction(str(model), tiny_corpus, **SETTINGS)
    added = model / "extra.safetensors"
    added.write_bytes(b"\0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(
        WeightsChangedError, match=rf"^the weight file {added} changed since the run was planned"
    ):
        extract_plan(plan, cache_dir=cache, progress=False)
    assert not CacheEntry(cache, plan.key_spec).path.exists()


@pytest.mark.parametrize(
    ("version", "how", "mtime", "finalised"),
    [
        ("other", "in place", "kept", False),
        ("other", "rename", "put back", False),
        ("same", "in place", "kept", True),  # the same bytes written again: hashed again, kept
        ("same", "rename", "put back", True),
    ],
)
def test_weights_changed_after_the_last_shard_stop_the_manifest(
    model, tiny_corpus, tmp_path, monkeypatch, version, how, mtime, finalised
):
    """The weights rewritten after the last shard was written and before the manifest: every
    shard (scored before) stays, and the entry is not finalised under a key that names other
    bytes than the model now holds."""
    weights_file = model / "model.safetensors"
    data = weights_file.read_bytes() if version == "same" else scaled_safetensors(weights_file)
    plan = plan_extraction(str(model), tiny_corpus, **SETTINGS)
    n = len(plan.shards)
    assert n >= 2
    written = []

    def after_each_write():  # on the writer thread, right after a shard landed
        written.append(True)
        if len(written) == n:
            rewrite(weights_file, data, how, mtime)

    monkeypatch.setattr(scoring, "_crash_hook", after_each_write)
    entry = CacheEntry(tmp_path / "cache", plan.key_spec)
    if finalised:
        result = extract_plan(plan, cache_dir=tmp_path / "cache", progress=False)
        assert result.key == entry.key and entry.is_complete()
    else:
        told = rf"^the weight file {weights_file} changed before the entry's manifest was written"
        with pytest.raises(WeightsChangedError, match=told):
            extract_plan(plan, cache_dir=tmp_path / "cache", progress=False)
        assert not entry.is_complete() and not entry.manifest_path.exists()
        assert entry.completed_shards() == set(range(n))  # scored before the change: kept
    assert len(written) == n
