"""Windows and BOS policy: every token scored once, context guarantees, budgets, special tokens."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, processors
from transformers import PreTrainedTokenizerFast

from rbplab.catalog.corpora import CorpusError
from rbplab.extraction.windows import BosDecision, WindowPolicy, make_windows, resolve_bos, tokenize_documents

BOS = BosDecision(True, 999, "test")
NO_BOS = BosDecision(False, None, "test")


def doc(n: int, start: int = 10) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


def scored_positions(windows, doc_index=0):
    return np.concatenate([w.positions() for w in windows if w.doc_index == doc_index])


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 30, 64])
@pytest.mark.parametrize("bos", [BOS, NO_BOS])
@pytest.mark.parametrize("stride", [None, 1, 3, 7])
def test_every_token_scored_exactly_once(n, bos, stride):
    policy = WindowPolicy(context_length=8, stride=stride)
    windows = make_windows([doc(n)], policy, bos)
    first = 0 if bos.use else 1
    if n - first <= 0:
        assert windows == []
        return
    positions = scored_positions(windows)
    assert positions.tolist() == list(range(first, n))
    for w in windows:
        assert len(w.input_ids) <= 8
        targets = w.input_ids[w.target_rows()]
        assert targets.tolist() == (w.positions() + 10).tolist()  # position -> token of the document
        if bos.use and w.offset == -1:
            assert w.input_ids[0] == 999


def test_non_overlapping_windows_share_one_context_token():
    windows = make_windows([doc(20)], WindowPolicy(8), NO_BOS)
    assert [w.first for w in windows] == [1, 1, 1]
    assert [int(w.input_ids[0]) for w in windows] == [10, 17, 24]


def test_strided_windows_give_at_least_context_minus_stride():
    C, s = 8, 3
    windows = make_windows([doc(40)], WindowPolicy(C, stride=s), BOS)
    for w in windows[1:]:
        assert w.first >= C - s  # every scored target sees >= C - s tokens before it in the window


def test_documents_are_separate_and_in_order():
    windows = make_windows([doc(5), doc(3, 100), doc(12, 200)], WindowPolicy(4), BOS)
    assert sorted({w.doc_index for w in windows}) == [0, 1, 2]
    assert [w.doc_index for w in windows] == sorted(w.doc_index for w in windows)
    for w in windows:  # no window mixes documents
        body = w.input_ids[w.input_ids != 999]
        assert np.all(np.diff(body) == 1)


def test_max_tokens_is_exact_and_takes_the_first_tokens():
    docs = [doc(10), doc(10, 100), doc(10, 200)]
    all_windows = make_windows(docs, WindowPolicy(6), BOS)
    cut = make_windows(docs, WindowPolicy(6), BOS, max_tokens=14)
    assert sum(w.n_scored for w in cut) == 14
    full = [(w.doc_index, p) for w in all_windows for p in w.positions()]
    kept = [(w.doc_index, p) for w in cut for p in w.positions()]
    assert kept == full[:14]
    with pytest.raises(ValueError, match="max_tokens"):
        make_windows(docs, WindowPolicy(6), BOS, max_tokens=0)


def test_special_targets_are_not_scored():
    tokens = np.array([10, 11, 0, 12, 13])  # 0 is a special token inside the text
    windows = make_windows([tokens], WindowPolicy(8), BOS, special_ids=[0])
    assert scored_positions(windows).tolist() == [0, 1, 3, 4]


def test_policy_validation():
    with pytest.raises(ValueError, match="context_length"):
        WindowPolicy(1)
    with pytest.raises(ValueError, match="stride"):
        WindowPolicy(8, stride=8)
    with pytest.raises(ValueError, match="stride"):
        WindowPolicy(8, stride=0)
    with pytest.raises(ValueError, match="bos"):
        WindowPolicy(8, bos="sometimes")


def _variant(tokenizer_dir, **special) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_dir / "tokenizer.json"), **special)


def test_bos_auto_per_tokenizer(tiny_tokenizer, tiny_tokenizer_dir):
    # GPT-2 / Pythia style: bos_token = <|endoftext|>, not added by the tokenizer.
    gpt2_like = resolve_bos(tiny_tokenizer, "auto")
    assert gpt2_like.use and gpt2_like.token_id == tiny_tokenizer.bos_token_id
    assert "bos_token" in gpt2_like.rule

    # Qwen2.5 style: no bos_token, eos_token separates documents.
    qwen_like = resolve_bos(_variant(tiny_tokenizer_dir, eos_token="<|endoftext|>"), "auto")
    assert qwen_like.use and "eos_token" in qwen_like.rule

    # Llama / OPT style: the tokenizer prepends its own token.
    backend = Tokenizer.from_file(str(tiny_tokenizer_dir / "tokenizer.json"))
    backend.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    llama_like = resolve_bos(PreTrainedTokenizerFast(tokenizer_object=backend), "auto")
    assert llama_like.use and llama_like.token_id == 0 and "prepends" in llama_like.rule

    # No special tokens at all.
    bare = _variant(tiny_tokenizer_dir)
    assert not resolve_bos(bare, "auto").use
    with pytest.raises(ValueError, match="no BOS"):
        resolve_bos(bare, "always")
    assert not resolve_bos(tiny_tokenizer, "never").use


def test_tokenize_documents_treats_special_strings_as_text(tiny_tokenizer):
    texts = ["plain words", "with <|endoftext|> inside"]
    ids = list(tokenize_documents(tiny_tokenizer, texts))
    assert len(ids) == 2
    assert tiny_tokenizer.eos_token_id not in ids[1].tolist()
    assert tiny_tokenizer.decode(ids[1]) == texts[1]


class Panic(BaseException):
    """What a Rust tokenizer's panic reaches Python as (pyo3's PanicException is no Exception)."""


def test_a_tokenizer_failure_is_one_line_naming_the_document(tiny_tokenizer):
    def failing(texts, **kwargs):
        if any("poison" in t for t in texts):
            raise Panic("called `Option::unwrap()` on a `None` value")
        return tiny_tokenizer(texts, **kwargs)

    texts = ["fine words"] * 70 + ["poison"] + ["fine"]
    ids = tokenize_documents(failing, texts, names=[f"doc-{i}" for i in range(len(texts))])
    assert len([next(ids) for _ in range(64)]) == 64  # the first batch holds no poison
    with pytest.raises(CorpusError) as err:
        next(ids)
    assert str(err.value) == (
        "the tokenizer failed on document 'doc-70' "
        "(Panic: called `Option::unwrap()` on a `None` value); check it"
    )
    with pytest.raises(KeyboardInterrupt):  # an interrupt is no tokenizer failure
        list(tokenize_documents(lambda texts, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt()), ["a"]))
