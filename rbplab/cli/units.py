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


def human_count(n: float | None) -> str:
    """A count in three significant digits with K, M, B or T: "25.5K", "85.1M", "1.48B"; below
    1,000 as it is; "-" when unknown. (Parameter counts S read this way; the exact number is in
    --format csv/json.)"""
    if n is None or not math.isfinite(n):
        return "-"
    if abs(n) < 1000:
        return f"{n:g}"
    for power, unit in ((4, "T"), (3, "B"), (2, "M"), (1, "K")):
        scaled = n / 1000**power
        # rounding may carry into the next unit up (999,950 -> "1000K" is "1M")
        if abs(float(f"{scaled:.3g}")) >= 1 or unit == "K":
            text = f"{scaled:.3g}"
            if "e" in text:  # 1,000T and more
                text = f"{scaled:,.0f}"
            return f"{text}{unit}"
    raise AssertionError("unreachable")
