"""rbplab.catalog.models: a model as named (`ModelSpec`), resolved once (`resolve` -> `ResolvedModel`):
registry names, paths, GGUF files, hub ids and the checkpoints of a local model directory."""

from __future__ import annotations

import pytest
from helpers.models import build_checkpointed

from rbplab.catalog.models import ModelSpec, ResolvedModel, checkpoint_directory, resolve


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory, tiny_tokenizer):
    return build_checkpointed(tmp_path_factory.mktemp("ckpt") / "micro-t", tiny_tokenizer)


def test_revisions_resolve_to_checkpoint_folders(checkpointed):
    assert checkpoint_directory(checkpointed, None) == checkpointed
    assert checkpoint_directory(checkpointed, "main") == checkpointed
    assert checkpoint_directory(checkpointed, "step-40") == checkpointed  # the final step is the model itself
    assert checkpoint_directory(checkpointed, "step-10") == checkpointed / "checkpoints" / "step-10"
    model = resolve(ModelSpec(str(checkpointed), revision="step-10"))
    assert model.location == str(checkpointed.resolve() / "checkpoints" / "step-10")
    assert model.tokenizer_location == str(checkpointed.resolve())  # checkpoints share the tokenizer


def test_a_resolved_model_carries_its_label_and_keyed_revision(checkpointed):
    step = resolve(ModelSpec(str(checkpointed), revision="step-10"))
    assert (step.keyed_name, step.keyed_revision) == ("step-10", "step-10")  # its folder; keyed by revision
    # the final step and "main" are the model directory itself: no revision in the key
    for revision in ("step-40", "main", None):
        final = resolve(ModelSpec(str(checkpointed), revision=revision))
        assert (final.keyed_name, final.keyed_revision) == ("micro-t", None), revision
    hub = resolve(ModelSpec("EleutherAI/pythia-70m", revision="step1000"))
    assert (hub.keyed_name, hub.keyed_revision, hub.local) == ("pythia-70m", "step1000", False)  # registered


def test_a_model_is_resolved_with_one_read_of_the_registry(checkpointed, monkeypatch):
    from rbplab.catalog import registry

    reads = []
    real = registry.families
    monkeypatch.setattr(registry, "families", lambda *a, **k: reads.append(1) or real(*a, **k))
    for name, label in [
        ("someorg/unregistered-model", "someorg/unregistered-model"),  # a hub id the registry lacks
        ("pythia-70m", "pythia-70m"),  # a registered short name
        (str(checkpointed), "micro-t"),  # a local directory
    ]:
        reads.clear()
        assert resolve(ModelSpec(name)).keyed_name == label
        assert len(reads) == 1, name
    reads.clear()
    with pytest.raises(registry.UnknownModelError, match="Known families"):
        resolve(ModelSpec("no-such-model"))  # the error's lists read it again, and only then


def test_only_a_path_loads_without_a_readable_registry(checkpointed, monkeypatch, tmp_path):
    from rbplab.catalog import registry

    monkeypatch.setattr(registry, "registry_path", lambda: tmp_path / "absent.csv")
    assert resolve(ModelSpec(str(checkpointed))).keyed_name == "micro-t"
    with pytest.raises(FileNotFoundError, match="model registry not found"):
        resolve(ModelSpec("someorg/unregistered-model"))


def test_a_resolved_model_carries_the_request_and_no_placement(checkpointed, tmp_path):
    asked = ModelSpec(str(checkpointed), revision="step-10", tokenizer=str(tmp_path), trust_remote_code=True)
    model = resolve(asked)
    assert (model.model, model.revision, model.tokenizer, model.trust_remote_code) == (
        str(checkpointed),
        "step-10",
        str(tmp_path),
        True,
    )
    assert resolve(str(checkpointed)) == resolve(ModelSpec(str(checkpointed)))  # a name is a bare spec
    fields = set(ResolvedModel.__dataclass_fields__) | set(ModelSpec.__dataclass_fields__)
    assert not fields & {"dtype", "device", "device_map"}  # how a model runs is ExtractionSettings


def test_a_study_member_is_resolved_once_and_moves_between_revisions_without_the_registry(
    checkpointed, monkeypatch
):
    from rbplab.catalog import registry
    from rbplab.catalog.models import resolve_family, resolve_member

    (member,) = [m for m in resolve_family("micro") if m.model == "micro-1-25K"]
    assert (member.family, member.keyed_name, member.revision) == ("micro", "micro-1-25K", None)
    row = registry.lookup_model("micro-1-25K")  # the registry's own facts, read here independently
    assert (member.S, member.max_context) == (float(row["S"]), int(row["max_context"]))
    reads = []
    real = registry.families
    monkeypatch.setattr(registry, "families", lambda *a, **k: reads.append(1) or real(*a, **k))
    local = resolve_member(str(checkpointed))
    assert reads == [1] and (local.family, local.model, local.S) == ("", str(checkpointed), None)
    direct = resolve(ModelSpec(str(checkpointed), revision="step-10"))  # a checkpoint named as such
    reads.clear()
    step = local.at("step-10")
    assert (step.location, step.tokenizer_location, step.keyed_name, step.keyed_revision) == (
        direct.location,
        direct.tokenizer_location,
        direct.keyed_name,
        direct.keyed_revision,
    )
    assert step.location == str(checkpointed.resolve() / "checkpoints" / "step-10")
    assert (step.model, step.label) == (str(checkpointed), f"{checkpointed}@step-10")
    final = step.at(None)
    assert (final.location, final.keyed_name, final.keyed_revision) == (
        str(checkpointed.resolve()),
        "micro-t",
        None,
    )
    from rbplab.extraction.sources import as_resolved

    assert as_resolved(step) is step  # planning takes the member as it is
    assert reads == []  # neither a revision nor planning's model argument reads the registry again


def test_a_directory_holding_one_gguf_file_moves_to_its_checkpoints(tmp_path):
    """A GGUF file found in a directory was not asked for: the directory's checkpoints stay
    reachable through `at`, keyed as `resolve` keys them."""
    from rbplab.catalog.models import resolve_member

    folder = tmp_path / "quantised"
    (folder / "checkpoints" / "step-10").mkdir(parents=True)
    (folder / "model.gguf").write_bytes(b"GGUF")
    (folder / "checkpoints" / "step-10" / "config.json").write_text("{}")
    member = resolve_member(str(folder))
    assert member.gguf_file == "model.gguf"
    step = member.at("step-10")
    direct = resolve(ModelSpec(str(folder), revision="step-10"))
    assert step.location == str(folder.resolve() / "checkpoints" / "step-10") == direct.location
    assert (step.gguf_file, step.keyed_name, step.keyed_revision) == (None, "step-10", "step-10")
    assert (direct.keyed_name, direct.keyed_revision) == ("step-10", "step-10")
