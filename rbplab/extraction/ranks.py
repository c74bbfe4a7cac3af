"""Exact rank statistics of target tokens from hidden states, with bounded memory.

For each scored position we need three numbers over the real vocabulary V:
n_greater = #{v : z_v > z_t}, n_equal = #{v : z_v == z_t} (t included) and
nll = logsumexp(z) - z_t. A full `[positions, V]` float32 logits tensor does not fit
in memory for long contexts and large vocabularies (8 x 2048 x 151,936 floats is
~10 GB), so the output head is applied to a fixed number of rows at a time.

Speed comes from how each chunk is processed, not from skipping work:
- the head runs on `chunk_size` rows at a time (large enough that streaming the head
  weight is amortised), into a reused logits buffer: no allocation per chunk (large
  fresh tensors page-fault on every use, which costs more than the arithmetic);
- the passes over the logits then run on cache-sized blocks of rows (~2 MB), reusing
  one work buffer: gather z_t, max, exp-sum, count z > z_t, count z == z_t;
- comparisons write float 0/1 into the work buffer and a float sum counts them exactly
  (every partial sum is an integer below 2**24): ~30x faster than summing a freshly
  allocated bool tensor as `(z > z_t).sum(-1)` does;
- exp(x) is evaluated as exp2(x * log2 e), whose kernel is ~3x faster on CPU.
Nothing here synchronises with the host per token, so the same code runs on GPUs.

Non-finite logits cost no extra pass: amax propagates NaN and +inf, so a row holding either
(fp16 overflow, NaN weights) has a non-finite maximum, and a non-finite target logit is the
gathered z_t; both are checked once per call on the per-row vectors the passes already fill.
A -inf logit elsewhere in a row is a probability of exactly 0 and leaves every count and the
nll exact, so it is not an error (a row of nothing but -inf has a -inf maximum and is one).

Batch invariance: a row's result must not depend on which other rows share its call.
Products always have a whole number of blocks of rows (>= 16; the last chunk is
zero-padded up to one; on GPUs a block is the whole chunk, so every product has the
same shape): MKL computes a row identically for any row count >= 8 but switches to
other kernels, with other rounding, below that. Every pass is row-wise.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, RbplabError
from rbplab.extraction.exact import (
    SOFTCAP_RELATIVE,
    UNIT,
    Tally,
    band_halfwidth,
    head_norms,
    row_margins,
    settle,
)
from rbplab.extraction.precision import pinned_precision

# Two sizes. The matrix product wants many rows at once (the head weight is streamed
# once per chunk: 512 rows of GPT-2's head run within ~3% of 1024 rows on CPU, 64 rows
# ~40% slower). The passes over the logits want a block that stays in cache (0.5M-1M
# float32 elements measured best on this 2 MB-L2 CPU, ~2x faster per pass than 4M).
CPU_BLOCK_ELEMENTS = 1 << 19
CPU_MATMUL_ROWS = 512
CPU_CHUNK_ELEMENTS = 1 << 25  # but at most 128 MB of logits per chunk (Qwen2.5: 208 rows)
GPU_CHUNK_ELEMENTS = 1 << 25
MIN_BLOCK_ROWS = 16  # MKL switches kernels below 8 rows; stay well above that
MAX_CHUNK_ROWS = 4096
_EXACT_FLOAT_COUNT = 1 << 24  # float32 holds every integer up to 2**24 exactly
LOG2E = 1.0 / math.log(2.0)


class NonFiniteLogitsError(RbplabError, FloatingPointError):
    """Scored rows whose logits hold NaN or inf: ranks and nll of such a row mean nothing.

    `row` is the first such row of the `rank_stats` call, `rows` how many there are, `values`
    how many of the first row's logits are not finite; callers that know which document and
    token a row scores name them with `located` (the message stays one line)."""

    def __init__(self, row: int, rows: int, values: int, vocab_size: int, dtype: torch.dtype, where=()):
        self.row, self.rows, self.values, self.vocab_size, self.dtype = row, rows, values, vocab_size, dtype
        self.where = tuple(where)
        place = ", ".join(self.where) if self.where else f"row {row} of the call"
        others = f" ({rows} scored positions of this batch are affected)" if rows > 1 else ""
        super().__init__(
            f"{place}: {values} of the {vocab_size} logits are not finite (NaN or inf){others}; "
            f"{dtype_hint(dtype)}"
        )

    def located(self, *where: str) -> NonFiniteLogitsError:
        """The same error with `where` (outermost first, e.g. "shard 3") before what it already names."""
        return NonFiniteLogitsError(
            self.row, self.rows, self.values, self.vocab_size, self.dtype, (*where, *self.where)
        )


def dtype_hint(dtype: torch.dtype) -> str:
    """What to try when a model body in `dtype` produced non-finite logits."""
    if dtype == torch.float16:
        return "float16 overflows above 65504: run the model in --dtype bfloat16 (or float32)"
    if dtype == torch.bfloat16:
        return "run the model in --dtype float32 to rule out overflow; otherwise its weights hold NaN or inf"
    return (
        "the model's weights (an embedding row, a layer) hold NaN or inf; check or re-download the checkpoint"
    )


def linear_weight(head: nn.Module, rows: int | None = None) -> Tensor:
    """The [rows, d] floating-point weight of an nn.Linear-style output head, or a one-line
    InvalidTypeError (a quantised head, a head of another kind); with `rows`, an
    InvalidArgumentError when the head has fewer."""
    weight = getattr(head, "weight", None)
    if not isinstance(weight, Tensor) or weight.ndim != 2 or not weight.is_floating_point():
        raise InvalidTypeError(
            f"output head {type(head).__name__} is not a linear layer with a floating-point 2-D weight; "
            "rank extraction supports nn.Linear-style heads (quantised heads must be dequantised first)"
        )
    if rows is not None and weight.shape[0] < rows:
        raise InvalidArgumentError(
            f"output head has {weight.shape[0]} rows but vocab_size={rows} was requested"
        )
    return weight


class FloatHead(nn.Module):
    """Float32 copy (or view, when already float32) of a linear output head.

    Only the first `rows` output rows are kept: ranking over the real vocabulary
    means padded rows must not take part in comparisons or in the softmax.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self._norms: tuple[float, float] | None = None

    @classmethod
    def from_module(cls, head: nn.Module, rows: int) -> FloatHead:
        if isinstance(head, FloatHead):
            if head.weight.shape[0] < rows:
                raise InvalidArgumentError(f"head has {head.weight.shape[0]} rows, cannot rank over {rows}")
            if head.weight.shape[0] == rows:
                return head
        weight = linear_weight(head, rows)
        bias = getattr(head, "bias", None)
        w = weight.detach()[:rows].to(torch.float32).contiguous()
        b = None if bias is None else bias.detach()[:rows].to(torch.float32).contiguous()
        return cls(w, b)

    @property
    def rows(self) -> int:
        return self.weight.shape[0]

    def norms(self) -> tuple[float, float]:
        """(max_v ||w_v||, max_v |b_v|) in float64, computed once: the error bound's head terms."""
        if self._norms is None:
            self._norms = head_norms(self.weight, self.bias, self.rows)
        return self._norms

    def forward(self, hidden: Tensor) -> Tensor:
        return nn.functional.linear(hidden.to(torch.float32), self.weight, self.bias)


