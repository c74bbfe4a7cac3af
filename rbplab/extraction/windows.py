"""Turning documents into model inputs: tokenization and context windows.

Documents are tokenized separately (never concatenated), so no token is predicted
from another document's text. A document's sequence is its tokens, optionally
preceded by one BOS token; token i of the document has `position` i whatever the
BOS choice. Each target is predicted from the tokens before it in its sequence, so
with a BOS the first token is scorable and without one it is not.

Windows cut long sequences to `context_length` inputs:
- non-overlapping (stride None): each window starts at the last token of the
  previous one, so its inputs overlap by exactly that one context token and every
  target is scored exactly once;
- strided (stride s < context_length): windows advance by s tokens and only the
  targets not scored by the previous window are scored, so every scored token
  after the first window sees at least context_length - s tokens of context.
Special tokens in the text are tokenized as plain text (`split_special_tokens`),
and any target that is still a special token id is not scored. Which BOS token (if any) starts
a document is `rbplab.extraction.bos`; how windows are batched is `rbplab.extraction.scoring`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbplab.catalog.corpora.corpus import CorpusError
from rbplab.core.errors import InvalidArgumentError
from rbplab.extraction.bos import BOS_CHOICES, BosDecision


@dataclass(frozen=True)
class WindowPolicy:
    context_length: int
    stride: int | None = None  # None: non-overlapping; else advance per window, 1 <= stride < context_length
    bos: str = "auto"  # "auto" | "always" | "never"

    def __post_init__(self) -> None:
        if not isinstance(self.context_length, int) or self.context_length < 2:
            raise InvalidArgumentError(f"context_length must be an integer >= 2, got {self.context_length!r}")
        if self.stride is not None and not (
            isinstance(self.stride, int) and 1 <= self.stride < self.context_length
        ):
            raise InvalidArgumentError(
                f"stride must be an integer in [1, context_length={self.context_length}), "
                f"got {self.stride!r}; use stride=None for non-overlapping windows"
            )
        if self.bos not in BOS_CHOICES:
            raise InvalidArgumentError(f"bos must be one of {BOS_CHOICES}, got {self.bos!r}")

    @property
    def step(self) -> int:
        """How far consecutive windows of a document advance."""
        return self.stride if self.stride is not None else self.context_length - 1


def tokenize_documents(
    tokenizer: Any, texts: Sequence[str], batch: int = 64, names: Sequence[str] | None = None
) -> Iterator[np.ndarray]:
    """Token ids of each document on its own, special-token strings in the text treated as text.
    Lazy, in batches, so a token budget does not tokenize a whole large corpus. A tokenizer that
    fails (a Rust tokenizer panics with a BaseException) is a one-line CorpusError naming the
    document (`names`, else its index) it failed on."""
    for start in range(0, len(texts), batch):
        chunk = list(texts[start : start + batch])
        try:
            encoded = _encode(tokenizer, chunk)
        except _NOT_FAILURES:
            raise
        except BaseException as err:  # noqa: BLE001 - pyo3's PanicException is a BaseException
            raise _failure(tokenizer, chunk, start, names, err) from None
        yield from (np.asarray(ids, dtype=np.int64) for ids in encoded)


_NOT_FAILURES = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return tokenizer(
        texts,
        add_special_tokens=False,
        split_special_tokens=True,
        return_attention_mask=False,
        verbose=False,
    )["input_ids"]


def _failure(
    tokenizer: Any, chunk: list[str], start: int, names: Sequence[str] | None, err: BaseException
) -> CorpusError:
    """The error naming the first document of `chunk` the tokenizer fails on alone (the batch's
    range when none fails alone)."""
    culprit = f"documents {start} to {start + len(chunk) - 1}"
    for i, text in enumerate(chunk):
        try:
            _encode(tokenizer, [text])
        except _NOT_FAILURES:
            raise
        except BaseException as alone:  # noqa: BLE001 - as above
            err = alone
            culprit = f"document {names[start + i]!r}" if names is not None else f"document {start + i}"
            break
    reason = " ".join(str(err).split())[:300] or type(err).__name__
    return CorpusError(f"the tokenizer failed on {culprit} ({type(err).__name__}: {reason}); check it")


@dataclass(frozen=True)
class Window:
    """One model input and the targets scored from it.

    `input_ids[j]` for j >= first is a target predicted from the hidden state at j - 1;
    its document position is offset + j (offset is -1 when the sequence starts with BOS).
    `scored` marks which of those targets count (False for special-token targets).
    """

    doc_index: int
    input_ids: np.ndarray
    first: int
    offset: int
    scored: np.ndarray  # bool, length len(input_ids) - first

    @property
    def n_scored(self) -> int:
        return int(self.scored.sum())

    def positions(self) -> np.ndarray:
        """Document positions of the scored targets."""
        return (np.arange(self.first, len(self.input_ids)) + self.offset)[self.scored]

    def target_rows(self) -> np.ndarray:
        """Input indices j whose hidden state at j - 1 predicts a scored target."""
        return np.arange(self.first, len(self.input_ids))[self.scored]

    def truncated(self, n_scored: int) -> Window:
        """This window keeping only its first `n_scored` scored targets (inputs cut after the last)."""
        if n_scored >= self.n_scored:
            return self
        last = int(self.target_rows()[n_scored - 1]) if n_scored > 0 else self.first - 1
        stop = last + 1
        return Window(
            self.doc_index, self.input_ids[:stop], self.first, self.offset, self.scored[: stop - self.first]
        )


def document_windows(
    doc_index: int,
    tokens: np.ndarray,
    policy: WindowPolicy,
    bos: BosDecision,
    special_ids: Iterable[int] = (),
) -> list[Window]:
    """Windows of one document under `policy`; targets covered exactly once, in order."""
    if bos.use:
        seq = np.concatenate([np.asarray([bos.token_id], dtype=np.int64), tokens])
        offset = -1
    else:
        seq, offset = tokens, 0
    special = np.asarray(sorted(set(special_ids)), dtype=np.int64)
    windows: list[Window] = []
    n = len(seq)
    start, scored_until = 0, 1  # targets seq[j] for j < scored_until are done (seq[0] has no context)
    while scored_until < n:
        stop = min(start + policy.context_length, n)
        first = scored_until - start
        ids = seq[start:stop]
        scored = ~np.isin(ids[first:], special) if len(special) else np.ones(stop - start - first, dtype=bool)
        windows.append(Window(doc_index, ids, first, offset + start, scored))
        scored_until = stop
        start += policy.step
    return windows


def make_windows(
    documents: Iterable[np.ndarray],
    policy: WindowPolicy,
    bos: BosDecision,
    *,
    special_ids: Iterable[int] = (),
    max_tokens: int | None = None,
) -> list[Window]:
    """Windows of every document in corpus order, cut so at most `max_tokens` targets are scored."""
    if max_tokens is not None and max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
    special = tuple(special_ids)
    out: list[Window] = []
    total = 0
    for doc_index, tokens in enumerate(documents):
        for window in document_windows(doc_index, tokens, policy, bos, special):
            if max_tokens is not None and total + window.n_scored >= max_tokens:
                window = window.truncated(max_tokens - total)
                if window.n_scored:
                    out.append(window)
                return out
            if window.n_scored:
                out.append(window)
                total += window.n_scored
    return out


def scored_position(group: list[Window], row: int) -> str:
    """The document and token that row `row` of a batch of `group` scores (rows in window order,
    as `rbplab.extraction.scoring.batch_arrays` lays them out)."""
    for window in group:
        if row < window.n_scored:
            return f"document {window.doc_index}, token {int(window.positions()[row])}"
        row -= window.n_scored
    raise IndexError(f"row {row} is beyond the batch's scored targets")
