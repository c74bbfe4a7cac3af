"""Hub models through the hub stand-in (offline): revisions pinned to commits, missing revisions,
the BOS rule of each family, an offloaded output head."""

from __future__ import annotations

import pytest
import torch
from helpers.hub import OPT, PYTHIA, QWEN, push_new_pythia_main

from rbplab.catalog.models import ModelLoadError, ModelSpec
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.plan import plan_extraction
from rbplab.extraction.sources import describe_model
from rbplab.extraction.weights import check_head, load_model
from rbplab.store.cache.layout import cache_key
from rbplab.store.hub import HubUnreachableError


def test_revision_resolves_to_its_commit_and_every_load_uses_it(hub, monkeypatch):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    seen = []
    for auto in (AutoConfig, AutoTokenizer, AutoModelForCausalLM):
        real = auto.from_pretrained.__func__

        def spy(cls, name, *args, _real=real, **kwargs):
            seen.append((cls.__name__, kwargs.get("revision")))
            return _real(cls, name, *args, **kwargs)

        monkeypatch.setattr(auto, "from_pretrained", classmethod(spy))
    commit = hub.commit(PYTHIA, "step1000")
    model, _, info = load_model(ModelSpec(PYTHIA, revision="step1000"))
    assert info.fingerprint == f"hub:{commit}" and info.revision == "step1000"
    assert {name for name, _ in seen} == {"AutoConfig", "AutoTokenizer", "AutoModelForCausalLM"}
    assert {revision for _, revision in seen} == {commit}  # the branch name is never resolved again
    assert describe_model(PYTHIA).info.fingerprint == f"hub:{hub.commit(PYTHIA, 'main')}"


def test_moved_branch_gives_a_new_key(hub, tiny_corpus):
    before = cache_key(plan_extraction(PYTHIA, tiny_corpus).key_spec)
    assert cache_key(plan_extraction(PYTHIA, tiny_corpus).key_spec) == before
    new = push_new_pythia_main(hub)
    plan = plan_extraction(PYTHIA, tiny_corpus)
    assert plan.key_spec["model"]["fingerprint"] == f"hub:{new}"
    assert cache_key(plan.key_spec) != before


def test_uncached_revision_offline_is_the_offline_error_listing_cached_branches(hub):
    # "has no revision" only when the hub says so: tests/extraction/test_hub_revisions.py
    with pytest.raises(HubUnreachableError) as err:
        describe_model(ModelSpec(PYTHIA, revision="step143000"))
    message = str(err.value)
    assert "\n" not in message and message.startswith("the hub cannot be reached (offline?")
    assert f"{PYTHIA}@step143000" in message and "cached here: main, step1000" in message


def test_uncached_hub_model_is_an_error_not_an_unpinned_key(hub, tiny_corpus):
    with pytest.raises(HubUnreachableError, match="does not hold EleutherAI/pythia-70m@main; run once"):
        plan_extraction("EleutherAI/pythia-70m", tiny_corpus)  # not in the stand-in, hub offline


@pytest.mark.parametrize(
    ("repo", "token", "rule"),
    [
        (PYTHIA, "<|endoftext|>", "auto: tokenizer's bos_token"),
        (OPT, "</s>", "auto: tokenizer prepends this token to every input"),
        (QWEN, "<|endoftext|>", "auto: no bos_token: the model config's bos_token_id"),  # not eos <|im_end|>
    ],
)
def test_bos_rule_of_each_family(hub, tiny_corpus, repo, token, rule):
    plan = plan_extraction(repo, tiny_corpus)
    tokenizer = plan.described.tokenizer
    assert plan.bos.use and plan.bos.token_id == tokenizer.convert_tokens_to_ids(token)
    assert plan.bos.rule == rule
    assert plan.key_spec["windows"]["bos"]["rule"] == rule  # recorded


def test_bos_falls_back_to_eos_without_config_bos(hub):
    from rbplab.extraction.windows import resolve_bos

    described = describe_model(QWEN)
    described.config.bos_token_id = None
    decision = resolve_bos(described.tokenizer, "auto", described.config)
    assert decision.token_id == described.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert decision.rule == "auto: no bos_token: eos_token marks document start"
    described.config.bos_token_id = 10**6  # outside the vocabulary: not a token, ignored
    assert resolve_bos(described.tokenizer, "auto", described.config).rule == decision.rule


def test_padded_qwen_head_ranks_over_the_tokenizer_vocabulary(hub):
    info = describe_model(QWEN).info
    assert info.head_rows > info.vocab_size and info.bos_token_id is None


def test_offloaded_head_is_a_one_line_error(hub):
    model, _, info = load_model(PYTHIA)
    model.get_output_embeddings().to(torch.device("meta"))  # what device_map offloading leaves
    with pytest.raises(ModelLoadError, match="offloaded the output head") as err:
        check_head(model, info)
    assert "\n" not in str(err.value)


def test_offloaded_head_through_device_map(hub, monkeypatch):
    """load_model with a device_map that offloads the head gives the one-line error, not a traceback."""
    from transformers import AutoModelForCausalLM

    real = AutoModelForCausalLM.from_pretrained.__func__

    def offloading(cls, name, *args, **kwargs):
        kwargs.pop("device_map", None)
        loaded = real(cls, name, *args, **kwargs)  # (model, loading info) when rbplab asks for both
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.get_output_embeddings().to(torch.device("meta"))
        return loaded

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(offloading))
    with pytest.raises(ModelLoadError, match="device_map='auto' offloaded the output head"):
        load_model(PYTHIA, ExtractionSettings(device_map="auto"))
