"""Numbers as people read them, one way everywhere (report tables and headlines, the notebooks'
tables, figure labels): 3 significant digits, whole numbers with thousands separators, sizes as
85.1M, an estimate with its interval as "0.123 [0.101, 0.145]" (the bounds no more precise
than the estimate, unless fewer digits would hide the interval's width), and a value too small
for 3 significant digits to mean anything (a fitted E of 3.5e-121) as "< 1e-6". A table's column
is written in one notation (`column`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SIGNIFICANT = 3
FLOOR = 1e-6  # below this a value is shown as "< 1e-6": 3 significant digits of it say nothing
FLOOR_TEXT = "1e-6"
MISSING = "n/a"
# A column is written in fixed notation when its values lie in [FIXED_LOW, FIXED_HIGH): 0.000621
# reads as a number beside 0.5; 6.21e-05 and 1.23e+05 need their exponent.
FIXED_LOW, FIXED_HIGH = 1e-4, 1e5


def _missing(value: object) -> bool:
    # pandas' NA (a nullable integer column's missing k) is missing too, not the text "<NA>".
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or type(value).__name__ in ("NAType", "NaTType")
    )


def significant(value: float) -> tuple[str, int | None]:
    """`value` to 3 significant digits, trailing zeros kept, and its number of decimals (None in
    scientific notation: values from 100,000 on, or below 0.001)."""
    size_ = abs(value)
    if size_ == 0:
        return "0", 0
    if size_ < FLOOR:
        return ("< " if value > 0 else "> −") + FLOOR_TEXT, None
    if size_ < 1e-3 or size_ >= 1e5:
        return f"{value:.{SIGNIFICANT - 1}e}", None
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(size_)))
    text = f"{value:.{decimals}f}"
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > SIGNIFICANT:
        decimals -= 1  # rounding carried into the next power of ten (0.09996 -> 0.100)
        text = f"{value:.{decimals}f}"
    return text, decimals


def number(value: object) -> str:
    """A value as text: a whole number as one with thousands separators (25,472, not 25472.0),
    else 3 significant digits ("0.0200", "1.29e-17"), "< 1e-6" below display precision, "n/a"
    when missing; text and booleans as they are; `size` and `interval` write the rest.

    Examples
    --------
    >>> number(0.0423), number(25472.0), number(3.5e-121), number(float("nan"))
    ('0.0423', '25,472', '< 1e-6', 'n/a')
    >>> size(85_056_000), size(25472), interval(0.1234, 0.1011, 0.1452)
    ('85.1M', '25.5K', '0.123 [0.101, 0.145]')
    """
    if _missing(value):
        return MISSING
    if isinstance(value, str) or type(value).__name__ in ("bool", "bool_"):
        return str(value)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return significant(value)[0]


def size(value: object) -> str:
    """A parameter or token count as people write it: 25.5K, 85.1M, 1.2B (3 significant digits)."""
    if _missing(value):
        return MISSING
    value = float(value)
    if not math.isfinite(value):
        return MISSING
    if abs(value) < 1000:
        return f"{value:.3g}"
    for power, suffix in ((4, "T"), (3, "B"), (2, "M"), (1, "K")):
        scaled = value / 1000**power
        # Rounding may carry into the unit above: 999,950 is "1M", not "1e+03K".
        if abs(float(f"{scaled:.3g}")) >= 1 or suffix == "K":
            text = f"{scaled:.3g}"
            return f"{scaled:,.0f}{suffix}" if "e" in text else f"{text}{suffix}"
    raise AssertionError("unreachable")


def interval(value: float, low: float | None, high: float | None, *, scientific: bool | None = None) -> str:
    """ "0.0200 [0.0130, 0.0255]": the estimate to 3 significant digits and its interval at that
    precision: the bounds with the estimate's decimals, but no more significant digits than it
    has (an estimate near 0 with a wide interval read "0.00470 [-0.11662, 0.12602]"; now
    "0.00470 [-0.117, 0.126]"), and never fewer than show the interval's width ("2 [1.5, 2.5]",
    "0 [-0.05, 0.05]", not "2 [2, 2]" and "0 [-0, 0]"); no bound reads "-0". The estimate alone
    when the interval is missing, and a note instead of an interval that does not contain its
    estimate (a fit at a bound of its range, e.g. E = 0, whose resamples all land inside it).
    `scientific` sets the notation (as its table column has it: `intervals`); by default the
    estimate's size does."""
    if _missing(value):
        return MISSING
    value = float(value)
    if scientific is None or abs(value) < FLOOR:
        text, decimals = significant(value)
    elif scientific:
        text, decimals = f"{value:.{SIGNIFICANT - 1}e}", None
    else:
        text = _fixed(value)
        decimals = len(text.split(".")[1]) if "." in text else 0
    if _missing(low) or _missing(high):
        return text
    low, high = float(low), float(high)
    if not low <= value <= high:
        return f"{text} (at a bound of its fit: no interval)"
    if decimals is None and not scientific:
        return f"{text} [{significant(low)[0]}, {significant(high)[0]}]"
    if decimals is None:
        ends = _showing_width(low, high, SIGNIFICANT - 1, lambda b, n: f"{b:.{n}e}" if b else "0")
        return f"{text} [{ends[0]}, {ends[1]}]"
    widest = max(abs(low), abs(high))
    if 0 < widest < math.inf:
        decimals = min(decimals, max(0, SIGNIFICANT - 1 - math.floor(math.log10(widest))))
    ends = _showing_width(low, high, decimals, lambda b, n: f"{b:.{n}f}")
    return f"{text} [{ends[0]}, {ends[1]}]"


