"""A plan record is found by its request and then checked against its entry's spec: two guards, each
tested alone. The request keys every setting that changes the numbers (stride among them; only
batch_tokens is left out), and the spec pins the BOS policy it was planned with."""

from __future__ import annotations

import json
from pathlib import Path

from rbplab.catalog.models import ModelSpec, resolve
from rbplab.core import ExtractionSettings
from rbplab.core.settings import EntrySpec
from rbplab.extraction.fingerprints import request

GOLDEN = Path(__file__).parents[1] / "core" / "golden" / "micro-1-25K-humaneval-max2000.spec.json"


def test_a_plan_request_keys_the_stride_and_not_the_batch_size(gpt2_dir, tiny_corpus):
    model = resolve(ModelSpec(str(gpt2_dir)))
    base = ExtractionSettings(device="cpu", context_length=32)
    asked = request(model, tiny_corpus, base)
    assert asked is not None
    assert request(model, tiny_corpus, base.with_changes(stride=8)) != asked
    assert request(model, tiny_corpus, base.with_changes(batch_tokens=512)) == asked


def test_an_entry_spec_pins_its_bos_policy():
    spec = EntrySpec.from_json(json.loads(GOLDEN.read_text()))  # planned with bos "auto"
    same = ExtractionSettings(max_tokens=2000, context_length=256, bos="auto")
    assert spec.pins(same, dtype="float32", shard_tokens=65536)
    for other in ("always", "never"):
        assert not spec.pins(same.with_changes(bos=other), dtype="float32", shard_tokens=65536)
