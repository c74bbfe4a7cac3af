"""Exact rank statistics of target tokens from hidden states, with bounded memory: the fp32 head,
and the head base both heads build on.

For each scored position we need three numbers over the real vocabulary V:
n_greater = #{v : z_v > z_t}, n_equal = #{v : z_v = z_t} (t included), in exact arithmetic
(`rbplab.extraction.exact`), and nll = logsumexp(z) - z_t. A full `[positions, V]` float32 logits
tensor does not fit in memory for long contexts and large vocabularies (8 x 2048 x 151,936 floats is
~10 GB), so the output head is applied to a fixed number of rows at a time.

Speed comes from how each chunk is processed, not from skipping work:
- the head runs on `chunk_size` rows at a time (large enough that streaming the head
  weight is amortised), into a reused logits buffer: no allocation per chunk (large
  fresh tensors page-fault on every use, which costs more than the arithmetic);
- the passes over the logits then run on cache-sized blocks of rows (~2 MB), reusing
  one work buffer: gather z_t, count above the error band, count at or above its bottom,
  max, exp-sum;
- comparisons write float 0/1 into the work buffer and a float sum counts them exactly
  (every partial sum is an integer below 2**24): ~30x faster than summing a freshly
  allocated bool tensor as `(z > z_t).sum(-1)` does;
- a row with a logit inside its band has its candidates found per chunk, from the chunk's
  logits in cache, and settled once per call;
- exp(x) is evaluated as exp2(x * log2 e), whose kernel is ~3x faster on CPU.
Nothing here synchronises with the host per token, so the same code runs on GPUs.

Counts are taken on raw logits; a softcap is applied afterwards, in place, for the nll only.

Non-finite values cost no extra pass: a row whose states are not finite is known from its norm,
amax propagates NaN and +inf, and a non-finite target logit is the gathered z_t; all three are
checked once per call. The overflow guard (`exact.refuse_overflow`) leaves -inf only where the head's
bias is -inf (a masked token): a probability of exactly 0, which leaves every count and the nll
exact, so it is not an error.

Batch invariance: a row's result must not depend on which other rows share its call.
Products always have a whole number of blocks of rows (>= 16; the last chunk is
zero-padded up to one; on GPUs a block is the whole chunk, so every product has the
same shape): MKL computes a row identically for any row count >= 8 but switches to
other kernels, with other rounding, below that. Every pass is row-wise. (The counts are exact in
any case; this keeps the nll the same too.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, RbplabError
from rbplab.extraction.exact import (
    UNIT,
    Tally,
    band_halfwidth,
    head_norms,
    logit_margins,
    refuse_overflow,
    row_bounds,
    settle_pairs,
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


class OutputHead(nn.Module):
    """The first `rows` rows of a linear output head, as a head ranks with them: ranking over the
    real vocabulary means padded rows take no part in comparisons or in the softmax. Both heads
    build on it: the weight and float32 bias they multiply, their row count, and the error bound's
    head terms (`norms`), computed once."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self._norms: tuple[Tensor, float] | None = None

    @classmethod
    def from_module(cls, head: nn.Module, rows: int):
        """`head` as this kind of head over its first `rows` rows; a head of this kind with exactly
        `rows` rows is returned as it is."""
        if isinstance(head, cls) and head.rows == rows:
            return head
        weight = linear_weight(head, rows).detach()[:rows]
        bias = getattr(head, "bias", None)
        b = None if bias is None else bias.detach()[:rows].to(torch.float32).contiguous()
        return cls(cls.prepared(weight), b)

    @staticmethod
    def prepared(weight: Tensor) -> Tensor:
        """The weight as this head multiplies it (a subclass converts it)."""
        return weight

    @property
    def rows(self) -> int:
        return self.weight.shape[0]

    def norms(self) -> tuple[float, float]:
        """(max_v ||w_v||, max_v |b_v|) in float64, computed once: the error bound's head terms
        (`exact.head_norms`, which refuses a head holding NaN or inf)."""
        return float(self.row_norms().max()) if self.rows else 0.0, self._head_norms()[1]

    def row_norms(self) -> Tensor:
        """||w_v|| per row, float64 [rows], computed once with `norms`."""
        return self._head_norms()[0]

    def _head_norms(self) -> tuple[Tensor, float]:
        if self._norms is None:
            self._norms = head_norms(self.weight, self.bias, self.rows)
        return self._norms

    def checked(self, hidden: Tensor, targets: Tensor, vocab_size: int) -> Tensor:
        """The checks both heads make before ranking: shapes, devices, row count and target ids (one
        host sync); returns `targets` as int64 on hidden's device."""
        if hidden.ndim != 2:
            raise ValueError(f"hidden must be [n, d], got shape {tuple(hidden.shape)}")
        if targets.shape != hidden.shape[:1]:
            raise ValueError(f"targets must be [n] matching hidden's rows, got {tuple(targets.shape)}")
        if self.rows < vocab_size:
            raise InvalidArgumentError(f"head has {self.rows} rows, cannot rank over {vocab_size}")
        if self.weight.device != hidden.device:
            raise ValueError(f"head is on {self.weight.device} but hidden states are on {hidden.device}")
        targets = targets.to(device=hidden.device, dtype=torch.long)
        if targets.numel():
            lo, hi = int(targets.min()), int(targets.max())
            if lo < 0 or hi >= vocab_size:
                raise InvalidArgumentError(
                    f"target ids must lie in [0, {vocab_size}), got ids from {lo} to {hi}"
                )
        return targets


