"""Training checkpoints of a local model directory load through the revision argument, like hub revisions."""

from __future__ import annotations

import pytest
import torch
from helpers.models import build_checkpointed

from rbplab.catalog.models import ModelLoadError, ModelSpec
from rbplab.extraction.sources import describe_model
from rbplab.extraction.weights import load_model


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory, tiny_tokenizer):
    return build_checkpointed(tmp_path_factory.mktemp("ckpt") / "micro-t", tiny_tokenizer)


def test_a_description_carries_the_resolved_model(checkpointed):
    described = describe_model(ModelSpec(str(checkpointed), revision="step-10"))
    assert (described.model.keyed_name, described.model.keyed_revision) == ("step-10", "step-10")
    assert described.info.tokenizer == str(checkpointed.resolve())  # the base folder's tokenizer


def test_unknown_revision_is_one_line_listing_the_available_ones(checkpointed):
    with pytest.raises(ModelLoadError) as err:
        describe_model(ModelSpec(str(checkpointed), revision="step-20"))
    message = str(err.value)
    assert "\n" not in message and "no revision 'step-20'" in message
    assert "available: step-10, step-40, main" in message


def test_each_checkpoint_loads_its_own_weights(checkpointed):
    early_model, early_tok, early = load_model(ModelSpec(str(checkpointed), revision="step-10"))
    final_model, final_tok, final = load_model(ModelSpec(str(checkpointed), revision="step-40"))
    assert early.revision == "step-10" and final.revision == "step-40"
    assert early.fingerprint != final.fingerprint  # different weights, different cache keys
    assert early.tokenizer_fingerprint == final.tokenizer_fingerprint
    assert early.dtype == "float32"  # bfloat16 on disk, scored in float32 on CPU
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert not torch.allclose(early_model(ids).logits, final_model(ids).logits)
    main = describe_model(ModelSpec(str(checkpointed))).info
    assert main.fingerprint == final.fingerprint  # main and the final step are the same weights


def test_manifest_records_tokens_seen_and_compute_but_the_key_does_not(checkpointed, tiny_corpus, cache_dir):
    from helpers.extraction import extract_run

    from rbplab.extraction.plan import plan_extraction

    early = extract_run(
        ModelSpec(str(checkpointed), revision="step-10"), tiny_corpus, cache_dir=cache_dir, progress=False
    )
    final = extract_run(str(checkpointed), tiny_corpus, cache_dir=cache_dir, progress=False)
    S = early.manifest["model"]["n_nonembedding"]
    assert early.manifest["training"] == {"step": 10, "tokens_per_step": 64, "D": 640, "C": 6.0 * S * 640}
    assert final.manifest["training"]["step"] == 40 and final.manifest["training"]["D"] == 40 * 64
    assert early.key != final.key
    key_spec = plan_extraction(ModelSpec(str(checkpointed), revision="step-10"), tiny_corpus).key_spec
    assert "training" not in key_spec and "D" not in str(sorted(key_spec["model"]))


MICRO_STEPS = [98, 195, 390, 781, 1562]  # scripts/train_micro.py --checkpoints 4 over 1,562 steps


@pytest.mark.parametrize("model", ["micro-1-25K", "micro-2-85K"])
def test_bundled_micro_checkpoints_load_by_revision(model):
    from rbplab.catalog import registry
    from rbplab.extraction.plan import plan_extraction
    from rbplab.store.cache.layout import cache_key

    schedule = registry.schedule_of(model)
    assert list(schedule.steps) == MICRO_STEPS and schedule.tokens_per_step == 2048
    assert registry.select_revisions(model, "log:5") == [f"step-{s}" for s in MICRO_STEPS]
    early, _, early_info = load_model(ModelSpec(model, revision="step-98"))
    final, _, final_info = load_model(ModelSpec(model))
    assert early_info.dtype == final_info.dtype == "float32"  # stored in bfloat16, scored in float32
    assert early_info.fingerprint != final_info.fingerprint
    ids = torch.tensor([[5, 17, 300, 9]])
    with torch.inference_mode():
        assert not torch.allclose(early(ids).logits, final(ids).logits)
    # The final step by name is the model itself: the same cache entry as no revision at all.
    last = plan_extraction(ModelSpec(model, revision="step-1562"), "humaneval", max_tokens=100)
    assert cache_key(last.key_spec) == cache_key(plan_extraction(model, "humaneval", max_tokens=100).key_spec)


def test_bundled_checkpoints_keep_the_repository_lean():
    from rbplab.store.paths import data_dir

    models = data_dir() / "models"
    checkpoints = list(models.glob("micro-*/checkpoints/step-*/*.safetensors"))
    assert len(checkpoints) == 6 * 4  # bfloat16 weights; no tokenizer copies beside them
    assert not list(models.glob("micro-*/checkpoints/step-*/tokenizer*"))
    weights = checkpoints + list(models.glob("micro-*/model.safetensors"))
    # The round-1 suite (float32 finals, no checkpoints) took 37.4 MB; at most 60 MB may be added.
    assert sum(f.stat().st_size for f in weights) <= 37.4e6 + 60e6
