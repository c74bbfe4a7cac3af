"""Training compute: C ~= 6 S D floating-point operations (Kaplan et al. 2020), the one place it
is written. S: non-embedding parameters; D: tokens seen. Works on numbers and numpy arrays."""

from __future__ import annotations

from typing import TypeVar

# Forward (2) and backward (4) multiply-adds per parameter and token.
FLOPS_PER_PARAMETER_TOKEN = 6.0

Number = TypeVar("Number")


def training_compute(S: Number, D: Number) -> Number:
    """C = 6 S D."""
    return FLOPS_PER_PARAMETER_TOKEN * S * D  # type: ignore[operator]


def tokens_for_compute(C: Number, S: Number) -> Number:
    """D = C / (6 S): the tokens a model of size S sees for compute C."""
    return C / (FLOPS_PER_PARAMETER_TOKEN * S)  # type: ignore[operator]