class FloatHead(OutputHead):
    """The fp32 head's rows: a float32 copy (or view, when already float32) of the head's weight."""

    @staticmethod
    def prepared(weight: Tensor) -> Tensor:
        return weight.to(torch.float32).contiguous()

    def forward(self, hidden: Tensor) -> Tensor:
        return nn.functional.linear(hidden.to(torch.float32), self.weight, self.bias)


def softcapped(z: Tensor, softcap: float | None, *, inplace: bool = False) -> Tensor:
    """z -> c tanh(z / c), as the model applies it (Gemma 2's final_logit_softcapping); `z` itself
    when there is no cap. The cap is strictly increasing, so it changes no rank: heads apply it for
    the nll only (the fused kernel has its own tanh, in Triton)."""
    if not softcap:
        return z
    if inplace:
        return z.div_(softcap).tanh_().mul_(softcap)
    return torch.tanh(z / softcap) * softcap


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

    hidden: [n, d] final hidden states (any float dtype, ranked as their float32 values); targets:
    [n] token ids < vocab_size. chunk_size: rows per product with the head (default:
    `default_chunk_size`); memory is O(chunk_size x vocab_size) whatever n is.
    softcap: the config's `final_logit_softcapping` (z -> cap * tanh(z / cap)), applied to the nll
    only: a strictly increasing map changes no rank.
    tally: counts the rows settled by exact sign (`rbplab.extraction.exact`).
    Returns (n_greater int32, n_equal int32, nll float32), each [n], on hidden's device: the counts
    equal exact arithmetic's on every row, whatever the BLAS (`rbplab.extraction.exact`).
    Raises LogitRangeError for rows whose float32 logits could overflow, and NonFiniteLogitsError
    when a row's logits hold NaN or +inf or its target logit is not finite (found from the row
    maxima and target logits the passes compute anyway: one host sync per call).
    """
    fhead = FloatHead.from_module(head, vocab_size)
    targets = fhead.checked(hidden, targets, vocab_size)
    weight, bias = fhead.weight, fhead.bias
    n, d = hidden.shape
    device = hidden.device
    rows = int(chunk_size or default_chunk_size(vocab_size, device))
    if rows < 1:
        raise InvalidArgumentError(f"chunk_size must be positive, got {chunk_size}")
    block = min(rows, block_rows(vocab_size, device))
    if n == 0:
        empty = torch.zeros(0, dtype=torch.int32, device=device)
        return empty, empty.clone(), torch.zeros(0, dtype=torch.float32, device=device)
    states = hidden.to(torch.float32)  # the values the head multiplies, and the bound's
    w_norm, b_max = fhead.norms()
    margins, reach = row_bounds(states, w_norm, b_max, UNIT)
    refuse_overflow(torch.where(torch.isfinite(reach), reach, 0.0))
    padded = -(-n // rows) * rows
    # Per-row results, padded to whole chunks so every slice below has a constant shape.
    t_all = torch.zeros(padded, 1, dtype=torch.long, device=device)
    t_all[:n, 0] = targets
    margin = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    margin[:n, 0] = margins
    count_dtype = torch.float32 if vocab_size < _EXACT_FLOAT_COUNT else torch.float64
    greater = torch.zeros(padded, dtype=count_dtype, device=device)
    at_least = torch.zeros_like(greater)
    sum_exp = torch.ones(padded, dtype=torch.float32, device=device)
    z_max = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    z_target = torch.zeros(padded, 1, dtype=torch.float32, device=device)
    # The nll's target logit: the raw one, or the capped one where a softcap applies.
    z_nll = torch.zeros_like(z_target) if softcap else z_target
    width = torch.zeros_like(margin)  # the band's half-width W, as the passes compared with it
    logits = torch.empty(rows, vocab_size, dtype=torch.float32, device=device)
    work = torch.empty(block, vocab_size, dtype=torch.float32, device=device)
    h_pad = torch.zeros(rows, d, dtype=torch.float32, device=device)
    # A row whose states are not finite is refused below; its band would hold every logit.
    finite = torch.isfinite(reach)
    candidates: list[tuple[Tensor, Tensor, Tensor]] = []  # (row, column, computed logit)
    settled_rows = 0
    w_t = weight.t()
    with torch.inference_mode(), pinned_precision():
        for start in range(0, n, rows):
            m = min(rows, n - start)
            # Products always have a whole number of blocks of rows (the last chunk is
            # zero-padded up to one), so a row never meets the small-M kernels of BLAS.
            m_pad = min(rows, -(-m // block) * block)
            h_pad[:m].copy_(states[start : start + m])
            h_pad[m:m_pad].zero_()
            _head_product(h_pad[:m_pad], w_t, bias, logits[:m_pad], t_all[start : start + m_pad, 0])
            # Row-wise passes over cache-sized blocks; blocks past the real rows are skipped.
            for b in range(0, m, block):
                z = logits[b : b + block]
                r = slice(start + b, start + b + z.shape[0])
                _count_passes(
                    z, t_all[r], work[: z.shape[0]], z_target[r], margin[r], width[r], greater[r], at_least[r]
                )
                if not softcap:
                    _nll_passes(z, None, work[: z.shape[0]], z_max[r], None, sum_exp[r])
            # The band holds the target itself; a row with anything more has candidates, found
            # while the chunk's logits exist and settled once per call.
            real = slice(start, start + m)
            flagged = (((at_least[real] - greater[real]) > 1) & finite[real]).nonzero()[:, 0]
            if flagged.numel():
                candidates.append(
                    _band_candidates(logits[:m], flagged, z_target[real], width[real], work, start)
                )
                settled_rows += flagged.numel()
            if softcap:
                for b in range(0, m, block):
                    z = softcapped(logits[b : b + block], softcap, inplace=True)
                    r = slice(start + b, start + b + z.shape[0])
                    _nll_passes(z, t_all[r], work[: z.shape[0]], z_max[r], z_nll[r], sum_exp[r])
        # amax propagates NaN and +inf: a row holding either has a non-finite maximum.
        bad = ~(finite & torch.isfinite(z_max[:n, 0]) & torch.isfinite(z_target[:n, 0]))
        if bool(bad.any()):
            raise _non_finite(bad, states, fhead, hidden.dtype)
        # nll = logsumexp(z) - z_t = (max - z_t) + log(sum exp(z - max)), once for all rows.
        nll = (z_max - z_nll)[:n, 0] + torch.log(sum_exp[:n])
        n_greater = greater[:n].to(torch.int64)
        n_equal = torch.ones(n, dtype=torch.int64, device=device)
        settled_logits = _settle_band(candidates, states, fhead, targets, z_target[:n, 0], n_greater, n_equal)
    if tally is not None:
        tally.add(n, settled_rows, settled_logits)
    return n_greater.to(torch.int32), n_equal.to(torch.int32), nll


def _head_product(h: Tensor, w_t: Tensor, bias: Tensor | None, out: Tensor, targets: Tensor) -> None:
    """A chunk's float32 logits into `out`, in whatever order the BLAS sums. `targets` goes unused
    here: a test's adversarial backend, which moves each logit within its bound toward its row's
    target logit, takes this function's place and reads it."""
    if bias is None:
        torch.mm(h, w_t, out=out)
    else:
        torch.addmm(bias, h, w_t, out=out)


