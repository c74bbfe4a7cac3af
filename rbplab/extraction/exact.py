"""Ranks equal to exact arithmetic: a rigorous error band around each target logit, and the exact
sign of z_v - z_t for the few logits inside it.

What the counts equal. For a row with hidden state h (the float32 values fed to the head) and head
rows w_v with bias b_v (float32 values), let z_v = h . w_v + b_v in real arithmetic. Then n_greater
= #{v : z_v > z_t} and n_equal = #{v : z_v = z_t}, exactly: no summation order, tile, batch, BLAS
or device changes them, and a tie in real arithmetic is a tie. A softcap c tanh(z / c) (or any
strictly increasing map) keeps the order of the logits, so the counts are taken on raw logits and
the cap enters only the nll.

The invariant. Both heads compute z_v in float32 in an order the backend picks. For every row i and
column v the computed value satisfies

    |computed z_v - z_v| <= E_iv = gamma_{d+2}(u') (sum_k |h_k w_vk| + |b_v|) + U_iv,
    U_iv = (1 + gamma_{d+2}(u')) tau (2d + 3 + ||h||_1 + ||w_v||_1),     tau = 2**-126.

- gamma_n(u') = n u' / (1 - n u') bounds a sum of n terms in any order with each operation's
  relative error <= u' (Higham, Accuracy and Stability, eq. 3.5 and Lemma 3.1). The bias is one of
  the terms: a BLAS may start its accumulation from it (addmm's beta C).
- u' = u = 2**-24 for IEEE float32 (BLAS, FMA, Triton's ieee dot). Tensor cores: `tensor_core_unit`.
- U bounds what underflow can lose, even with flush-to-zero: each of the 2d + 1 operations loses
  < tau when its result is flushed, and a flushed subnormal input drops |h_k w_vk| < tau |w_vk| or
  tau |h_k|. Later roundings scale these by at most 1 + gamma.
Per row the band uses A_i >= E_iv for every v (Cauchy-Schwarz, ||x||_1 <= sqrt(d) ||x||_2):

    A_i = gamma_{d+2}(u') (||h_i|| max_v ||w_v|| + max_v |b_v|)
          + (1 + gamma_{d+2}(u')) tau (2d + 3 + sqrt(d) (||h_i|| + max_v ||w_v||)),

computed in float64 and rounded up to float32. The band's half-width around the computed z_t is
W_i = (2 A_i + 4u |z_t|) (1 + 2**-18): 2A_i for the two logits' errors, 4u |z_t| and the factor
for the float32 rounding of z_t +- W_i itself. Then every computed logit is
- above the band (z_v > z_t + W_i): above in real arithmetic too (counted as greater);
- below it (z_v < z_t - W_i): below in real arithmetic too (not counted);
- inside it: a candidate, settled by the exact sign of z_v - z_t (`settle_pairs`).

Overflow. Every product and partial sum of a row is at most Z_i = (1 + gamma) (||h_i|| max ||w_v||
+ max |b_v|) + U_i in magnitude. A row with Z_i >= the largest float32 could reach inf where the
exact logit is finite: it is refused in one line (`LogitRangeError`), never ranked. A bias of -inf
(a masked token) is exact: its logit is -inf in real arithmetic too. NaN or +inf in the head is
refused when the head is loaded.

Exact signs. A logit z_v is a sum of d + 1 terms: the products h_k w_vk, each exact in float64
(24 + 24 significant bits < 53, exponents far inside float64's range), and b_v. Float64 sums them
with error <= gamma_{d+1}(2**-53) sum |terms|; where z64_v - z64_t exceeds both logits' errors, its
sign is the exact sign. Where it does not (exact ties, cancellation below float64's rounding), a long
accumulator sums the pair's 2d + 2 terms as integers (`exact_sign`): the Kulisch accumulator (Kulisch and
Miranker, Computer Arithmetic in Theory and Practice, 1981; Neal, "Fast exact summation using small
and large superaccumulators", 2015), whose result is exact by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rbplab.core.errors import RbplabError

UNIT = 2.0**-24  # float32 unit roundoff
UNIT64 = 2.0**-53
TINY = 2.0**-126  # float32's smallest normal: what one flushed operation can lose, at most
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# The band's rounding slack: z_t +- W in float32 moves each end by <= u |z_t +- W|; 4u |z_t| in W and
# this factor cover it and the few float32 operations that compute W.
BAND_SLACK = 1.0 + 2.0**-18
# Float64 products held at once while settling (32 MB): about seven such arrays are alive at once,
# which `rbplab plan` counts (SETTLE_BYTES).
PAIR_ELEMENTS = 1 << 22
# Band candidates the fused kernel lists per row; a row with more is ranked by the fp32 head.
MAX_CANDIDATES = 64
SETTLE_BYTES = 7 * PAIR_ELEMENTS * 8
# The long accumulator's limbs: 26 bits, so a 53-bit significand split in 26-bit pieces and shifted
# by < 26 fits an int64, and 2**30 such pieces sum without overflow.
LIMB_BITS = 26

# Tensor cores, per compute capability: the smallest block of products an MMA aligns together, as
# measured. Model (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
# PeerJ CS 2021): products are exact; a block of k products and the accumulator (k + 1 terms) is
# aligned to its largest term with truncation (no guard bits assumed), summed exactly, then
# normalised to float32 by truncation. Each of the k + 2 events errs by < 2u of the block's
# largest magnitude, so k products cost (k + 2) 2u: u' = 2u (k + 2) / k per product.
# V100 (7.0) and T4 (7.5) align blocks of 4, A100 (8.0) blocks of 8 (Fasi et al.); we take 4 for
# all three. Hopper's wgmma (9.0), Blackwell (10.x, 12.x) and any other family have no measurement
# we rely on: k = 1, u' = 6u, the model's worst case. `benchmarks/gpu_check.py` measures the bound.
MEASURED_BLOCK = {(7, 0): 4, (7, 5): 4, (8, 0): 4}


class LogitRangeError(RbplabError, FloatingPointError):
    """Logits outside what float32 ranks exactly: rows whose products or partial sums can reach the
    largest float32 (a computed inf would not be the exact logit), or a head holding NaN or inf."""


def gamma(terms: int, unit: float) -> float:
    """gamma_n = n u / (1 - n u): the relative bound of an n-term float sum in any order."""
    nu = terms * unit
    if nu >= 1:
        return math.inf
    return nu / (1 - nu)


def tensor_core_unit(capability: tuple[int, int] | None) -> float:
    """u' of a tensor-core product on a GPU of `capability` (None: unknown, the worst case):
    2u (k + 2) / k with k the family's measured block (`MEASURED_BLOCK`), else k = 1."""
    k = MEASURED_BLOCK.get(capability, 1) if capability is not None else 1
    return 2 * UNIT * (k + 2) / k


