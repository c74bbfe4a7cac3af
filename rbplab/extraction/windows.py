"""Documents into model inputs: the token each document starts with, and the windows it is scored in.

Which token, if any, starts every document: the BOS policy (`resolve_bos` -> `BosDecision`).

The rule that applied is recorded in the manifest and is part of the cache key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbplab.catalog.corpora import CorpusError
from rbplab.core.errors import InvalidArgumentError

BOS_CHOICES = ("auto", "always", "never")


@dataclass(frozen=True)
class BosDecision:
    """Whether documents start with a BOS token, which one, and why (recorded in the manifest)."""

    use: bool
    token_id: int | None
    rule: str

    def to_dict(self) -> dict:
        return {"use": self.use, "token_id": self.token_id, "rule": self.rule}


def _added_prefix(tokenizer: Any) -> int | None:
    """The token the tokenizer itself prepends when asked for special tokens (Llama, OPT, Gemma), if any."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    if len(full) > len(plain) and full[len(full) - len(plain) :] == plain:
        return int(full[0])
    return None


def _config_bos(config: Any, vocab_size: int) -> int | None:
    """The config's bos_token_id when it is a single token of the tokenizer's vocabulary."""
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "bos_token_id", None)
    return int(value) if isinstance(value, int) and 0 <= value < vocab_size else None


def resolve_bos(tokenizer: Any, bos: str = "auto", config: Any = None) -> BosDecision:
    """Decide the BOS policy for a tokenizer (and the model `config`, when given).

    "auto" follows what each family was trained with, in the order lm-evaluation-harness uses:
    1. the tokenizer adds a BOS itself (OPT's </s>, Llama/Gemma <s>/<bos>) -> that token;
    2. it declares a bos_token (GPT-2 and Pythia: <|endoftext|>, their document separator) -> it;
    3. no bos_token, but the model config names a bos_token_id inside the vocabulary (Qwen2.5
       base: 151643, <|endoftext|>, which separates pretraining documents) -> that token. This
       comes before eos because base checkpoints have shipped tokenizer_config.json files whose
       eos is the chat token <|im_end|>;
    4. only an eos_token -> the eos token as the document-start context;
    5. otherwise no BOS, and the first token of each document is not scored.
    "always" applies the same order but fails if no token exists; "never" uses none.
    The rule that applied is recorded (`BosDecision.rule`, part of the cache key).
    """
    if bos not in BOS_CHOICES:
        raise InvalidArgumentError(f"bos must be one of {BOS_CHOICES}, got {bos!r}")
    if bos == "never":
        return BosDecision(False, None, "never: requested")
    prefix = _added_prefix(tokenizer)
    if prefix is not None:
        decision = BosDecision(True, prefix, "tokenizer prepends this token to every input")
    elif tokenizer.bos_token_id is not None:
        decision = BosDecision(True, int(tokenizer.bos_token_id), "tokenizer's bos_token")
    elif (config_bos := _config_bos(config, len(tokenizer))) is not None:
        decision = BosDecision(True, config_bos, "no bos_token: the model config's bos_token_id")
    elif tokenizer.eos_token_id is not None:
        decision = BosDecision(
            True, int(tokenizer.eos_token_id), "no bos_token: eos_token marks document start"
        )
    elif bos == "always":
        raise InvalidArgumentError("bos='always' but the tokenizer has no BOS or EOS token; use bos='never'")
    else:
        return BosDecision(False, None, "auto: tokenizer has no BOS or EOS token")
    return BosDecision(decision.use, decision.token_id, f"{bos}: {decision.rule}")


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
