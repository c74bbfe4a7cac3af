"""Windows through a loaded model -> exact ranks, one shard's rows at a time.

Batch invariance (shards byte-identical for any batch_tokens). Two things change
rounding on CPU: the sequence length a window is padded to, and tiny row counts in
matrix products. So each window is padded to a length that depends on the window
alone (its length rounded up to a multiple of PAD_MULTIPLE, capped at the context
length), windows of equal padded length are batched together, padding goes on the
right with no attention mask (causal attention never looks right, so padding
cannot affect real positions and every batch takes the same code path), and the
output head never runs on fewer than 16 rows (rbplab.extraction.ranks). Measured on CPU: hidden
states of a window are then bit-identical at batch sizes 1, 4, 8 and 16, while padding
to a batch-dependent length with an attention mask changes them by ~1e-6 (nll by ~6e-7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch

from rbplab.extraction.models import check_head, input_device, load_weights
from rbplab.extraction.plan import Plan
from rbplab.extraction.precision import pinned_precision
from rbplab.extraction.ranks import FloatHead, NonFiniteLogitsError, rank_stats
from rbplab.extraction.windows import Window, batch_arrays, batches


class Scorer:
    """Runs windows through a loaded model: base model forward, then chunked exact ranks."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, pad_id: int, softcap: float | None = None):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.softcap = softcap
        self.device = input_device(model)
        self.head = FloatHead.from_module(model.get_output_embeddings(), vocab_size)

    def score(self, length: int, group: list[Window]) -> tuple[torch.Tensor, ...]:
        """(n_greater, n_equal, nll) of every scored target of `group`, on the head's device."""
        ids, rows, targets = batch_arrays(group, length, self.pad_id)
        with torch.inference_mode(), pinned_precision():
            inputs = torch.from_numpy(ids).to(self.device)
            # use_cache=False: a scoring pass never decodes further, and the KV cache transformers
            # builds by default (config.use_cache) would hold every layer's keys and values.
            hidden = self.model.base_model(input_ids=inputs, use_cache=False).last_hidden_state
            row_index = torch.from_numpy(rows).to(hidden.device)
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, row_index)
            hidden = hidden.to(self.head.weight.device)
            try:
                return rank_stats(
                    hidden,
                    self.head,
                    torch.from_numpy(targets).to(hidden.device),
                    vocab_size=self.vocab_size,
                    softcap=self.softcap,
                )
            except NonFiniteLogitsError as err:
                raise err.located(scored_position(group, err.row)) from None


def scored_position(group: list[Window], row: int) -> str:
    """The document and token that row `row` of a batch of `group` scores (`batch_arrays` order)."""
    for window in group:
        if row < window.n_scored:
            return f"document {window.doc_index}, token {int(window.positions()[row])}"
        row -= window.n_scored
    raise IndexError(f"row {row} is beyond the batch's scored targets")


def default_batch_tokens(device: torch.device | str) -> int:
    """Padded tokens per forward when the settings leave it open: 16,384 on an accelerator (8
    windows of 2,048), 2,048 on a CPU (larger CPU batches measured slower, cache-bound)."""
    return 2_048 if torch.device(device).type == "cpu" else 16_384


def shard_frame(
    plan: Plan,
    scorer: Scorer,
    windows: list[Window],
    batch_tokens: int | None,
    on_tokens: Callable[[int], Any],
) -> pd.DataFrame:
    """Per-token rows of one shard, sorted by (doc_index, position); `on_tokens(n)` after each batch.
    `batch_tokens` None: `default_batch_tokens` of the scorer's device."""
    parts: list[tuple[list[Window], tuple[torch.Tensor, ...]]] = []
    budget = batch_tokens or default_batch_tokens(scorer.device)
    for length, group in batches(windows, budget, plan.policy.context_length):
        parts.append((group, scorer.score(length, group)))
        on_tokens(sum(w.n_scored for w in group))
    # One device-to-host transfer per shard, not per token.
    greater = torch.cat([p[1][0] for p in parts]).cpu().numpy()
    equal = torch.cat([p[1][1] for p in parts]).cpu()
    nll = torch.cat([p[1][2] for p in parts]).cpu().numpy()
    groups = [w for group, _ in parts for w in group]
    doc_index = np.concatenate([np.full(w.n_scored, w.doc_index, dtype=np.int32) for w in groups])
    documents = plan.corpus.documents
    frame = pd.DataFrame(
        {
            "doc_index": doc_index,
            "doc_id": [documents[i].id for i in doc_index],
            "position": np.concatenate([w.positions() for w in groups]).astype(np.int32),
            "target_id": np.concatenate([w.input_ids[w.target_rows()] for w in groups]).astype(np.int32),
            "n_greater": greater.astype(np.int32),
            "n_equal": equal.numpy().astype(np.int32),
            "nll": nll.astype(np.float32),
        }
    )
    return frame.sort_values(["doc_index", "position"], kind="stable").reset_index(drop=True)


def make_scorer(plan: Plan, weights: torch.nn.Module | None = None) -> Scorer:
    """Load the weights (the expensive step a cache hit skips) unless given, check the head, wrap them."""
    info = plan.described.info
    if weights is None:
        weights = load_weights(plan.described)
        check_head(weights, info)
    tokenizer = plan.described.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else plan.bos.token_id or 0
    return Scorer(weights, plan.vocab_size, int(pad_id), info.softcap)
