"""Cache keys are the identity of every cached result: a cache filled by an earlier version of
rbplab must still be a hit. These keys were computed by rbplab at commit 53e8435 (before the
package was reorganised into subpackages), from the bundled micro-suite and corpora."""

from __future__ import annotations

import pytest

from rbplab.extraction import plan_extraction
from rbplab.store import cache_key
from rbplab.store.paths import data_dir

RECORDED = [
    ("micro-1-25K", "humaneval", {}, "df3e69336f97316c6253a386f3f1bdc1dbc2b161cf5c0eb4906dd0796ff361f0"),
    (
        "micro-1-25K",
        "humaneval",
        {"max_tokens": 2000},
        "1b3c0609100a5ab23a8ec74301652bb5e46b2dfb087d29fcea35b7f6b8d545f0",
    ),
    (
        "micro-2-85K",
        "prose",
        {"context_length": 128, "stride": 64, "max_tokens": 5000},
        "f653fbe55d775db23135b072bff4145dac57caa176f6a2a0747835d0246dd31a",
    ),
    (
        "micro-6-2.7M",
        "wikipedia",
        {"bos": "never", "max_tokens": 3000},
        "2fbcaa84b4c4bc5b0b4a7f2533c5c9150b03a8621581a270bffe7358ef823583",
    ),
    (
        "micro-3-200K",
        "legal-standin",
        {"include_padded_vocab": True, "dtype": "float32"},
        "cbade3edd203e65f3f5e0140d197a025dcf85f7747814065f74a2833a8656ba4",
    ),
    # The same run named by path instead of registry name keys the same.
    (
        "data/models/micro-1-25K",
        "humaneval",
        {"max_tokens": 2000},
        "1b3c0609100a5ab23a8ec74301652bb5e46b2dfb087d29fcea35b7f6b8d545f0",
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
