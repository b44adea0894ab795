"""Kubernetes resource quantities (``500m``, ``2``, ``1Gi``, ``1e3``) as exact fractions."""

from __future__ import annotations

import re
from fractions import Fraction

from metallo.labs.kubernetes.errors import bad_request

_SUFFIX = {
    "": Fraction(1), "m": Fraction(1, 1000), "u": Fraction(1, 10**6), "n": Fraction(1, 10**9),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_Q = re.compile(r"^([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)$")


def parse_quantity(value: str | int | float) -> Fraction:
    """The quantity's value; a 400 BadRequest for text that is not a quantity."""
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _Q.match(str(value).strip())
    if not m or m.group(3) not in _SUFFIX:
        raise bad_request(f"quantities must match the regular expression "
                          f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        number *= Fraction(10) ** int(m.group(2))
    return number * _SUFFIX[m.group(3)]


def format_quantity(value: Fraction) -> str:
    """A canonical text: whole numbers plainly, with a binary suffix when exact, else milli."""
    if value.denominator == 1:
        n = int(value)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIX[suffix])
            if n and n % unit == 0 and n >= unit:
                return f"{n // unit}{suffix}"
        return str(n)
    return f"{int(value * 1000)}m"
