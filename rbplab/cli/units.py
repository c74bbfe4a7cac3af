"""Sizes and durations as the command line prints them (`cache ls`, `plan`)."""

from __future__ import annotations

import math


def human_bytes(n: float) -> str:
    """Bytes in binary units (1 KiB = 1,024 B): "512 B", "1.5 MiB", "56.0 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float | None) -> str:
    """ "42.0 s", "3.5 min", "6.37 h"; "-" when unknown."""
    if s is None or not math.isfinite(s):
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"
