"""Every figure is written as people read it: plain digits, never exponent notation (ddd/numbers.py)."""
from ddd.numbers import readable


def test_large_numbers_are_written_out_at_three_significant_digits():
    assert readable(1259.7) == "1260"
    assert readable(1.37e6) == "1370000"


def test_small_numbers_keep_three_significant_digits_in_plain_decimals():
    assert readable(0.0001234) == "0.000123"
    assert readable(-0.00001) == "-0.00001"


def test_trailing_zeros_are_dropped():
    assert readable(2.0) == "2"
    assert readable(99.96) == "100"
    assert readable(12.345) == "12.3"
