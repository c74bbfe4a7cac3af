"""Ranks at chosen layers (`ExtractionSettings.layers`): a layer before the last read through the
logit lens, the final layer's entry the ordinary one, all from one forward pass per batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.cli import run as cli
from helpers.models import save_tiny

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import EntrySpec, EntrySpecError, ExtractionSettings, layer_indices
from rbplab.extraction.pipeline import extract
from rbplab.extraction.plan import plan_extraction, plan_layers
from rbplab.grid import Grid
from rbplab.store.cache.entry import CacheEntry

N_LAYERS = 3
TOKENS = 300


def entry_rows(cache, key: str) -> pd.DataFrame:
    """Every row of a complete entry, in shard order."""
    entry = CacheEntry.open(key, cache)
    shards = entry.manifest()["shards"]
    return pd.concat([pd.read_parquet(entry.shard_path(i)) for i in range(len(shards))], ignore_index=True)


def counts(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n_greater, n_equal) of each row's target among float64 logits."""
    z_t = logits[np.arange(len(targets)), targets][:, None]
    return (logits > z_t).sum(1), (logits == z_t).sum(1)


@pytest.fixture(scope="module")
def stacked(tmp_path_factory, tiny_tokenizer):
    """A GPT-NeoX of three layers whose block i adds a constant b_i to the residual stream
    (attention and MLP output weights zero, the MLP's output bias b_i): after layer i the stream is
    the token's embedding plus b_0 + ... + b_i, whatever the context."""
    biases = torch.Generator().manual_seed(5)

    def constant_blocks(model) -> None:
        for block in model.gpt_neox.layers:
            block.attention.dense.weight.zero_()
            block.attention.dense.bias.zero_()
            block.mlp.dense_4h_to_h.weight.zero_()
            block.mlp.dense_4h_to_h.bias.copy_(
                torch.randn(block.mlp.dense_4h_to_h.bias.shape, generator=biases)
            )

    path = tmp_path_factory.mktemp("stacked")
    return save_tiny(
        path, tiny_tokenizer, "gpt_neox", seed=3, edit=constant_blocks, num_hidden_layers=N_LAYERS
    )


def constructed_ranks(model_dir, layer: int, input_ids: np.ndarray, targets: np.ndarray, vocab: int):
    """The ranks layer `layer` of `stacked` gives, from its weights alone (no forward pass):
    LayerNorm_final(embedding + b_0 + ... + b_layer) through the head, in float64."""
    from safetensors.numpy import load_file

    w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    stream = w["gpt_neox.embed_in.weight"][input_ids]
    stream = stream + sum(w[f"gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias"] for i in range(layer + 1))
    centred = stream - stream.mean(1, keepdims=True)
    normed = centred / np.sqrt((centred**2).mean(1, keepdims=True) + 1e-5)
    normed = normed * w["gpt_neox.final_layer_norm.weight"] + w["gpt_neox.final_layer_norm.bias"]
    return counts(normed @ w["embed_out.weight"][:vocab].T, targets)


def test_each_layer_ranks_as_its_construction_gives(stacked, tiny_corpus, tmp_path):
    grid = Grid.from_names([str(stacked)], [tiny_corpus], max_tokens=TOKENS, layers="all")
    results = extract(grid, cache_dir=tmp_path, progress=False)
    assert [r.layer for r in results] == [0, 1, None]  # the final layer's entry is the ordinary one
    plan = plan_extraction(str(stacked), tiny_corpus, max_tokens=TOKENS)
    windows = [w for shard in plan.shards for w in shard]
    inputs = np.concatenate([w.input_ids[w.target_rows() - 1] for w in windows])
    targets = np.concatenate([w.input_ids[w.target_rows()] for w in windows])
    order = (
        pd.DataFrame(
            {
                "doc_index": np.concatenate([np.full(w.n_scored, w.doc_index) for w in windows]),
                "position": np.concatenate([w.positions() for w in windows]),
            }
        )
        .sort_values(["doc_index", "position"], kind="stable")
        .index.to_numpy()
    )
    found = []
    for layer, result in enumerate(results):
        rows = entry_rows(tmp_path, result.key)
        greater, equal = constructed_ranks(stacked, layer, inputs[order], targets[order], plan.vocab_size)
        assert len(rows) == len(targets)
        np.testing.assert_array_equal(rows["n_greater"].to_numpy(), greater)
        np.testing.assert_array_equal(rows["n_equal"].to_numpy(), equal)
        found.append(greater)
    assert not np.array_equal(found[0], found[2])  # the layers differ: the test can tell them apart
    lens = [r.manifest.get("lens") for r in results]
    assert lens == [{"kind": "logit", "layer": i, "n_layers": N_LAYERS} for i in (0, 1)] + [None]


