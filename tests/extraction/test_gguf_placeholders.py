"""Placeholder detection in GGUF token lists: real tokens that are named like placeholders
(`<pad>`, `<unused>`, `[PAD5]` in the middle of the list) are not counted, trailing blocks of
converter placeholders in each style are counted whole, and nothing is counted when the list does
not end in placeholders. Expected counts are the lengths of the blocks the test appends."""

from pathlib import Path

import pytest

from rbplab.extraction.gguf import gguf_vocabulary, is_placeholder, trailing_placeholders

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# A vocabulary whose middle holds real tokens that look like placeholders: special tokens named
# <pad> and <unused>, a BERT-style [PAD], and converter-style names ([PAD5], <unused3>,
# <|reserved_special_token_0|>) that are not at the end, so truncating the tail never reaches them.
REAL = [
    ("<unk>", UNKNOWN),
    ("<s>", CONTROL),
    ("</s>", CONTROL),
    ("<pad>", CONTROL),
    ("<unused>", USER_DEFINED),
    ("[PAD]", CONTROL),
    ("[PAD5]", CONTROL),
    ("<unused3>", USER_DEFINED),
    ("<|reserved_special_token_0|>", CONTROL),
    ("<0x0A>", BYTE),
    ("the", NORMAL),
    ("▁pad", NORMAL),
    ("[PAD12]", NORMAL),  # an ordinary token of the text that happens to read like a pad
    ("<|padding|>", CONTROL),
    ("<pad>", USER_DEFINED),
    ("end", NORMAL),
]


def block(style: str, start: int, n: int) -> list[tuple[str, int]]:
    """n placeholder entries in one converter's style, numbered from id `start`."""
    ids = range(start, start + n)
    return {
        "llama.cpp": [(f"[PAD{i}]", UNUSED) for i in ids],
        "reserved": [(f"<|reserved_special_token_{i}|>", CONTROL) for i in ids],
        "unused": [(f"<unused{i}>", USER_DEFINED) for i in ids],
        "pad": [(f"<pad_{i}>", CONTROL) for i in ids],
        "pad-plain": [(f"<pad{i}>", USER_DEFINED) for i in ids],
        "extra": [(f"<|extra_{i}|>", CONTROL) for i in ids],
        "unused-typed": [(f"tok{i}", UNUSED) for i in ids],  # the type alone says unused
    }[style]


STYLES = ["llama.cpp", "reserved", "unused", "pad", "pad-plain", "extra", "unused-typed"]


def write_vocab(path: Path, entries: list[tuple[str, int]] | None, typed: bool = True) -> Path:
    """A GGUF file holding only a tokenizer (no tensors): the entries' names and, if `typed`,
    their token types; with entries None no tokenizer at all."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    if entries is not None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list([name for name, _ in entries])
        if typed:
            writer.add_token_types([t for _, t in entries])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("token", "token_type", "expected"),
    [
        ("[PAD7]", UNUSED, True),
        ("anything", UNUSED, True),
        ("[PAD7]", CONTROL, True),
        ("[pad7]", None, True),
        ("<pad_3>", USER_DEFINED, True),
        ("<pad3>", CONTROL, True),
        ("<unused42>", USER_DEFINED, True),
        ("<|reserved_special_token_7|>", CONTROL, True),
        ("<|extra_0|>", None, True),
        ("<pad>", CONTROL, False),
        ("<pad>", None, False),
        ("<unused>", USER_DEFINED, False),
        ("[PAD]", CONTROL, False),
        ("<|padding|>", CONTROL, False),
        ("<|reserved_special_token|>", CONTROL, False),
        ("[PAD7]", NORMAL, False),  # a NORMAL token is text, whatever its name
        ("<unused42>", BYTE, False),
        ("x[PAD7]", CONTROL, False),
        ("[PAD7]x", CONTROL, False),
        (" <unused42>", CONTROL, False),
    ],
)
def test_is_placeholder(token, token_type, expected):
    assert is_placeholder(token, token_type) is expected


def test_real_tokens_named_like_placeholders_are_not_counted(tmp_path):
    path = write_vocab(tmp_path / "real.gguf", REAL)
    assert gguf_vocabulary(path) == ([n for n, _ in REAL], [t for _, t in REAL])
    assert trailing_placeholders(path) == 0
    # such names at the very end: a real token closes the list, placeholders before it stay
    for i, last in enumerate([("<pad>", CONTROL), ("<unused>", CONTROL), ("[PAD12]", NORMAL)]):
        closed = REAL + block("llama.cpp", len(REAL), 3) + [last]
        assert trailing_placeholders(write_vocab(tmp_path / f"closed-{i}.gguf", closed)) == 0


@pytest.mark.parametrize("style", STYLES)
def test_a_trailing_block_of_each_style_is_counted_whole(tmp_path, style):
    entries = REAL + block(style, len(REAL), 7)
    assert trailing_placeholders(write_vocab(tmp_path / f"{style}.gguf", entries)) == 7


def test_mixed_styles_and_placeholders_before_the_last_real_token(tmp_path):
    tail = block("llama.cpp", 16, 3) + block("reserved", 19, 2) + block("unused", 21, 4)
    assert trailing_placeholders(write_vocab(tmp_path / "mixed.gguf", REAL + tail)) == 9
    # a block followed by one real token is not at the end: nothing to truncate
    inner = REAL + block("llama.cpp", 16, 5) + [("<eot>", CONTROL)]
    assert trailing_placeholders(write_vocab(tmp_path / "inner.gguf", inner)) == 0
    # blocks in the middle and at the end: only the trailing one counts
    both = REAL + block("unused", 16, 5) + [("<eot>", CONTROL)] + block("llama.cpp", 22, 6)
    assert trailing_placeholders(write_vocab(tmp_path / "both.gguf", both)) == 6


def test_untyped_token_lists_are_judged_by_name(tmp_path):
    entries = REAL + block("llama.cpp", 16, 4)
    assert trailing_placeholders(write_vocab(tmp_path / "untyped.gguf", entries, typed=False)) == 4
    # without types a real <pad> at the end is still not a placeholder
    closing = entries + [("<pad>", CONTROL)]
    assert trailing_placeholders(write_vocab(tmp_path / "untyped-pad.gguf", closing, typed=False)) == 0
    # nor are tokens typed UNUSED without a placeholder's name, once the types are gone
    unnamed = REAL + block("unused-typed", 16, 4)
    assert trailing_placeholders(write_vocab(tmp_path / "untyped-tok.gguf", unnamed, typed=False)) == 0


def test_no_tokenizer_and_all_placeholders(tmp_path):
    assert gguf_vocabulary(write_vocab(tmp_path / "bare.gguf", None)) is None
    assert trailing_placeholders(tmp_path / "bare.gguf") == 0
    only = block("llama.cpp", 0, 5)
    assert trailing_placeholders(write_vocab(tmp_path / "only.gguf", only)) == 5