def block_rows(vocab_size: int, device: torch.device | str) -> int:
    """Rows per pass over the logits: a cache-sized slice on CPU, the whole chunk on GPUs."""
    if torch.device(device).type == "cpu":
        return int(min(MAX_CHUNK_ROWS, max(MIN_BLOCK_ROWS, CPU_BLOCK_ELEMENTS // max(vocab_size, 1))))
    return default_chunk_size(vocab_size, device)


def default_chunk_size(vocab_size: int, device: torch.device | str) -> int:
    """Rows per matrix product with the head; a multiple of `block_rows` on CPU."""
    if torch.device(device).type == "cpu":
        block = block_rows(vocab_size, device)
        wanted = block * max(1, -(-CPU_MATMUL_ROWS // block))
        allowed = block * max(1, CPU_CHUNK_ELEMENTS // max(vocab_size, 1) // block)
        return min(wanted, allowed)
    return int(min(MAX_CHUNK_ROWS, max(MIN_BLOCK_ROWS, GPU_CHUNK_ELEMENTS // max(vocab_size, 1))))


def rank_stats(
    hidden: Tensor,
    head: nn.Module,
    targets: Tensor,
    *,
    vocab_size: int,
    chunk_size: int | None = None,
    softcap: float | None = None,
    tally: Tally | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Rank statistics of `targets` under logits `head(hidden)` restricted to the first `vocab_size` rows.

    hidden: [n, d] final hidden states (any float dtype); targets: [n] token ids < vocab_size.
    chunk_size: rows per product with the head (default: `default_chunk_size`); memory is
    O(chunk_size x vocab_size) whatever n is.
    softcap: the config's `final_logit_softcapping` (z -> cap * tanh(z / cap)), applied as the model does.
    tally: counts the rows settled in float64 (`rbplab.extraction.exact`).
    Returns (n_greater int32, n_equal int32, nll float32), each [n], on hidden's device: the counts
    equal float64's on every row, whatever the BLAS (`rbplab.extraction.exact`).
    Raises NonFiniteLogitsError when a row's logits hold NaN or +inf, or its target logit is not
    finite (found from the row maxima and target logits the passes compute anyway: one host sync
    per call, no extra pass over the logits).
    """
    if hidden.ndim != 2:
        raise ValueError(f"hidden must be [n, d], got shape {tuple(hidden.shape)}")
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be [n] matching hidden's rows, got {tuple(targets.shape)}")
    fhead = FloatHead.from_module(head, vocab_size)
    weight, bias = fhead.weight, fhead.bias
    if weight.device != hidden.device:
        raise ValueError(f"head is on {weight.device} but hidden states are on {hidden.device}")
    n, d = hidden.shape
    device = hidden.device
    rows = int(chunk_size or default_chunk_size(vocab_size, device))
    block = min(rows, block_rows(vocab_size, device))
    if rows < 1:
        raise InvalidArgumentError(f"chunk_size must be positive, got {chunk_size}")
    n_chunks = -(-n // rows)
    padded = n_chunks * rows
    if n == 0:
        empty = torch.zeros(0, dtype=torch.int32, device=device)
        return empty, empty.clone(), torch.zeros(0, dtype=torch.float32, device=device)
    targets = targets.to(device=device, dtype=torch.long)
    # One host sync per call (not per token) to reject ids the ranking cannot see.
    lo, hi = int(targets.min()), int(targets.max())
    if lo < 0 or hi >= vocab_size:
        raise InvalidArgumentError(f"target ids must lie in [0, {vocab_size}), got ids from {lo} to {hi}")
    w_norm, b_max = fhead.norms()
    relative = SOFTCAP_RELATIVE if softcap else 0.0
    # Per-row results, padded to whole chunks so every slice below has a constant shape.
    t_all = torch.zeros(padded, 1, dtype=torch.long, device=device)
    t_all[:n, 0] = targets
    count_dtype = torch.float32 if vocab_size < _EXACT_FLOAT_COUNT else torch.float64
    greater = torch.zeros(padded, dtype=count_dtype, device=device)
    at_least = torch.zeros_like(greater)
    sum_exp = torch.ones(padded, dtype=torch.float32, device=device)
    z_max = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    z_target = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    margin = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    width = torch.zeros_like(margin)  # the band's half-width W, as the passes compared with it
    logits = torch.empty(rows, vocab_size, dtype=torch.float32, device=device)
    work = torch.empty(block, vocab_size, dtype=torch.float32, device=device)
    h_pad = torch.zeros(rows, d, dtype=torch.float32, device=device)
    settled_greater = torch.zeros(n, dtype=torch.int64, device=device)
    settled_equal = torch.zeros_like(settled_greater)
    settled_rows = settled_logits = 0
    w_t = weight.t()
    with torch.inference_mode(), pinned_precision():
        for start in range(0, n, rows):
            m = min(rows, n - start)
            # Products always have a whole number of blocks of rows (the last chunk is
            # zero-padded up to one), so a row never meets the small-M kernels of BLAS.
            m_pad = min(rows, -(-m // block) * block)
            h_pad[:m].copy_(hidden[start : start + m])
            h_pad[m:m_pad].zero_()
            margin[start : start + m, 0] = row_margins(h_pad[:m], d, w_norm, b_max, UNIT)
            z_all = logits[:m_pad]
            chunk = slice(start, start + m_pad)
            _head_product(h_pad[:m_pad], w_t, bias, z_all, t_all[chunk, 0])
            if softcap:
                z_all.div_(softcap).tanh_().mul_(softcap)
            # Row-wise passes over cache-sized blocks; blocks past the real rows are skipped.
            for b in range(0, m, block):
                z = logits[b : b + block]
                k = z.shape[0]  # == block except when chunk_size is not a multiple of it
                r = slice(start + b, start + b + k)
                _block_passes(
                    z, t_all[r], work[:k], z_max[r], z_target[r], margin[r], relative, width[r],
                    sum_exp[r], greater[r], at_least[r],
                )  # fmt: skip
                # The band holds the target itself; a real row with anything more is settled
                # while its block is in cache (one host sync per block: per chunk on GPUs).
                real = slice(start + b, start + b + min(k, m - b))
                flagged = ((at_least[real] - greater[real]) > 1).nonzero()[:, 0]
                if flagged.numel():
                    settled_logits += _settle_rows(
                        z, work[:k], at_least[r], flagged, h_pad[b : b + k], weight, bias, t_all[r, 0],
                        z_target[r], width[r], softcap, settled_greater[real], settled_equal[real],
                    )  # fmt: skip
                    settled_rows += flagged.numel()
        # amax propagates NaN and +inf: a row holding either has a non-finite maximum.
        bad = ~(torch.isfinite(z_max[:n, 0]) & torch.isfinite(z_target[:n, 0]))
        if bool(bad.any()):
            raise _non_finite(bad, hidden, fhead, softcap)
        # nll = logsumexp(z) - z_t = (max - z_t) + log(sum exp(z - max)), once for all rows.
        nll = (z_max - z_target)[:n, 0] + torch.log(sum_exp[:n])
    if tally is not None:
        tally.add(n, settled_rows, settled_logits)
    n_greater = greater[:n].to(torch.int64) + settled_greater
    return n_greater.to(torch.int32), (1 + settled_equal).to(torch.int32), nll


def _head_product(h: Tensor, w_t: Tensor, bias: Tensor | None, out: Tensor, targets: Tensor) -> None:
    """A chunk's float32 logits into `out`, in whatever order the BLAS sums. `targets` goes unused
    here: a test's adversarial backend, which moves each logit within its bound toward its row's
    target logit, takes this function's place and reads it."""
    if bias is None:
        torch.mm(h, w_t, out=out)
    else:
        torch.addmm(bias, h, w_t, out=out)


def _settle_rows(
    logits, mask, above, flagged, h, weight, bias, t, z_t, width, softcap, out_greater, out_equal
) -> int:
    """Settle a block's flagged rows: their band candidates (the target excluded) recomputed in
    float64 (`exact.settle`), the counts added into `out_*` (the block's real rows). Returns how
    many logits that took."""
    # The candidates are the logits with z >= z_t - W and z <= z_t + W, the passes' own predicates,
    # the target left out. `mask` still holds the last pass's z >= z_t - W (0/1): where its ones are
    # few (targets ranked high), their positions are found directly; else the rows are compared.
    # `width` is the W the passes compared with, so the predicates are theirs bit for bit.
    w = width[flagged]
    if above[flagged].sum() * 8 < flagged.numel() * logits.shape[1]:
        pair_rows, cols = mask.index_select(0, flagged).nonzero(as_tuple=True)
        inside = logits[flagged[pair_rows], cols] <= (z_t[flagged] + w)[pair_rows, 0]
    else:
        z = logits.index_select(0, flagged)
        inside = (z >= z_t[flagged] - w) & (z <= z_t[flagged] + w)
        pair_rows, cols = inside.nonzero(as_tuple=True)
        inside = inside[pair_rows, cols]
    keep = inside & (cols != t[flagged][pair_rows])
    pair_rows, cols = pair_rows[keep], cols[keep]
    greater, equal = settle(
        h[flagged], weight, bias, t[flagged], pair_rows, cols, softcap=softcap, n=flagged.numel()
    )
    out_greater.index_add_(0, flagged, greater)
    out_equal.index_add_(0, flagged, equal)
    return int(cols.numel())


def _non_finite(bad: Tensor, hidden: Tensor, head: FloatHead, softcap: float | None) -> NonFiniteLogitsError:
    """The error for the rows flagged `bad`; the first row's logits are recomputed to count its
    non-finite values (only on this error path)."""
    rows = bad.nonzero()[:, 0]
    first = int(rows[0])
    z = head(hidden[first : first + 1])
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    values = int((~torch.isfinite(z)).sum())
    return NonFiniteLogitsError(first, len(rows), values, head.rows, hidden.dtype)


def _block_passes(z, t, work, z_max, z_target, margin, relative, width, sum_exp, greater, at_least) -> None:
    """Five passes over one cache-resident block of logits, results written into row slices:
    target logit, maximum, exp-sum, and the counts above the band and at or above its bottom.

    exp(x) is computed as exp2(x * log2 e): torch's exp2 kernel is ~3x faster than exp on
    CPU and the extra rounding of the scaled argument stays near 1e-6 in nll.
    """
    torch.gather(z, 1, t, out=z_target)
    torch.amax(z, 1, keepdim=True, out=z_max)
    torch.add(z_max * -LOG2E, z, alpha=LOG2E, out=work).exp2_()
    torch.sum(work, 1, out=sum_exp)
    width.copy_(band_halfwidth(z_target, margin, relative))
    # Comparisons write float 0/1 into the reused buffer; float sums count them exactly.
    torch.gt(z, z_target + width, out=work)
    torch.sum(work, 1, dtype=greater.dtype, out=greater)
    torch.ge(z, z_target - width, out=work)
    torch.sum(work, 1, dtype=at_least.dtype, out=at_least)
