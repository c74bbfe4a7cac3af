"""Which token, if any, starts every document: the BOS policy (`resolve_bos` -> `BosDecision`).

The rule that applied is recorded in the manifest and is part of the cache key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
