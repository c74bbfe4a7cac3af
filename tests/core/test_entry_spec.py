"""The typed entry spec: its JSON is the layout keys were always computed from (a golden file of a
micro-suite entry), it reads back field by field, and it pins every setting an entry was made with."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rbplab.core.settings import EntrySpec, EntrySpecError
from rbplab.store.cache.layout import cache_key
from rbplab.store.paths import data_dir

GOLDEN = Path(__file__).parent / "golden" / "micro-1-25K-humaneval-max2000.spec.json"
# The key test_cache_keys.py records for this run (computed by rbplab at commit 53e8435).
GOLDEN_KEY = "447a4319e9d64d56032b9a6444cf9c20afd4e4e23c6730cf45ff4713b6ef6aaf"


def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def test_golden_spec_is_what_planning_builds_and_what_the_key_hashes(monkeypatch):
    from rbplab.extraction.plan import plan_extraction

    monkeypatch.chdir(data_dir().parent)
    plan = plan_extraction("micro-1-25K", "humaneval", max_tokens=2000)
    assert isinstance(plan.spec, EntrySpec)
    assert plan.key_spec == golden()
    assert cache_key(golden()) == GOLDEN_KEY


def test_json_round_trip_and_typed_fields():
    spec = EntrySpec.from_json(golden())
    assert spec.to_json() == golden()
    assert spec.windows.shard_tokens == 65536 and spec.vocab.size == 4096 and spec.max_tokens == 2000
    assert spec.windows.bos.policy == "auto" and spec.model.name == "micro-1-25K"


def test_settings_are_pinned_by_the_spec_without_trying_policies():
    settings = EntrySpec.from_json(golden()).settings()
    assert settings == {
        "context_length": 256,
        "stride": None,
        "bos": "auto",
        "max_tokens": 2000,
        "include_padded_vocab": False,
        "dtype": "float32",
        "shard_tokens": 65536,
    }
    never = golden()
    never["windows"]["bos"] = {"use": False, "token_id": None, "rule": "never: requested"}
    assert EntrySpec.from_json(never).settings()["bos"] == "never"


def test_hub_corpus_identity_round_trips():
    data = golden()
    data["corpus"] = {
        "name": "wikipedia",
        "dataset": "wikimedia/wikipedia",
        "config": "20231101.en",
        "split": "train",
        "revision": "b04c8d1ceb2f5cd4588862100d08de323dccfbaa",
        "max_documents": None,
        "text_scheme": 1,
    }
    spec = EntrySpec.from_json(data)
    assert spec.corpus.hub is not None and spec.to_json() == data


def test_trust_remote_code_is_recorded_only_when_set():
    data = golden()
    data["model"]["trust_remote_code"] = True
    assert EntrySpec.from_json(data).to_json() == data
    data["model"]["trust_remote_code"] = False
    with pytest.raises(EntrySpecError, match="recorded only when true"):
        EntrySpec.from_json(data)


def _with(path: tuple[str, ...], value) -> dict:
    data = copy.deepcopy(golden())
    target = data
    for part in path[:-1]:
        target = target[part]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DROP = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("windows", "shard_tokens"), "65536", r"windows.shard_tokens is '65536', not int"),
        (("windows", "context_length"), True, r"windows.context_length is True, not int"),
        (("vocab", "size"), _DROP, r"no vocab.size"),
        (("windows", "bos", "rule"), "sometimes: why not", "does not start with a BOS policy"),
        (("model", "weights"), "x", r"model has unknown keys \['weights'\]"),
        (("corpus", "content_hash"), _DROP, "entry spec field corpus has keys"),
        (("softcap",), "30", "softcap is '30', not a number"),
        (("extra",), 1, "entry spec has keys"),
    ],
)
def test_bad_specs_name_the_field(path, value, message):
    data = _with(path, value)
    with pytest.raises(EntrySpecError, match=message) as err:
        EntrySpec.from_json(data)
    assert "\n" not in str(err.value)
    assert EntrySpec.parse(data) is None


def test_manifest_fields_are_the_specs_values():
    spec = EntrySpec.from_json(golden())
    fields = spec.manifest_fields()
    assert fields[("vocab_size",)] == 4096
    assert fields[("settings", "bos_decision")] == golden()["windows"]["bos"]
    assert fields[("model", "tokenizer_fingerprint")] == golden()["tokenizer"]
    assert fields[("corpus", "n_documents")] == 164
