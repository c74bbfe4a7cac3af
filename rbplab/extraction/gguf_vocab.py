"""Placeholder tokens of GGUF files: entries a converter added to pad the token list to the
output layer's size.

llama.cpp's converters fill ids that the tokenizer does not use with entries named "[PAD<id>]"
of token type UNUSED, so that the token list has one entry per output row. A tokenizer built
from such a file then counts them as tokens, and ranks would be taken over the padded set,
unlike the same model loaded from the hub. `trailing_placeholders` counts the placeholder
block at the end of the token list (the only kind that truncating the head's rows removes);
`rbplab.extraction.models.describe_model` ranks over the ids before it and records the count
(ModelInfo.placeholder_tokens); `embedded_vocabulary` says whether a file embeds a tokenizer
at all. `include_padded_vocab` still ranks over every row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# gguf.TokenType: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
UNUSED = 5
CONTROL, USER_DEFINED = 3, 4
_PLACEHOLDER_NAME = re.compile(r"^(\[PAD\d+\]|<pad_?\d+>|<\|?(extra|reserved|unused)[_a-z]*\d+\|?>)$", re.I)


def is_placeholder(token: str, token_type: int | None) -> bool:
    """An UNUSED entry, or a CONTROL/USER_DEFINED/untyped entry named like a converter's pad
    ("[PAD123]", "<pad_5>", "<|reserved_special_token_7|>", "<unused42>")."""
    if token_type == UNUSED:
        return True
    return token_type in (None, CONTROL, USER_DEFINED) and bool(_PLACEHOLDER_NAME.match(token))


@dataclass(frozen=True)
class EmbeddedVocabulary:
    """What rank extraction needs of a GGUF file's embedded tokenizer."""

    trailing_placeholders: int


def embedded_vocabulary(path: str | Path) -> EmbeddedVocabulary | None:
    """The embedded tokenizer of a GGUF file (None when it embeds none), from one header read."""
    from rbplab.extraction.gguf_file import gguf_reader

    fields = gguf_reader(path).fields
    if "tokenizer.ggml.model" not in fields:
        return None
    return EmbeddedVocabulary(_trailing(_vocabulary(fields)))


def gguf_vocabulary(path: str | Path) -> tuple[list[str], list[int | None]] | None:
    """(tokens, token types) of a GGUF file's embedded tokenizer; None without one."""
    from rbplab.extraction.gguf_file import gguf_reader

    return _vocabulary(gguf_reader(path).fields)


def trailing_placeholders(path: str | Path) -> int:
    """Number of placeholder entries at the end of a GGUF file's token list (0 without an
    embedded tokenizer)."""
    return _trailing(gguf_vocabulary(path))


def _vocabulary(fields: Any) -> tuple[list[str], list[int | None]] | None:
    tok = fields.get("tokenizer.ggml.tokens")
    if tok is None:
        return None
    tokens = [bytes(tok.parts[i]).decode("utf-8", errors="replace") for i in tok.data]
    typ = fields.get("tokenizer.ggml.token_type")
    types = [int(typ.parts[i][0]) for i in typ.data] if typ is not None else [None] * len(tokens)
    return tokens, types


def _trailing(vocab: tuple[list[str], list[int | None]] | None) -> int:
    if vocab is None:
        return 0
    count = 0
    for token, token_type in zip(reversed(vocab[0]), reversed(vocab[1]), strict=True):
        if not is_placeholder(token, token_type):
            break
        count += 1
    return count