def head_norms(weight: Tensor, bias: Tensor | None, rows: int) -> tuple[Tensor, float]:
    """(||w_v|| for each of the first `rows` head rows, float64 [rows]; max_v |b_v| over finite b_v),
    a block of rows at a time (a float64 copy of a 150K x 3584 head would be 4 GB). A head holding
    NaN or inf in its weight, or NaN or +inf in its bias, is refused (LogitRangeError, one line)."""
    step = max(1, (1 << 24) // max(1, weight.shape[1]))
    norms = torch.empty(rows, dtype=torch.float64, device=weight.device)
    for start in range(0, rows, step):
        block = weight[start : min(rows, start + step)].to(torch.float64)
        norms[start : start + step] = torch.linalg.vector_norm(block, dim=1)
    if not bool(torch.isfinite(norms).all()):
        raise LogitRangeError(
            "the output head's weight holds NaN or inf: check or re-download the checkpoint"
        )
    if bias is None or rows == 0:
        return norms, 0.0
    b = bias[:rows].to(torch.float64)
    if bool((torch.isnan(b) | (b == math.inf)).any()):
        raise LogitRangeError("the output head's bias holds NaN or +inf: check or re-download the checkpoint")
    finite = b[torch.isfinite(b)]
    return norms, float(finite.abs().max()) if finite.numel() else 0.0


def underflow_term(g: float, d: int, ones):
    """U = (1 + gamma) tau (2d + 3 + ||h||_1 + ||w||_1) (module docstring), `ones` the two 1-norms'
    sum or its Cauchy-Schwarz bound sqrt(d) (||h|| + ||w||): the one place the term is written."""
    return (1 + g) * TINY * (2 * d + 3 + ones)


def logit_margins(h_norm: Tensor, w_norm: Tensor, b_abs: Tensor | float, d: int, unit: float) -> Tensor:
    """E_iv >= |computed z_v - z_v| for single logits, float64: the module docstring's bound with
    Cauchy-Schwarz per column (||h_i|| ||w_v|| for sum_k |h_k w_vk|), not per head."""
    g = gamma(d + 2, unit)
    under = underflow_term(g, d, math.sqrt(d) * (h_norm + w_norm))
    return (g * (h_norm * w_norm + b_abs) + under) * (1 + 2.0**-40)


def round_up(values: Tensor) -> Tensor:
    """float64 values as float32, each rounded toward +inf (never below the float64 value)."""
    out = values.to(torch.float32)
    low = out.to(torch.float64) < values
    return torch.where(low, torch.nextafter(out, torch.full_like(out, math.inf)), out)


def row_bounds(hidden: Tensor, w_norm: float, b_max: float, unit: float) -> tuple[Tensor, Tensor]:
    """(A_i rounded up to float32, Z_i in float64) for each row of `hidden` [n, d] (module
    docstring), on hidden's device, a block of rows at a time in float64. Non-finite rows give
    inf or NaN: their logits are refused anyway."""
    n, d = hidden.shape
    g = gamma(d + 2, unit)
    root = math.sqrt(d)
    margins = torch.empty(n, dtype=torch.float32, device=hidden.device)
    reach = torch.empty(n, dtype=torch.float64, device=hidden.device)
    step = max(1, (1 << 22) // max(1, d))
    for start in range(0, n, step):
        h = hidden[start : start + step].to(torch.float64)
        h_norm = torch.linalg.vector_norm(h, dim=1)
        under = underflow_term(g, d, root * (h_norm + w_norm))
        total = h_norm * w_norm + b_max
        # 1 + 2**-40 covers the float64 rounding of these few operations.
        margins[start : start + step] = round_up((g * total + under) * (1 + 2.0**-40))
        reach[start : start + step] = ((1 + g) * total + under) * (1 + 2.0**-40)
    return margins, reach


def refuse_overflow(reach: Tensor, offset: int = 0) -> None:
    """Raise LogitRangeError when any row's Z_i (`row_bounds`) reaches the largest float32 (one host
    sync). `offset`: the index of reach's first row in the caller's call, for the message."""
    over = reach >= FLOAT32_MAX
    if bool(over.any()):
        rows = over.nonzero()[:, 0]
        first = int(rows[0])
        raise LogitRangeError(
            f"row {offset + first} of the call: its float32 logits could overflow ({len(rows)} row(s); "
            f"||h|| max||w_v|| + max|b_v| = {float(reach[first]):.3g} >= {FLOAT32_MAX:.3g}): the hidden "
            "states or the head are outside float32's range; check the checkpoint's weights"
        )


def band_halfwidth(z_t: Tensor, margin: Tensor) -> Tensor:
    """W_i = (2 A_i + 4u |z_t|) (1 + 2**-18) for target logits `z_t` and margins A_i (module
    docstring), in z_t's dtype."""
    return (2 * margin + 4 * UNIT * z_t.abs()) * BAND_SLACK


def exact_sign(terms: Tensor) -> Tensor:
    """The exact sign (-1, 0 or 1, int64 [P]) of each row's sum of `terms` [P, m], finite float64
    values, whatever their magnitudes: a long (Kulisch) accumulator of 26-bit integer limbs.

    Each term is M 2**q with M an integer of at most 53 bits (frexp). Its |M| is cut in 26-bit
    pieces, each shifted to its limb boundary and added, signed, to two limbs; carries are then
    propagated from the lowest limb, which leaves every limb but the top in [0, 2**26), so the
    top limb's sign (or any lower limb's being non-zero) is the sum's sign."""
    P, m = terms.shape
    if P == 0:
        return torch.zeros(0, dtype=torch.int64, device=terms.device)
    mant, expo = torch.frexp(terms)
    big = (mant * 2.0**53).to(torch.int64)  # exact: a power of two times a 53-bit significand
    live = big != 0
    q = expo.to(torch.int64) - 53
    q_min = int(q[live].min()) if bool(live.any()) else 0
    q = torch.where(live, q - q_min, torch.zeros_like(q))
    limb, shift = q // LIMB_BITS, q % LIMB_BITS
    n_limbs = int(limb.max()) + 5
    sign = torch.where(big < 0, -1, 1)
    magnitude = big.abs()
    mask = (1 << LIMB_BITS) - 1
    acc = torch.zeros(P * n_limbs, dtype=torch.int64, device=terms.device)
    base = (torch.arange(P, device=terms.device) * n_limbs)[:, None] + limb
    for j in range(3):  # 53 bits = three pieces of <= 26 bits
        piece = ((magnitude >> (LIMB_BITS * j)) & mask) << shift  # < 2**52
        for part, offset in ((piece & mask, j), (piece >> LIMB_BITS, j + 1)):
            acc.index_add_(0, (base + offset).reshape(-1), (sign * part).reshape(-1))
    acc = acc.view(P, n_limbs)
    for i in range(n_limbs - 1):
        carry = acc[:, i] >> LIMB_BITS  # floor division: leaves acc[:, i] in [0, 2**26)
        acc[:, i] -= carry << LIMB_BITS
        acc[:, i + 1] += carry
    top = acc[:, -1].sign()
    rest = (acc[:, :-1] != 0).any(1).to(torch.int64)
    return torch.where(top != 0, top, rest)


def pair_terms(h: Tensor, w_v: Tensor, w_t: Tensor, b_v: Tensor | None, b_t: Tensor | None) -> Tensor:
    """The 2d (+ 2) float64 terms whose sum is z_v - z_t for each pair: exact products (float32 or
    half inputs), then the two biases."""
    h = h.to(torch.float64)
    parts = [h * w_v.to(torch.float64), -(h * w_t.to(torch.float64))]
    if b_v is not None:
        parts += [b_v.to(torch.float64)[:, None], -b_t.to(torch.float64)[:, None]]
    return torch.cat(parts, dim=1)


def _logits64(h: Tensor, w: Tensor, b: Tensor | None) -> tuple[Tensor, Tensor]:
    """(float64 sum, float64 sum of absolute values) of each row's exact products h_k w_k and bias."""
    products = h.to(torch.float64) * w.to(torch.float64)
    total, size = products.sum(1), products.abs().sum(1)
    if b is not None:
        b = b.to(torch.float64)
        total, size = total + b, size + b.abs()
    return total, size


def settle_pairs(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    rows: Tensor,
    cols: Tensor,
    *,
    n: int,
) -> tuple[Tensor, Tensor]:
    """Exact counts over band candidates: for each pair (rows[j], cols[j]) (a column other than its
    row's target), whether z_cols[j] > z_t or = z_t in real arithmetic. hidden [n, d] as the head
    multiplied it; returns (greater, equal) int64 [n] to add to the certain counts.

    Each logit is summed once in float64, the target's once per row: z64 with error <=
    gamma_{d+1}(2**-53) S (S its sum of absolute terms, itself computed to gamma). Where
    |z64_v - z64_t| exceeds both errors (doubled, which covers S's own rounding and the subtraction),
    its sign is the exact sign; the rest go to the long accumulator (`exact_sign`)."""
    greater = torch.zeros(n, dtype=torch.int64, device=hidden.device)
    equal = torch.zeros_like(greater)
    if rows.numel() == 0:
        return greater, equal
    d = hidden.shape[1]
    bound = 2 * gamma(d + 2, UNIT64) * (1 + 2.0**-40)
    z_t, size_t = _logits64(hidden, weight[targets], None if bias is None else bias[targets])
    step = max(1, PAIR_ELEMENTS // max(1, d))
    for start in range(0, rows.numel(), step):
        r, c = rows[start : start + step], cols[start : start + step]
        z_v, size_v = _logits64(hidden[r], weight[c], None if bias is None else bias[c])
        gap = z_v - z_t[r]
        sign = gap.sign().to(torch.int64)
        unsure = (gap.abs() <= bound * (size_v + size_t[r])).nonzero()[:, 0]
        if unsure.numel():
            u, t = r[unsure], targets[r[unsure]]
            b_v, b_t = (None, None) if bias is None else (bias[c[unsure]], bias[t])
            sign[unsure] = exact_sign(pair_terms(hidden[u], weight[c[unsure]], weight[t], b_v, b_t))
        greater.index_add_(0, r, (sign > 0).to(torch.int64))
        equal.index_add_(0, r, (sign == 0).to(torch.int64))
    return greater, equal


def target_logit_ratios(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, computed: Tensor, unit: float
) -> Tensor:
    """|computed z_t - z_t| / E_it for each row (float64 [n]): a head's own target logits against
    their exact values and their per-logit bound E (module docstring), with float64's error in the
    reference subtracted in the head's favour. A ratio above 1 means the arithmetic was less
    accurate than the model of it that the band assumes. One dot product per row."""
    n, d = hidden.shape
    g = gamma(d + 2, unit)
    g64 = gamma(d + 2, UNIT64) * (1 + 2.0**-40)
    ratios = torch.empty(n, dtype=torch.float64, device=hidden.device)
    step = max(1, (1 << 22) // max(1, d))
    for start in range(0, n, step):
        h = hidden[start : start + step].to(torch.float64)
        t = targets[start : start + step]
        w = weight[t].to(torch.float64)
        products = h * w
        b = bias[t].to(torch.float64) if bias is not None else torch.zeros_like(products[:, 0])
        exact64 = products.sum(1) + b
        size = products.abs().sum(1) + b.abs()
        ones = h.abs().sum(1) + w.abs().sum(1)
        allowed = g * size + underflow_term(g, d, ones)
        gap = (computed[start : start + step].to(torch.float64) - exact64).abs() - g64 * size
        ratios[start : start + step] = gap.clamp(min=0) / allowed
    return ratios


@dataclass
class Tally:
    """What a head settled, summed over the calls it is passed to: rows ranked, rows with a logit
    inside their band, and the candidates that went to `settle_pairs` (the exact sign)."""

    rows: int = 0
    settled: int = 0
    logits: int = 0

    def add(self, rows: int, settled: int, logits: int) -> None:
        self.rows += rows
        self.settled += settled
        self.logits += logits
