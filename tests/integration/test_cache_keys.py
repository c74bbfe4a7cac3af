"""Cache keys are the identity of every cached result: a cache filled by an earlier version of
rbplab must still be a hit. These keys were computed by rbplab at commit 53e8435 (before the
package was reorganised into subpackages), from the bundled corpora and the micro-suite as retrained
with checkpoints (its weights changed, so its keys did; the code that derives them did not)."""

from __future__ import annotations

import pytest

from rbplab.extraction import plan_extraction
from rbplab.store import cache_key
from rbplab.store.paths import data_dir

RECORDED = [
    ("micro-1-25K", "humaneval", {}, "be631006eac2ada059768c11280bb954123e2396e32590809bad4968fd82695a"),
    (
        "micro-1-25K",
        "humaneval",
        {"max_tokens": 2000},
        "447a4319e9d64d56032b9a6444cf9c20afd4e4e23c6730cf45ff4713b6ef6aaf",
    ),
    (
        "micro-2-85K",
        "prose",
        {"context_length": 128, "stride": 64, "max_tokens": 5000},
        "1b42175dd15198263a5a4fdfbcd323e6c84248bdd6a1e2883c19b1046ff36c55",
    ),
    (
        "micro-6-2.7M",
        "wikipedia",
        {"bos": "never", "max_tokens": 3000},
        "c500daa70618f88fccd62b271c371183141cbb9618b71c634d612ad6bd8514eb",
    ),
    (
        "micro-3-200K",
        "legal-standin",
        {"include_padded_vocab": True, "dtype": "float32"},
        "82b71be00b00b086814bee51c867e89ce59162161d30469011fde5252155098b",
    ),
    # The same run named by path instead of registry name keys the same.
    (
        "data/models/micro-1-25K",
        "humaneval",
        {"max_tokens": 2000},
        "447a4319e9d64d56032b9a6444cf9c20afd4e4e23c6730cf45ff4713b6ef6aaf",
    ),
]


@pytest.mark.parametrize(("model", "corpus", "settings", "key"), RECORDED)
def test_cache_keys_are_unchanged(model, corpus, settings, key, monkeypatch):
    monkeypatch.chdir(data_dir().parent)  # "data/models/..." is a path relative to the checkout
    assert cache_key(plan_extraction(model, corpus, **settings).key_spec) == key


def test_settings_object_and_keywords_key_the_same():
    from rbplab.core import ExtractionSettings

    settings = ExtractionSettings(context_length=128, stride=64, max_tokens=5000)
    assert cache_key(plan_extraction("micro-2-85K", "prose", settings).key_spec) == RECORDED[2][3]


def test_checkpoint_keys_are_unchanged():
    # Recorded when the micro-suite gained checkpoints (revision keyed as given; the final step
    # named by revision keys as the model itself).
    from rbplab.extraction.sources import ModelSpec

    early = plan_extraction(ModelSpec("micro-2-85K", revision="step-98"), "prose", max_tokens=2000)
    assert cache_key(early.key_spec) == "098491440529ec4a68c40affb014fac4409d03ef1544f1466f4a40080e5c2a02"
    final = plan_extraction(ModelSpec("micro-2-85K", revision="step-1562"), "prose", max_tokens=2000)
    assert cache_key(final.key_spec) == "840e4cdfdca8b76603b91ad41809bf2b43d74b707fa15e5b2d1b7ff50ef738ea"
