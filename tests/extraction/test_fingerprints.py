"""rbplab.extraction.fingerprints: weight and tokenizer identities as `describe_model` reports them."""

from __future__ import annotations

import shutil

import torch

from rbplab.extraction.sources import describe_model


def test_fingerprint_follows_the_weights(gpt2_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    copy = tmp_path / "copy"
    shutil.copytree(gpt2_dir, copy)
    original = describe_model(str(gpt2_dir)).info
    assert describe_model(str(copy)).info.fingerprint == original.fingerprint  # path-independent
    model = AutoModelForCausalLM.from_pretrained(copy)
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    model.save_pretrained(copy)
    changed = describe_model(str(copy)).info
    assert changed.fingerprint != original.fingerprint
    assert changed.tokenizer_fingerprint == original.tokenizer_fingerprint