def _band_candidates(logits, flagged, z_t, width, work, offset) -> tuple[Tensor, Tensor, Tensor]:
    """A chunk's band candidates: (row in the call, column, computed logit) of every logit of the
    `flagged` rows (chunk-local) with z_t - W <= z <= z_t + W, the target among them. The rows are
    copied a block at a time into `work`, which stays in cache."""
    lo, hi = z_t[flagged] - width[flagged], z_t[flagged] + width[flagged]
    found = []
    for start in range(0, flagged.numel(), work.shape[0]):
        group = flagged[start : start + work.shape[0]]
        z = torch.index_select(logits, 0, group, out=work[: group.numel()])
        g = slice(start, start + group.numel())
        # The passes' own predicates on the same float32 values: z >= z_t - W and not z > z_t + W.
        rows, cols = ((z >= lo[g]) & (z <= hi[g])).nonzero(as_tuple=True)
        found.append((group[rows] + offset, cols, z[rows, cols]))
    return tuple(torch.cat(parts) for parts in zip(*found, strict=True))


def _settle_band(candidates, states, head, targets, z_t, out_greater, out_equal) -> int:
    """Settle the band candidates of a call (`_band_candidates` of each chunk) against their rows'
    targets, adding to `out_*` [n]. A candidate whose computed gap to z_t exceeds both logits' own
    bounds (`exact.logit_margins`, per column) is decided by that gap; the rest by exact sign
    (`exact.settle_pairs`). Returns how many candidates went to `settle_pairs`."""
    if not candidates:
        return 0
    rows, cols, z_v = (torch.cat(parts) for parts in zip(*candidates, strict=True))
    t = targets[rows]
    keep = cols != t
    rows, cols, z_v, t = rows[keep], cols[keep], z_v[keep], t[keep]
    h_norm = torch.linalg.vector_norm(states[rows].to(torch.float64), dim=1)
    col_norm = head.row_norms()
    if head.bias is None:
        b_v = b_t = 0.0
    else:
        b_v, b_t = head.bias[cols].to(torch.float64).abs(), head.bias[t].to(torch.float64).abs()
    d = states.shape[1]
    allowed = logit_margins(h_norm, col_norm[cols], b_v, d, UNIT) + logit_margins(
        h_norm, col_norm[t], b_t, d, UNIT
    )
    gap = z_v.to(torch.float64) - z_t[rows].to(torch.float64)
    decided = gap.abs() > allowed
    out_greater.index_add_(0, rows, (decided & (gap > 0)).to(torch.int64))
    rows, cols = rows[~decided], cols[~decided]
    if rows.numel():
        # settle_pairs counts per row of what it is given: the call's rows that still have pairs.
        unique, local = torch.unique(rows, return_inverse=True)
        greater, equal = settle_pairs(
            states[unique], head.weight, head.bias, targets[unique], local, cols, n=unique.numel()
        )
        out_greater.index_add_(0, unique, greater)
        out_equal.index_add_(0, unique, equal)
    return int(cols.numel())