def test_the_final_layer_is_the_ordinary_entry_bit_for_bit(gpt2_dir, tiny_corpus, tmp_path):
    ordinary = extract(
        Grid.from_names([str(gpt2_dir)], [tiny_corpus], max_tokens=TOKENS), cache_dir=tmp_path / "a"
    )
    layered = extract(
        Grid.from_names([str(gpt2_dir)], [tiny_corpus], max_tokens=TOKENS, layers=[0.5, 1.0]),
        cache_dir=tmp_path / "b",
        progress=False,
    )
    assert [r.layer for r in layered] == [0, None]
    assert layered[1].key == ordinary[0].key and not layered[1].from_cache
    pd.testing.assert_frame_equal(
        entry_rows(tmp_path / "b", layered[1].key), entry_rows(tmp_path / "a", ordinary[0].key)
    )
    # in a cache holding the ordinary entry, asking for more layers serves it as it is
    again = extract(
        Grid.from_names([str(gpt2_dir)], [tiny_corpus], max_tokens=TOKENS, layers="all"),
        cache_dir=tmp_path / "a",
        progress=False,
    )
    assert again[-1].key == ordinary[0].key and again[-1].from_cache and not again[0].from_cache


def test_ties_at_an_earlier_layer_count_as_the_final_layers_do(gpt2_dir, tiny_corpus, tmp_path):
    """The tiny GPT-2 has duplicated (tied) embedding rows, so a target whose row is duplicated
    ties exactly at every layer; an earlier layer's counts equal float64's on its lens states."""
    from transformers import AutoModelForCausalLM

    results = extract(
        Grid.from_names([str(gpt2_dir)], [tiny_corpus], max_tokens=TOKENS, layers=[0]),
        cache_dir=tmp_path,
        progress=False,
    )
    assert [r.layer for r in results] == [0]
    rows = entry_rows(tmp_path, results[0].key)
    plan = plan_extraction(str(gpt2_dir), tiny_corpus, max_tokens=TOKENS)
    model = AutoModelForCausalLM.from_pretrained(gpt2_dir).eval()
    head = model.lm_head.weight.detach().double()[: plan.vocab_size]
    parts = []
    with torch.no_grad():
        for window in (w for shard in plan.shards for w in shard):
            ids = torch.from_numpy(window.input_ids)[None]
            states = model.transformer(ids, output_hidden_states=True).hidden_states[1][0]
            lens = model.transformer.ln_f(states[window.target_rows() - 1]).double()
            greater, equal = counts((lens @ head.T).numpy(), window.input_ids[window.target_rows()])
            parts.append(
                pd.DataFrame(
                    {"doc_index": window.doc_index, "position": window.positions(), "g": greater, "e": equal}
                )
            )
    expected = pd.concat(parts).sort_values(["doc_index", "position"], kind="stable")
    np.testing.assert_array_equal(rows["n_greater"].to_numpy(), expected["g"].to_numpy())
    np.testing.assert_array_equal(rows["n_equal"].to_numpy(), expected["e"].to_numpy())
    assert (rows["n_equal"] > 1).any()  # exact ties were there to settle


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([1.5], r"^layers: relative depth 1.5 is outside \(0, 1\]; 1.0 is the final layer"),
        ([0.0], r"^layers: relative depth 0.0 is outside \(0, 1\]"),
        (
            [0.5, 1],
            r"^layers mixes layer indices and relative depths \(0.5, 1\); write every depth as a decimal",
        ),
        ([-1], r"^layers: layer index -1 is negative"),
        ([], r"^layers must be 'all', layer indices"),
        ("some", r"^layers must be 'all', layer indices"),
        (["all", 1], r"^layers: 'all' is neither a layer index nor a relative depth \('all' stands alone\)"),
        ([True], r"^layers: True is neither"),
    ],
)
def test_a_bad_layers_setting_is_one_line(layers, message):
    with pytest.raises(InvalidArgumentError, match=message) as err:
        ExtractionSettings(layers=layers)
    assert "\n" not in str(err.value)


