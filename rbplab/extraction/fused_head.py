"""The fused exact rank head: hidden states and the output head to (n_greater, n_equal, nll) in one
Triton kernel, the logits never written to memory.

Why a kernel of our own. The fp32 head (`rbplab.extraction.ranks.rank_stats`) materialises float32
logits in chunks and runs its passes over them, at the FP32 rate: by arithmetic 1.7x a bare bf16
forward at Qwen2.5-7B and 3.4x at Qwen2.5-0.5B on an H100. For a half-precision body the head's
inputs are half-precision values whose pairwise products are exact in float32, so tensor cores
accumulating in float32 compute the logits to within the error bound of `rbplab.extraction.exact`.

How the counts are exact. The kernel computes each row's target logit z_t in a "gathered" tile of
exactly the shape, dtype and K loop of the main tiles (column j holds the head row of row j's
target), then walks V: it counts logits above the band z_t + W and lists up to MAX_CANDIDATES
logits inside it, which are settled here by exact sign (`exact.settle_pairs`); a row with more is
ranked by the fp32 head. The counts are taken on raw logits; a softcap enters the nll only.

What is checked at run time, per row:
- the kernel's z_t against its exact value (one float64 dot product a row,
  `exact.target_logit_ratios`): an error above the per-logit bound of the accumulation model
  (`exact.tensor_core_unit`) refuses the call. This can catch a GPU whose tensor cores are less
  accurate than the model, where a target logit shows it; it cannot see an error that stays within
  the bound on the target while exceeding it elsewhere (`benchmarks/gpu_check.py` measures the
  bound on inputs built to make it tight);
- the in-tile value at column t against the band of the gathered z_t: both come from one function,
  so this catches a wrong gather or a compiler that computes them differently, not the arithmetic.
Either failure is a one-line `HeadCertificateError`, and nothing computed is kept.

Batch invariance: the tile configuration is fixed (no autotuning), each row's K loop and V walk are
the same whatever rows share its program, so a row's nll never depends on its batch (its counts are
exact in any case).

The kernel runs on CUDA tensors. Under `TRITON_INTERPRET=1` (read when this module is imported) it
runs on CPU tensors through Triton's interpreter: slow, for tests. The interpreter computes tile
products with numpy and ignores `input_precision`; half-precision numerics on tensor cores are
checked on a GPU (`benchmarks/gpu_check.py`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor, nn

from rbplab.core.errors import InvalidArgumentError, InvalidTypeError, RbplabError
from rbplab.extraction.exact import (
    BAND_SLACK,
    MAX_CANDIDATES,
    Tally,
    refuse_overflow,
    row_bounds,
    settle_pairs,
    target_logit_ratios,
    tensor_core_unit,
)
from rbplab.extraction.exact import UNIT as UNIT_F32
from rbplab.extraction.ranks import FloatHead, NonFiniteLogitsError, OutputHead, rank_stats

# Fixed tiles (no autotuning: a row's result must not depend on a tuning run). 128 rows x 256 head
# rows per tile, K in steps of 64 (32 for float32, whose tiles are twice the bytes). A GPU batch of
# 16K scored rows makes 128 programs, about one per H100 multiprocessor. On an H200, 128 x 256 ran
# the head 1.3x (Qwen2.5-0.5B shape) to 1.4x (7B) faster than 128 x 128, and 4 stages no faster
# than 3 (benchmarks/results/gpu_head_variants-2026-11-28-3-final.txt). The tile width changes no
# sum: each logit's K loop is the same whatever the tile.
BLOCK_N = 128
BLOCK_V = 256
BLOCK_D_HALF = 64
BLOCK_D_FP32 = 32
NUM_WARPS = 8
NUM_STAGES = 3
# A constexpr: compiled kernels may read no other kind of global (the interpreter does not check).
LOG2E = tl.constexpr(1.4426950408889634)
# tanh's Taylor coefficients 2^2n (2^2n - 1) B_2n / (2n)!, n = 2..11 (x^3 .. x^21): below 0.6 the
# terms fall by ~(2x/pi)^2 <= 0.15 each, so 11 terms leave a remainder far below float32's u.
TANH_C1 = tl.constexpr(-0.3333333333333333)
TANH_C2 = tl.constexpr(0.13333333333333333)
TANH_C3 = tl.constexpr(-0.05396825396825397)
TANH_C4 = tl.constexpr(0.021869488536155203)
TANH_C5 = tl.constexpr(-0.008863235529902197)
TANH_C6 = tl.constexpr(0.003592128036572481)
TANH_C7 = tl.constexpr(-0.0014558343870513183)
TANH_C8 = tl.constexpr(0.000590027440945586)
TANH_C9 = tl.constexpr(-0.00023912911424355248)
TANH_C10 = tl.constexpr(9.691537956929451e-05)
UNIT = tl.constexpr(UNIT_F32)
SLACK = tl.constexpr(BAND_SLACK)

INTERPRETED = triton.knobs.runtime.interpret  # as Triton read it when the kernel below was defined


class HeadCertificateError(RbplabError, ArithmeticError):
    """The fused head's target logits lay farther from their exact values than the error bound
    allows, or outside the band of their own in-tile values: its ranks would not be exact, so
    nothing it computed is kept."""


@triton.jit
def _logits_tile(
    H,
    W,
    B,
    row_offsets,
    row_ok,
    cols,
    col_offsets,
    col_ok,
    d,
    HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One [BLOCK_N, BLOCK_V] tile of raw logits: the K loop and the bias. The gathered tile of
    target logits and every main tile come from this one function, so their arithmetic is the
    same by construction."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    for k0 in range(0, d, BLOCK_D):
        ks = k0 + tl.arange(0, BLOCK_D)
        k_ok = ks < d
        h = tl.load(H + row_offsets[:, None] + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(W + col_offsets[None, :] + ks[:, None], mask=col_ok[None, :] & k_ok[:, None], other=0.0)
        if IEEE:
            acc = tl.dot(h, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(h, w, acc)
    if HAS_BIAS:
        acc = acc + tl.load(B + cols, mask=col_ok, other=0.0)[None, :]
    return acc


@triton.jit
def _tanh(x):
    """tanh for the nll of a softcapped head (the counts never see it): an odd Taylor polynomial
    below |x| = 0.6, where (1 - e) / (1 + e) would cancel (its error is ~u of 1, not of tanh x), and
    that quotient above, where 1 - e >= 0.7 loses at most a bit to the approximate exp2 of GPUs.
    Within 8u of float64 under the interpreter (a test checks it on a dense grid)."""
    a = tl.abs(x)
    x2 = x * x
    p = TANH_C10
    p = p * x2 + TANH_C9
    p = p * x2 + TANH_C8
    p = p * x2 + TANH_C7
    p = p * x2 + TANH_C6
    p = p * x2 + TANH_C5
    p = p * x2 + TANH_C4
    p = p * x2 + TANH_C3
    p = p * x2 + TANH_C2
    p = p * x2 + TANH_C1
    p = p * x2 + 1.0
    e = tl.exp2(a * (-2.0 * LOG2E))
    th = tl.where(a < 0.6, a * p, (1.0 - e) / (1.0 + e))
    return tl.where(x < 0, -th, th)


@triton.jit
def _rank_kernel(
    H,  # [n, d] hidden states
    W,  # [>= V, d] head rows (only the first V are read)
    B,  # [V] float32 bias (read when HAS_BIAS)
    T,  # [n] int32 target ids: the columns counted against
    G,  # [n] int32 target ids of the gathered tile (== T; a test passes others to reach the error)
    M,  # [n] float32 A_i: the absolute part of each row's logit error bound (rbplab.extraction.exact)
    OUT_GREATER,  # logits above the band
    OUT_BAND,  # logits inside the band, the target's column left out
    OUT_CAND,  # [n, MAX_CAND] int32: the first MAX_CAND of those columns
    OUT_NLL,
    OUT_ZT,
    OUT_BAD,  # NaN or +inf logits per row
    OUT_MISMATCH,  # certificate failures per row
    n,
    V,
    d,
    stride_h,
    stride_w,
    softcap,  # the nll's cap (read when HAS_CAP); the counts use raw logits
    HAS_BIAS: tl.constexpr,
    HAS_CAP: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MAX_CAND: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    lanes = tl.arange(0, BLOCK_V)
    t = tl.load(T + rows, mask=row_ok, other=0)
    row_offsets = rows.to(tl.int64) * stride_h  # 64-bit: rows x d and V x d can pass 2**31

    # The gathered tile: column j < BLOCK_N holds the head row of row j's target (others repeat a
    # valid id). Same shape, K loop and epilogue as the main tiles below.
    gathered_ok = (lanes < BLOCK_N) & (pid * BLOCK_N + lanes < n)
    g_cols = tl.load(G + pid * BLOCK_N + lanes, mask=gathered_ok, other=0)
    g_offsets = g_cols.to(tl.int64) * stride_w
    acc = _logits_tile(
        H, W, B, row_offsets, row_ok, g_cols, g_offsets, g_cols >= 0, d,
        HAS_BIAS, IEEE, BLOCK_N, BLOCK_V, BLOCK_D,
    )  # fmt: skip
    diagonal = lanes[None, :] == tl.arange(0, BLOCK_N)[:, None]
    z_t = tl.max(tl.where(diagonal, acc, float("-inf")), axis=1)
    # The band around z_t (exact.band_halfwidth, the same expression): outside it a logit is on
    # the same side of z_t as in exact arithmetic; inside it, it is a candidate for settling.
    margin = tl.load(M + rows, mask=row_ok, other=0.0)
    width = (2.0 * margin + 4.0 * UNIT * tl.abs(z_t)) * SLACK
    hi = z_t + width
    lo = z_t - width

    m = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    greater = tl.zeros((BLOCK_N,), dtype=tl.int32)
    band = tl.zeros((BLOCK_N,), dtype=tl.int32)
    below_inf = tl.zeros((BLOCK_N,), dtype=tl.int32)
    seen = tl.zeros((BLOCK_N,), dtype=tl.int32)
    certified = tl.zeros((BLOCK_N,), dtype=tl.int32)
    cand_base = OUT_CAND + rows.to(tl.int64)[:, None] * MAX_CAND
    # The epilogue runs on every logit, at the CUDA-core rate, so each operation per element costs
    # about as much as the tile's matrix product at d ~ 900: padding is masked once, and all else
    # that can be per row is.
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + lanes
        col_offsets = cols.to(tl.int64) * stride_w
        acc = _logits_tile(
            H, W, B, row_offsets, row_ok, cols, col_offsets, cols < V, d,
            HAS_BIAS, IEEE, BLOCK_N, BLOCK_V, BLOCK_D,
        )  # fmt: skip
        # Columns past V hold -inf: below any band of a finite z_t (a row whose z_t is not finite
        # is refused), a probability of 0.
        z = tl.where((cols < V)[None, :], acc, float("-inf"))
        # Counted as they are compared: NaN is below nothing, +inf is not below +inf.
        below_inf += tl.sum((z < float("inf")).to(tl.int32), axis=1)
        greater += tl.sum((z > hi[:, None]).to(tl.int32), axis=1)
        inside = (z >= lo[:, None]) & (z <= hi[:, None])
        at_t = cols[None, :] == t[:, None]
        # Consistency: the in-tile value at column t lies in the band of the gathered z_t. Both come
        # from one function, so this catches a wrong gather, not inaccurate arithmetic.
        certified += tl.sum((inside & at_t).to(tl.int32), axis=1)
        seen += ((t >= v0) & (t < v0 + BLOCK_V)).to(tl.int32)
        candidate = inside & ~at_t & row_ok[:, None]
        found = tl.sum(candidate.to(tl.int32), axis=1)
        # Candidates are rare (most tiles hold none), so their columns are written only when a
        # tile has any: the first MAX_CAND of each row, in column order.
        if tl.sum(found, axis=0) > 0:
            slot = band[:, None] + tl.cumsum(candidate.to(tl.int32), axis=1) - 1
            keep = candidate & (slot < MAX_CAND)
            tl.store(cand_base + slot, cols[None, :] + 0 * slot, mask=keep)
        band += found
        # The nll's logits: capped where the model caps them (padding stays -inf).
        if HAS_CAP:
            z = tl.where((cols < V)[None, :], softcap * _tanh(acc / softcap), float("-inf"))
        # Online exp-sum, shifted by the running maximum; a row whose logits so far are all -inf is
        # shifted by 0 instead, since exp2(-inf - -inf) is NaN and exp2(-inf) is the 0 wanted.
        m_new = tl.maximum(m, tl.max(z, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2((m - shift) * LOG2E) + tl.sum(tl.exp2((z - shift[:, None]) * LOG2E), axis=1)
        m = m_new
    walked = tl.cdiv(V, BLOCK_V) * BLOCK_V
    bad = walked - below_inf
    mismatch = (certified != 1).to(tl.int32) + (seen != 1).to(tl.int32)
    z_nll = z_t
    if HAS_CAP:
        z_nll = softcap * _tanh(z_t / softcap)
    nll = (m - z_nll) + tl.log(s)
    tl.store(OUT_GREATER + rows, greater, mask=row_ok)
    tl.store(OUT_BAND + rows, band, mask=row_ok)
    tl.store(OUT_NLL + rows, nll, mask=row_ok)
    tl.store(OUT_ZT + rows, z_t, mask=row_ok)
    tl.store(OUT_BAD + rows, bad, mask=row_ok)
    tl.store(OUT_MISMATCH + rows, mismatch, mask=row_ok)


class FusedHead(OutputHead):
    """The output head as the fused kernel reads it: the model's own weight (a view of its first
    `rows` rows, no copy) and a float32 bias. A half-precision weight with hidden states of another
    dtype is ranked in float32 (a copy made once), since the kernel multiplies one dtype."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__(weight, bias)
        self._fp32: Tensor | None = None
        self._float: FloatHead | None = None

    @staticmethod
    def prepared(weight: Tensor) -> Tensor:
        if weight.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise InvalidTypeError(
                f"the fused head multiplies float32, bfloat16 or float16, not {weight.dtype}"
            )
        return weight if weight.stride(1) == 1 else weight.contiguous()

    def float_head(self) -> FloatHead:
        """The fp32 head over the same rows (a float32 copy of a half weight, made once): what ranks
        a row whose band holds more than MAX_CANDIDATES logits."""
        if self._float is None:
            self._float = FloatHead(self.weight_for(torch.float32), self.bias)
        return self._float

    def weight_for(self, dtype: torch.dtype) -> Tensor:
        if dtype == self.weight.dtype:
            return self.weight
        if self._fp32 is None:
            self._fp32 = self.weight.to(torch.float32).contiguous()
        return self._fp32