def _non_finite(bad: Tensor, states: Tensor, head: FloatHead, dtype: torch.dtype) -> NonFiniteLogitsError:
    """The error for the rows flagged `bad`; the first row's raw logits are recomputed to count its
    non-finite values (only on this error path). `dtype`: the body's, for the hint."""
    rows = bad.nonzero()[:, 0]
    first = int(rows[0])
    values = int((~torch.isfinite(head(states[first : first + 1]))).sum())
    return NonFiniteLogitsError(first, len(rows), values, head.rows, dtype)


def _count_passes(z, t, work, z_target, margin, width, greater, at_least) -> None:
    """The counting passes over one cache-resident block of raw logits: the target logit, the band's
    half-width, and the counts above the band and at or above its bottom. Comparisons write float
    0/1 into the reused buffer; float sums count them exactly."""
    torch.gather(z, 1, t, out=z_target)
    width.copy_(band_halfwidth(z_target, margin))
    torch.gt(z, z_target + width, out=work)
    torch.sum(work, 1, dtype=greater.dtype, out=greater)
    torch.ge(z, z_target - width, out=work)
    torch.sum(work, 1, dtype=at_least.dtype, out=at_least)


def _nll_passes(z, t, work, z_max, z_nll, sum_exp) -> None:
    """The nll's passes over one block: its target logit when `t` is given (the capped one), the
    maximum and the exp-sum. exp(z - max) is computed as exp2((z - max) log2 e): torch's exp2
    kernel is ~3x faster than exp on CPU. The difference comes first, so the maximum's own term is
    exactly 1 however large the logits (scaling first would round each term by u |z|)."""
    if t is not None:
        torch.gather(z, 1, t, out=z_nll)
    torch.amax(z, 1, keepdim=True, out=z_max)
    torch.sub(z, z_max, out=work).mul_(LOG2E).exp2_()
    torch.sum(work, 1, out=sum_exp)
