"""Windows through a loaded model -> exact ranks, one shard's rows at a time.

Batch invariance (shards byte-identical for any batch_tokens). Two things change
rounding on CPU: the sequence length a window is padded to, and tiny row counts in
matrix products. So each window is padded to a length that depends on the window
alone (its length rounded up to a multiple of PAD_MULTIPLE, capped at the context
length), windows of equal padded length are batched together, padding goes on the
right with no attention mask (causal attention never looks right, so padding
cannot affect real positions and every batch takes the same code path), and the
output head never runs on fewer than 16 rows (rbplab.extraction.ranks; the fused head's tiles are
fixed, so its rows never depend on the batch either). Measured on CPU: hidden
states of a window are then bit-identical at batch sizes 1, 4, 8 and 16, while padding
to a batch-dependent length with an attention mask changes them by ~1e-6 (nll by ~6e-7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import torch

from rbplab.extraction.plan import Plan
from rbplab.extraction.precision import pinned_precision
from rbplab.extraction.ranks import FloatHead, NonFiniteLogitsError, rank_stats
from rbplab.extraction.weights import input_device
from rbplab.extraction.windows import Window, scored_position

PAD_MULTIPLE = 64


def padded_length(length: int, context_length: int) -> int:
    """Sequence length a window is run at: a function of the window alone (batch invariance)."""
    return min(context_length, -(-length // PAD_MULTIPLE) * PAD_MULTIPLE)


def batches(
    windows: list[Window], batch_tokens: int, context_length: int
) -> Iterator[tuple[int, list[Window]]]:
    """(padded length, windows) groups: equal padded length, stable order, as many windows as fit
    `batch_tokens` padded tokens (at least one), so short windows make batches as large as long ones."""
    by_length: dict[int, list[Window]] = {}
    for window in windows:
        by_length.setdefault(padded_length(len(window.input_ids), context_length), []).append(window)
    for length in sorted(by_length):
        group = by_length[length]
        size = max(1, batch_tokens // length)
        for start in range(0, len(group), size):
            yield length, group[start : start + size]


def batch_arrays(group: list[Window], length: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded input ids [B, length], flat row index of each scored target's predicting
    position in [B * length], and the target ids, in window order."""
    ids = np.full((len(group), length), pad_id, dtype=np.int64)
    rows, targets = [], []
    for b, window in enumerate(group):
        ids[b, : len(window.input_ids)] = window.input_ids
        target_rows = window.target_rows()
        rows.append(b * length + target_rows - 1)
        targets.append(window.input_ids[target_rows])
    return ids, np.concatenate(rows), np.concatenate(targets)


class Scorer:
    """Runs windows through a loaded model: base model forward, then exact ranks from its head,
    by the fp32 head (`rank_stats`, chunked) or the fused kernel (`fused_rank_stats`, CUDA)."""

    def __init__(
        self,
        model: torch.nn.Module,
        vocab_size: int,
        pad_id: int,
        softcap: float | None = None,
        head: str = "fp32",
    ):
        self.model = model
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.softcap = softcap
        self.device = input_device(model)
        output = model.get_output_embeddings()
        if head == "fused":
            # Imported here: Triton is only needed (and only present) where the fused head runs.
            from rbplab.extraction.fused_head import FusedHead, fused_rank_stats

            self.head, self.rank = FusedHead.from_module(output, vocab_size), fused_rank_stats
        else:
            self.head, self.rank = FloatHead.from_module(output, vocab_size), rank_stats

    def hidden_states(self, length: int, group: list[Window]) -> tuple[torch.Tensor, torch.Tensor]:
        """The body's final hidden states at every scored position of `group` [n, d] and the
        target ids [n], both on the head's device (what either head ranks; benchmarks compare heads
        on them)."""
        ids, rows, targets = batch_arrays(group, length, self.pad_id)
        inputs = torch.from_numpy(ids).to(self.device)
        # use_cache=False: a scoring pass never decodes further, and the KV cache transformers
        # builds by default (config.use_cache) would hold every layer's keys and values.
        hidden = self.model.base_model(input_ids=inputs, use_cache=False).last_hidden_state
        row_index = torch.from_numpy(rows).to(hidden.device)
        hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, row_index)
        head_device = self.head.weight.device
        return hidden.to(head_device), torch.from_numpy(targets).to(head_device)

    def score(self, length: int, group: list[Window]) -> tuple[torch.Tensor, ...]:
        """(n_greater, n_equal, nll) of every scored target of `group`, on the head's device."""
        with torch.inference_mode(), pinned_precision():
            hidden, targets = self.hidden_states(length, group)
            try:
                return self.rank(hidden, self.head, targets, vocab_size=self.vocab_size, softcap=self.softcap)
            except NonFiniteLogitsError as err:
                raise err.located(scored_position(group, err.row)) from None


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


def make_scorer(plan: Plan, weights: torch.nn.Module) -> Scorer:
    """A scorer of `plan`'s runs over loaded `weights` (`rbplab.extraction.weights.load_weights`)."""
    tokenizer = plan.described.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else plan.bos.token_id or 0
    return Scorer(weights, plan.vocab_size, int(pad_id), plan.described.info.softcap, plan.spec.head)