def test_indices_and_depths_resolve_at_their_edges():
    assert layer_indices(None, 12, "m") == (11,)
    assert layer_indices("all", 3, "m") == (0, 1, 2)
    assert layer_indices((0.25, 0.5, 0.75, 1.0), 12, "m") == (2, 5, 8, 11)
    # the shallowest layer at least that deep: 0.25 of 6 layers is 1.5 layers, so the second
    assert layer_indices((0.25,), 6, "m") == (1,)
    assert layer_indices((0.1,), 30, "m") == (2,)  # 0.1 * 30 is 3.0000000000000004 in floats
    assert layer_indices((1e-9,), 4, "m") == (0,)
    assert layer_indices((11,), 12, "m") == (11,)  # the last index: the limit
    with pytest.raises(
        InvalidArgumentError, match=r"^layers: m has 12 layers \(indices 0 to 11, .*no layer 12$"
    ):
        layer_indices((12,), 12, "m")  # one over


def test_a_layer_past_the_model_is_one_line_naming_its_layer_count(stacked, tiny_corpus, capsys, tmp_path):
    with pytest.raises(InvalidArgumentError, match=rf"has {N_LAYERS} layers \(indices 0 to 2,.*no layer 3$"):
        plan_layers(str(stacked), tiny_corpus, layers=[3])
    status, out, err = cli(
        capsys,
        "extract",
        "-m",
        stacked,
        "-c",
        "prose",
        "--layers",
        "5",
        "--cache-dir",
        tmp_path,
        "--no-progress",
    )
    assert status != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"has {N_LAYERS} layers" in err, err
    status, _, err = cli(
        capsys, "extract", "-m", stacked, "-c", "prose", "--layers", "0.5", "2", "--cache-dir", tmp_path
    )
    assert status != 0 and len(err.strip().splitlines()) == 1 and "mixes layer indices" in err, err


def test_a_lens_is_in_its_entrys_key_and_read_back(stacked, tiny_corpus):
    plans = plan_layers(str(stacked), tiny_corpus, layers="all", max_tokens=TOKENS)
    final = plan_extraction(str(stacked), tiny_corpus, max_tokens=TOKENS)
    assert plans[-1].key_spec == final.key_spec and "lens" not in final.key_spec
    keys = {CacheEntry(None, p.key_spec).key for p in plans}
    assert len(keys) == N_LAYERS
    spec = plans[0].key_spec
    assert spec["lens"] == {"kind": "logit", "layer": 0, "n_layers": N_LAYERS}
    assert EntrySpec.from_json(spec).to_json() == spec
    for bad, message in [
        ({"kind": "tuned", "layer": 0, "n_layers": 3}, "lens.kind"),
        ({"kind": "logit", "layer": 2, "n_layers": 3}, "not a layer before the last"),
        ({"kind": "logit", "layer": 0}, "expected kind, layer, n_layers"),
    ]:
        with pytest.raises(EntrySpecError, match=message):
            EntrySpec.from_json({**spec, "lens": bad})


def test_the_micro_suite_at_every_layer(tmp_path):
    """Every micro model at every layer on a few hundred tokens of one corpus: the final layer's
    entries equal those extracted without --layers, and every earlier layer is its own entry."""
    ordinary = extract(
        Grid.from_names(["micro"], ["prose"], max_tokens=200), cache_dir=tmp_path / "a", progress=False
    )
    layered = extract(
        Grid.from_names(["micro"], ["prose"], max_tokens=200, layers="all"),
        cache_dir=tmp_path / "b",
        progress=False,
    )
    finals = [r for r in layered if r.layer is None]
    assert [r.key for r in finals] == [r.key for r in ordinary]
    for mine, theirs in zip(finals, ordinary, strict=True):
        pd.testing.assert_frame_equal(
            entry_rows(tmp_path / "b", mine.key), entry_rows(tmp_path / "a", theirs.key)
        )
    earlier = [r for r in layered if r.layer is not None]
    assert earlier and len({r.key for r in layered}) == len(layered)
    assert all(r.n_tokens == 200 and r.manifest["lens"]["kind"] == "logit" for r in earlier)
