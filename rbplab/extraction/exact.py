"""Ranks certified against float64: a rigorous error band around each target logit, and float64
settling of the few logits inside it.

Both heads compute logits in float32, in an order the backend picks (BLAS blocking, tensor-core
tiles, Triton's interpreter). Their counts are made exact with one invariant:

    |computed z_v - float64 z_v| <= A_i + r * |computed z_v|      for every row i and column v,

where A_i and r are the bounds below. Then, with W_i the band's half-width around z_t:
- z_v > z_t + W_i: v is above t in float64 too (counted as greater);
- z_v < z_t - W_i: v is below t in float64 too (not counted);
- inside the band: v is recomputed in float64 from the same hidden state and head row ("settled"),
  and compared with the target's float64 logit computed the same way.
A row with nothing in its band but its target has exact counts already: n_equal is 1.

The bound, per row (u = 2**-24, the float32 unit roundoff):
- the dot product of d terms, summed in any order: gamma_n * sum_k |h_k| |w_vk| (Higham, Accuracy
  and Stability, eq. 3.5), gamma_n = n u' / (1 - n u'), n = d + 2 for the rounded products and the
  bias add. u' = u for IEEE float32 arithmetic (BLAS, Triton's ieee dot). Tensor cores accumulate
  with truncation and align each block of products to its largest term without guard bits (Fasi,
  Higham, Mikaitis, Pranesh 2021): each addition then errs by up to one ulp, 2u, so u' = 2u there.
- sum_k |h_k| |w_vk| <= ||h|| ||w_v|| <= ||h|| max_v ||w_v|| (Cauchy-Schwarz), so one number per
  row and one per head: ||h|| from the batch, max ||w_v|| computed once per loaded head.
- the bias add: u |b_v| <= u max |b|; the float64 reference's own rounding: (d + 2) 2**-53 of the same
  sum, added so that "certainly above" also holds for the float64 values.
- the softcap z -> c tanh(z / c) is 1-Lipschitz, so it carries the error above unchanged, and adds
  its own rounding, relative to the capped value: r = 16u covers the division, a tanh within 8u
  (torch's and the kernel's, checked by tests against float64) and the product.
The band's half-width adds the rounding of z_t +- W itself, so the float32 comparisons keep it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

UNIT = 2.0**-24  # float32 unit roundoff
UNIT64 = 2.0**-53
TENSOR_CORE_UNIT = 2 * UNIT  # truncated accumulation: one ulp per addition, not half of one
SOFTCAP_RELATIVE = 16 * UNIT + 4 * UNIT64
# The band's rounding slack: z_t +- W in float32 may move each end by u |z_t +- W|, and W itself is a
# few float32 operations; (1 + 2**-18) and 4u |z_t| cover both with room.
BAND_SLACK = 1.0 + 2.0**-18
# Float64 products held at once while settling (32 MB): about seven such arrays are alive at once,
# which `rbplab plan` counts (SETTLE_BYTES).
PAIR_ELEMENTS = 1 << 22
# Band candidates the fused kernel lists per row; a row with more is ranked by the fp32 head.
MAX_CANDIDATES = 64
SETTLE_BYTES = 7 * PAIR_ELEMENTS * 8


def gamma(terms: int, unit: float) -> float:
    """gamma_n = n u / (1 - n u): the relative bound of an n-term float sum in any order."""
    nu = terms * unit
    if nu >= 1:
        return math.inf
    return nu / (1 - nu)


def head_norms(weight: Tensor, bias: Tensor | None, rows: int) -> tuple[float, float]:
    """(max_v ||w_v||, max_v |b_v|) over the first `rows` head rows, in float64, a block of rows at a
    time (a float64 copy of a 150K x 3584 head would be 4 GB)."""
    step = max(1, (1 << 24) // max(1, weight.shape[1]))
    norm = 0.0
    for start in range(0, rows, step):
        block = weight[start : min(rows, start + step)].to(torch.float64)
        norm = max(norm, float(torch.linalg.vector_norm(block, dim=1).max()))
    top = 0.0 if bias is None or rows == 0 else float(bias[:rows].to(torch.float64).abs().max())
    return norm, top


def row_margins(hidden: Tensor, d: int, w_norm: float, b_max: float, unit: float) -> Tensor:
    """A_i, the absolute part of each row's logit error bound (module docstring), float32 rounded up,
    [n] on hidden's device. Non-finite rows give inf or NaN; their logits are refused anyway."""
    h_norm = torch.linalg.vector_norm(hidden.to(torch.float64), dim=1)
    n = d + 2
    margin = (gamma(n, unit) + n * UNIT64 * 1.01) * w_norm * h_norm + 2 * UNIT * b_max
    return (margin * BAND_SLACK).to(torch.float32)


def band_halfwidth(z_t: Tensor, margin: Tensor, relative: float) -> Tensor:
    """W_i for target logits `z_t` and margins A_i: |z_v - z_t| <= E_v + E_t with E = A + r |z|, and
    |z_v| <= |z_t| + |z_v - z_t|, give (2A + 2r |z_t|) / (1 - r); the slack covers float32 rounding."""
    width = (2 * margin + (2 * relative + 4 * UNIT) * z_t.abs()) / (1 - relative)
    return width * BAND_SLACK


def softcapped(z: Tensor, softcap: float | None) -> Tensor:
    """z -> c tanh(z / c) in z's dtype (float64 when settling), as the model applies it."""
    return z if not softcap else torch.tanh(z / softcap) * softcap


def settle(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    rows: Tensor,
    cols: Tensor,
    *,
    softcap: float | None,
    n: int,
) -> tuple[Tensor, Tensor]:
    """Float64 counts over band candidates: for each pair (rows[j], cols[j]) (a column other than its
    row's target), whether its float64 logit is above or equal to that row's float64 target logit.
    hidden [n, d], targets [n]; returns (greater, equal) int64 [n] to add to the certain counts.

    Each pair's target logit is computed beside it in one product tensor, by the same reduction, so
    a column tied with its target in exact arithmetic (a duplicated head row) ties here too."""
    greater = torch.zeros(n, dtype=torch.int64, device=hidden.device)
    equal = torch.zeros_like(greater)
    d = hidden.shape[1]
    step = max(1, PAIR_ELEMENTS // (2 * max(1, d)))
    for start in range(0, rows.numel(), step):
        r, c = rows[start : start + step], cols[start : start + step]
        t = targets[r]
        h = hidden[r].to(torch.float64)
        pairs = torch.cat([h * weight[t].to(torch.float64), h * weight[c].to(torch.float64)])
        z = pairs.sum(1)
        if bias is not None:
            z = z + torch.cat([bias[t], bias[c]]).to(torch.float64)
        z = softcapped(z, softcap)
        z_t, z_v = z[: r.numel()], z[r.numel() :]
        greater.index_add_(0, r, (z_v > z_t).to(torch.int64))
        equal.index_add_(0, r, (z_v == z_t).to(torch.int64))
    return greater, equal


@dataclass
class Tally:
    """What a head settled, summed over the calls it is passed to: rows ranked, rows with a logit
    inside their band (settled in float64), and the float64 logits that took."""

    rows: int = 0
    settled: int = 0
    logits: int = 0

    def add(self, rows: int, settled: int, logits: int) -> None:
        self.rows += rows
        self.settled += settled
        self.logits += logits
