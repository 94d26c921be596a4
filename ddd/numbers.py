"""Numbers as people read them: plain digits at a sensible precision, never exponent notation.

Python's `g` format writes 1260 as "1.26e+03" and 0.00004 as "4e-05"; every figure the page, the reports and
the command line show goes through `readable` instead, so a fast machine's speed reads "1260".
"""
from __future__ import annotations

import math
from decimal import Decimal


def readable(value: float, digits: int = 3) -> str:
    """`value` rounded to `digits` significant digits, but never to fewer than its whole part: 1259.7 -> "1260",
    12.345 -> "12.3", 0.0001234 -> "0.000123", 2.0 -> "2"; "nan" / "inf" / "-inf" as such."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= digits - 1:  # a whole number: its significant digits, then zeros, not float noise
        return format(Decimal(f"{value:.{max(digits, 1)}g}").quantize(Decimal(1)), "f")
    text = f"{value:.{digits - 1 - magnitude}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def ms_text(value: float) -> str:
    """Milliseconds as a page shows them: whole from 10 ms up, else two significant digits (a step of 0.06 ms is
    not "0 ms")."""
    return f"{value:.0f}" if abs(value) >= 10 else readable(value, 2)
