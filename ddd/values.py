"""Reading a setting's value from a Python value or text, and quoting one in a message: the checks every
declaration in ddd/settings.py runs, and the error they raise."""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

FLAGS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
WHOLE = re.compile(r"[+-]?[0-9]+")
DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# Longer digit strings lie outside every range here; int() itself refuses more than 4,300 digits.
MAX_DIGITS = 30
# Floats hold whole numbers exactly only below this: a larger one would stand for another number.
EXACT_FLOAT = 2**53


class SettingsError(ValueError):
    """An impossible or unknown setting; the message names it and the allowed values. `setting` and `problem`
    (the message without the setting's name) let the app say the same with its own label."""

    def __init__(self, message: str, setting: Any = None, problem: str = ""):
        super().__init__(message)
        self.setting, self.problem = setting, problem


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "nothing"
    return {list: "a list", tuple: "a list", dict: "an object", str: "text"}.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    """A value as a message quotes it: short, and never str() of a huge int (Python refuses that too)."""
    if isinstance(value, bool) or value is None or isinstance(value, (list, tuple, dict)):
        return kind_of(value)
    if isinstance(value, int):
        if value.bit_length() > 100:
            return f"a number of about {value.bit_length() * 0.30103:,.0f} digits"
        return str(value)
    if isinstance(value, float):  # as sent: the shortest digits that read back as it ("1.0000001", never "1")
        text = repr(value)
        return format(Decimal(text), "f") if "e" in text and 1e-20 < abs(value) < 1e20 else text
    if isinstance(value, str):
        if WHOLE.fullmatch(value.strip()) and len(value.strip()) > MAX_DIGITS:
            return f"a number of {len(value.strip().lstrip('+-')):,} digits"
        return repr(value if len(value) <= 40 else value[:37] + "…")
    return kind_of(value)


def number_text(value: float, whole: bool) -> str:
    return f"{int(value):,}" if whole else f"{value:,g}"