def accumulation_unit(half: bool, device: torch.device) -> float:
    """u' of the kernel's products: IEEE float32 (FMA, Triton's ieee dot) rounds, u; tensor cores
    truncate, `exact.tensor_core_unit` of this GPU's family (the worst case off a GPU)."""
    if not half:
        return UNIT_F32
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return tensor_core_unit(capability)


def fused_rank_stats(
    hidden: Tensor,
    head: nn.Module,
    targets: Tensor,
    *,
    vocab_size: int,
    softcap: float | None = None,
    tally: Tally | None = None,
    gathered: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """`rank_stats`' contract through the fused kernel: (n_greater int32, n_equal int32, nll
    float32), each [n], over the first `vocab_size` rows of `head`; the counts equal exact
    arithmetic's (`rbplab.extraction.exact`: the kernel counts above the band and lists the band's
    candidates, which are settled here by exact sign). A softcap enters the nll only.

    Raises LogitRangeError for rows whose logits could overflow, NonFiniteLogitsError for rows
    whose logits hold NaN or +inf or whose target logit is not finite, and HeadCertificateError
    when a row's target logit from the kernel lies farther from its exact value than the
    accumulation model allows (`exact.target_logit_ratios`), or outside the band of its own gathered
    value. `tally` counts the rows settled. `gathered`: the ids whose head rows give z_t (default
    `targets`); a test passes others to show that the checks catch a z_t that is not the right one."""
    fhead = FusedHead.from_module(head, vocab_size)
    targets = fhead.checked(hidden, targets, vocab_size)
    device = hidden.device
    if device.type != "cuda" and not INTERPRETED:
        raise InvalidArgumentError(
            f"the fused head runs on CUDA GPUs, not {device.type}; use head='fp32' "
            "(TRITON_INTERPRET=1 runs the kernel on CPU tensors, for tests)"
        )
    n, d = hidden.shape
    if n == 0:
        empty = torch.zeros(0, dtype=torch.int32, device=device)
        return empty, empty.clone(), torch.zeros(0, dtype=torch.float32, device=device)
    # One dtype for both operands: a half weight with half states stays half (tensor cores);
    # anything else is multiplied in IEEE float32.
    half = hidden.dtype in (torch.bfloat16, torch.float16) and hidden.dtype == fhead.weight.dtype
    if half and INTERPRETED and hidden.dtype == torch.bfloat16:
        raise InvalidArgumentError(
            "Triton's interpreter multiplies bfloat16 tiles as raw bit patterns: run the fused head "
            "on bfloat16 on a GPU, or pass float32 states and head (bfloat16 values are exact in float32)"
        )
    dtype = hidden.dtype if half else torch.float32
    h = hidden.to(dtype)
    if h.stride(1) != 1:
        h = h.contiguous()
    w = fhead.weight_for(dtype)
    w_norm, b_max = fhead.norms()
    unit = accumulation_unit(half, device)
    margin, reach = row_bounds(h, w_norm, b_max, unit)
    refuse_overflow(torch.where(torch.isfinite(reach), reach, 0.0))
    t = targets.to(torch.int32).contiguous()
    g = t if gathered is None else gathered.to(device=device, dtype=torch.int32).contiguous()
    greater = torch.empty(n, dtype=torch.int32, device=device)
    band = torch.empty_like(greater)
    bad = torch.empty_like(greater)
    mismatch = torch.empty_like(greater)
    candidates = torch.empty(n, MAX_CANDIDATES, dtype=torch.int32, device=device)
    nll = torch.empty(n, dtype=torch.float32, device=device)
    z_t = torch.empty_like(nll)
    bias = fhead.bias if fhead.bias is not None else nll  # a placeholder pointer, never read
    _rank_kernel[(triton.cdiv(n, BLOCK_N),)](
        h,
        w,
        bias,
        t,
        g,
        margin,
        greater,
        band,
        candidates,
        nll,
        z_t,
        bad,
        mismatch,
        n,
        vocab_size,
        d,
        h.stride(0),
        w.stride(0),
        float(softcap or 1.0),
        HAS_BIAS=fhead.bias is not None,
        HAS_CAP=bool(softcap),
        IEEE=not half,
        BLOCK_N=BLOCK_N,
        BLOCK_V=BLOCK_V,
        BLOCK_D=BLOCK_D_HALF if half else BLOCK_D_FP32,
        MAX_CAND=MAX_CANDIDATES,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    # One host sync per call: the rows the counts cannot be trusted for.
    flagged = (bad > 0) | ~torch.isfinite(z_t) | ~torch.isfinite(reach)
    if bool(flagged.any()):
        rows = flagged.nonzero()[:, 0]
        first = int(rows[0])
        values = int(bad[first]) if int(bad[first]) else 1
        raise NonFiniteLogitsError(first, len(rows), values, vocab_size, hidden.dtype)
    _check_target_logits(h, w, fhead.bias, targets, z_t, unit, mismatch)
    n_greater, n_equal = _settle_listed(fhead, h, w, targets, greater, band, candidates, vocab_size, tally)
    return n_greater, n_equal, nll


def _check_target_logits(h, w, bias, targets, z_t, unit, mismatch) -> None:
    """Refuse the call (HeadCertificateError) when a row's kernel z_t lies farther from its exact
    value than its bound allows, or outside the band of its own in-tile value: one dot product a
    row, so an accumulator worse than the model of `exact.tensor_core_unit` is seen where it errs
    on a target logit."""
    ratios = target_logit_ratios(h, w, bias, targets, z_t, unit)
    failed = (ratios > 1) | (mismatch > 0)
    if bool(failed.any()):
        first = int(failed.nonzero()[0, 0])
        raise HeadCertificateError(
            f"fused head: {int(failed.sum())} target logit(s) outside their error bound (first at row "
            f"{first} of the call, {float(ratios[first]):.3g}x its bound): this GPU's arithmetic is less "
            "accurate than the bound assumes; nothing was kept: score with head='fp32' and report this "
            "GPU and Triton version"
        )


def _settle_listed(fhead, h, w, t, greater, band, candidates, vocab_size, tally) -> tuple[Tensor, Tensor]:
    """The counts from the kernel's: the candidates the kernel listed, settled by exact sign from
    the states and head rows it multiplied. A row with more than MAX_CANDIDATES (a wide band:
    tensor cores' bound, logits packed near z_t) is ranked again by the fp32 head (`rank_stats`):
    IEEE float32 logits, whose band is narrower, then its own settling."""
    n = h.shape[0]
    greater = greater.long()
    equal = torch.ones_like(greater)
    listed = ((band > 0) & (band <= MAX_CANDIDATES)).nonzero()[:, 0]
    whole = (band > MAX_CANDIDATES).nonzero()[:, 0]
    logits = 0
    if listed.numel():
        slots = torch.arange(MAX_CANDIDATES, device=h.device)
        r, j = (slots[None, :] < band[listed, None]).nonzero(as_tuple=True)
        rows, cols = listed[r], candidates[listed[r], j].long()
        add_greater, add_equal = settle_pairs(h, w, fhead.bias, t, rows, cols, n=n)
        greater += add_greater
        equal += add_equal
        logits = int(cols.numel())
    if whole.numel():
        inner = Tally()
        again = rank_stats(h[whole], fhead.float_head(), t[whole], vocab_size=vocab_size, tally=inner)
        greater[whole], equal[whole] = again[0].long(), again[1].long()
        logits += inner.logits
    if tally is not None:
        tally.add(n, int(listed.numel() + whole.numel()), logits)
    return greater.to(torch.int32), equal.to(torch.int32)
