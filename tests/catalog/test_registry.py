"""Model registry (rbplab/catalog/families.csv) and its generator."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from rbplab.catalog import registry
from rbplab.catalog.registry import (
    COLUMNS,
    UnknownFamilyError,
    UnknownModelError,
    families,
    family_models,
    lookup_model,
    model_location,
)

REPO = Path(__file__).resolve().parents[2]
PAPER_FAMILIES = {
    "pythia": ["14m", "31m", "70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b"],
    "gpt2": ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"],
    "opt": ["125m", "350m", "1.3b", "2.7b", "6.7b", "13b"],
    "qwen2.5": ["0.5b", "1.5b", "3b", "7b", "14b"],
}


def _build_registry_module():
    spec = importlib.util.spec_from_file_location("build_registry", REPO / "scripts" / "build_registry.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_registry_holds_the_paper_families():
    table = families()
    assert tuple(table.columns[: len(COLUMNS)]) == COLUMNS
    for family, members in PAPER_FAMILIES.items():
        rows = family_models(family)
        assert len(rows) == len(members)
        assert all(row.endswith(m) for row, m in zip(rows["model"], members, strict=True))
        assert rows["S"].is_monotonic_increasing
        assert (rows["head_rows"] >= rows["vocab_size"]).all()
    assert table.set_index("model").loc[["gpt2", "pythia-160m"], "S"].tolist() == [85_056_000, 85_056_000]
    assert table.set_index("model").loc["qwen2.5-0.5b", "tied"]
    assert not table.set_index("model").loc["pythia-12b", "tied"]


def test_registry_csv_is_generated_from_configs():
    """The committed CSV equals what scripts/build_registry.py computes now (S: rbplab.catalog.registry)."""
    built = _build_registry_module().build()
    committed = families()
    key = ["family", "model"]
    merged = built.merge(committed, on=key, suffixes=("_built", "_csv"))
    assert len(merged) == len(built) == len(committed)
    for column in ("source", "S", "n_params", "vocab_size", "head_rows", "tied"):
        assert (merged[f"{column}_built"] == merged[f"{column}_csv"]).all(), column


def test_lookup_and_resolve():
    assert model_location("pythia-160m") == "EleutherAI/pythia-160m"
    assert model_location("EleutherAI/Pythia-160m") == "EleutherAI/pythia-160m"  # case-insensitive source
    assert lookup_model("gpt2")["S"] == 85_056_000
    assert lookup_model("not-a-model") is None
    assert model_location("someorg/some-model") == "someorg/some-model"  # unregistered hub id passes through


def test_unknown_names_list_the_known_ones():
    with pytest.raises(UnknownModelError, match="pythia-160m") as err:
        model_location("pythia-9000")
    assert "pythia-9000" in str(err.value)
    with pytest.raises(UnknownFamilyError, match="pythia") as err:
        family_models("llama")
    assert "llama" in str(err.value)


def test_existing_local_path_passes_through(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert model_location(str(tmp_path)) == str(tmp_path)


def _tiny_neox_config() -> dict:
    return {
        "model_type": "gpt_neox",
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "vocab_size": 50,
        "max_position_embeddings": 128,
    }


@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    """A data/ folder with one in-repo micro model, selected through $RBPLAB_DATA."""
    data = tmp_path / "data"
    model_dir = data / "models" / "micro-a"
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(_tiny_neox_config()))
    (data / "models" / "micro-notes").mkdir()  # no config.json: ignored
    monkeypatch.setenv("RBPLAB_DATA", str(data))
    return data


def test_build_registry_picks_up_local_micro_models(fake_data):
    rows = _build_registry_module().local_models(fake_data)
    assert [r["model"] for r in rows] == ["micro-a"]
    row = rows[0]
    assert row["family"] == "micro" and row["source"] == "data/models/micro-a"
    assert row["vocab_size"] == 50  # no tokenizer shipped: falls back to the config
    assert row["max_context"] == 128
    from rbplab.catalog.registry import nonembedding_params

    assert row["S"] == nonembedding_params(_tiny_neox_config())


def test_local_models_in_csv_resolve_to_absolute_paths(fake_data):
    module = _build_registry_module()
    assert module.main(["--output", str(fake_data / "families.csv")]) == 0
    assert module.main(["--output", str(fake_data / "families.csv"), "--check"]) == 0
    table = families()
    assert "micro" in set(table["family"])
    resolved = model_location("micro-a")
    assert Path(resolved) == fake_data / "models" / "micro-a"
    assert lookup_model(resolved)["model"] == "micro-a"  # a manifest's absolute path finds its S
    assert family_models("MICRO")["model"].tolist() == ["micro-a"]


def test_missing_registry_is_a_clear_error(tmp_path, monkeypatch):
    # The registry is package data; a data folder without a families.csv of its own uses it.
    monkeypatch.setenv("RBPLAB_DATA", str(tmp_path))
    assert registry.registry_path() != tmp_path / "families.csv" and len(families()) > 0
    monkeypatch.setattr(registry, "registry_path", lambda: tmp_path / "missing" / "families.csv")
    with pytest.raises(FileNotFoundError, match="build_registry"):
        families()
    bad = tmp_path / "families.csv"
    pd.DataFrame({"family": ["x"], "model": ["y"]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="lacks columns"):
        registry.families(bad)


def test_the_registry_is_parsed_once_and_again_only_when_it_changes(tmp_path, monkeypatch):
    csv = tmp_path / "families.csv"
    csv.write_bytes(registry.registry_path().read_bytes())
    monkeypatch.setattr(registry, "registry_path", lambda: csv)
    parses = []
    read_csv = pd.read_csv
    monkeypatch.setattr(registry.pd, "read_csv", lambda *a, **k: parses.append(a) or read_csv(*a, **k))
    assert lookup_model("gpt2")["S"] == 85_056_000
    assert model_location("pythia-160m") == "EleutherAI/pythia-160m"
    assert family_models("opt")["model"].str.startswith("opt").all()
    table = families()
    table.loc[:, "S"] = 0  # a caller's copy: changing it changes nothing for the next one
    assert lookup_model("gpt2")["S"] == 85_056_000
    assert len(parses) == 1
    lines = csv.read_text().splitlines()
    gpt2 = next(i for i, line in enumerate(lines) if line.split(",")[1] == "gpt2")
    lines[gpt2] = lines[gpt2].replace(",85056000,", ",850560000,")
    csv.write_text("\n".join(lines) + "\n")
    assert lookup_model("gpt2")["S"] == 850_560_000  # a rewritten registry is read again
    assert len(parses) == 2