def _showing_width(low: float, high: float, digits: int, write) -> tuple[str, str]:
    """The bounds written by `write(bound, digits)`, with more digits where `digits` would not show
    the interval's width: the width the written bounds give is within half the true width (2 [1.5,
    2.5] no longer reads "2 [2, 2]"). A bound that rounds to zero reads 0, never "-0"."""
    width = high - low
    noise = 1e-9 * max(abs(low), abs(high))  # a width this small is float rounding: none to show
    while math.isfinite(width):
        ends = tuple(_unsigned_zero(write(b, digits)) for b in (low, high))
        if abs(float(ends[1]) - float(ends[0]) - width) <= width / 2 or width <= noise:
            return ends
        digits += 1  # ends: once a digit's unit is at most width / 2, rounding cannot hide it
    return tuple(write(b, digits) for b in (low, high))  # an infinite bound: nothing to show


def _unsigned_zero(text: str) -> str:
    """`text` without its minus sign when it writes zero ("-0.00" -> "0.00")."""
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def intervals(values: Sequence[object], lows: Sequence[object], highs: Sequence[object]) -> list[str]:
    """A table column of estimates with their intervals (`interval`), in one notation: scientific
    for all when one estimate needs it, as `column` decides."""
    scientific = _scientific([_number_or_none(v) for v in values])
    return [interval(v, lo, hi, scientific=scientific) for v, lo, hi in zip(values, lows, highs, strict=True)]


def _scientific(numbers: Sequence[float | None]) -> bool:
    """Whether a column of `numbers` is written in scientific notation: a value shown to 3
    significant digits (not whole, not below display precision) lies outside [1e-4, 1e5)."""
    shown = [abs(v) for v in numbers if v is not None and math.isfinite(v) and abs(v) >= FLOOR]
    return any(not FIXED_LOW <= v < FIXED_HIGH for v in shown if not v.is_integer())


def column(values: Sequence[object]) -> list[str]:
    """The values of one table column as text in one notation: whole numbers as `number` writes
    them; otherwise 3 significant digits each, in fixed notation when every value lies in
    [1e-4, 1e5) and in scientific notation for all when one does not (a column read 0.00233 beside
    6.21e-04). A column whose every number is below 1e-6 is rounding noise of a zero (07's
    residual CE − (EE + SA − Conf)) and reads 0, as does a negative value below 1e-6 among larger
    ones; a positive one reads "< 1e-6" (a fitted E of 3.5e-121 is an estimate, not a zero).
    Missing values read "n/a", text and booleans as they are.

    Examples
    --------
    >>> column([0.5, 0.00233, 0.000621]), column([0.5, 6.21e-05]), column([2e-9, -3e-8, 0.0])
    (['0.500', '0.00233', '0.000621'], ['5.00e-01', '6.21e-05'], ['0', '0', '0'])
    """
    numbers = [_number_or_none(v) for v in values]
    finite = [v for v in numbers if v is not None and math.isfinite(v)]
    if finite and all(abs(v) < FLOOR for v in finite):
        return [
            number(v) if x is None or not math.isfinite(x) else "0"
            for v, x in zip(values, numbers, strict=True)
        ]
    if all(v.is_integer() and abs(v) < 1e15 for v in finite):
        return [number(v) for v in values]
    scientific = _scientific(finite)
    out = []
    for v, x in zip(values, numbers, strict=True):
        if x is None or not math.isfinite(x):
            out.append(number(v))
        elif abs(x) < FLOOR:
            out.append("0" if x <= 0 else f"< {FLOOR_TEXT}")
        elif scientific:
            out.append(f"{x:.{SIGNIFICANT - 1}e}")
        else:
            out.append(_fixed(x))
    return out


def _number_or_none(value: object) -> float | None:
    """`value` as a float when it is a number (not text, a boolean or missing)."""
    if _missing(value) or isinstance(value, str) or type(value).__name__ in ("bool", "bool_"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _fixed(value: float) -> str:
    """`value` in fixed notation: whole as `number` writes it, else 3 significant digits."""
    if value.is_integer():
        return number(value)
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > SIGNIFICANT:
        text = f"{value:.{decimals - 1}f}"  # rounding carried into the next power of ten
    return text
