"""Kubernetes resource quantities: parse to exact numbers, add, scale, format.

Follows ``k8s.io/apimachinery/pkg/api/resource`` (``quantity.go``): a quantity is ``<sign><number><suffix>`` where the
suffix is a binary SI suffix (``Ki Mi Gi Ti Pi Ei``, powers of 1024), a decimal SI suffix (``n u m "" k M G T P E``)
or a decimal exponent (``e3``/``E3``). Values are kept as :class:`fractions.Fraction` so that sums of ``"100m"`` and
``"1.5"`` or of ``"512Mi"`` and ``"1G"`` are exact.

Formatting (:func:`format_quantity`) picks the canonical short form: CPU-like values as whole cores or millicores
(``"2"``, ``"1500m"``), byte-like values (memory, storage, hugepages) in the largest exact binary unit (``"3Gi"``,
``"1536Mi"``) or plain bytes, other resources (GPUs, pods) as integers. Kubernetes itself rounds sub-milli values up
("the smallest precision is 1m"), and so does this module.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from ..echo import clip

__all__ = ["QuantityError", "parse_quantity", "format_quantity", "add_resources", "scale_resources", "max_resources"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# The grammar of quantity.go, anchored: <sign>?<number><suffix>, where <number> is digits, digits.digits, digits. or
# .digits and a decimal exponent is an integer (Go parses it with strconv.ParseInt).
_QUANTITY_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BYTE_UNITS = tuple(reversed(_BINARY.items()))  # largest first
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

MAX_QUANTITY = 2**63 - 1
"""Largest magnitude admit accepts: Kubernetes carries a quantity's value as an int64 (``Quantity.Value()``, the
scheduler's ``framework.Resource``), and parsing caps a binary-SI quantity at 2**63-1 (``quantity.go``)."""

MAX_QUANTITY_CHARS = 64
"""Longest quantity string admit reads. The longest value Kubernetes can carry exactly (int64 with nano precision,
``-9223372036854775807.999999999``) has 30 characters; a longer string is padding (or an attack on the parser)."""

_NANO = 10**9
_CACHE_SIZE = 1024
_cache: dict[str, Fraction] = {}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity (e.g. ``"12x"``, ``"1.2.3"``, ``""``), or one outside the range
    Kubernetes can carry (``"1e9999999"``)."""


def _too_large(shown: object) -> QuantityError:
    return QuantityError(f"{clip(shown)} is larger than a Kubernetes quantity can be (at most 2^63-1, about 9.2e18, "
                         "in the resource's unit)")


def _bounded(value: Fraction, shown: object) -> Fraction:
    """``value`` rounded away from zero to nano (as ``ParseQuantity`` does), refused beyond :data:`MAX_QUANTITY`."""
    if abs(value) > MAX_QUANTITY:
        raise _too_large(shown)
    if value.denominator != 1 and (_NANO % value.denominator):
        nanos = math.ceil(abs(value) * _NANO)
        value = Fraction(nanos if value > 0 else -nanos, _NANO)
    return value


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity (``"250m"``, ``"1.5"``, ``"512Mi"``, ``"1e3"``, or an int/float) to an exact number
    in the resource's unit (cores for ``cpu``, bytes for ``memory``), as ``quantity.go`` ``ParseQuantity`` after
    ``UnmarshalJSON``'s ``TrimSpace``; finer than 1n rounds up to 1n. Bounded work whatever the input: a string over
    :data:`MAX_QUANTITY_CHARS` or a value beyond :data:`MAX_QUANTITY` is refused before any arithmetic on it.

    Raises:
        QuantityError: the value is not a quantity, or is out of range (the message quotes the value, clipped).
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _bounded(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        if abs(value) > MAX_QUANTITY:
            raise QuantityError(f"{value!r} is larger than a Kubernetes quantity can be (at most 2^63-1)")
        return _bounded(Fraction(repr(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"{clip(value)} is not a quantity")
    cached = _cache.get(value)
    if cached is not None:
        return cached
    text = value.strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(f"{clip(value)} is not a usable Kubernetes quantity: longer than {MAX_QUANTITY_CHARS} "
                            "characters")
    m = _QUANTITY_RE.match(text)
    if not m or not (m.group(2) or m.group(3)):
        raise QuantityError(f"{clip(value)} is not a Kubernetes quantity (expected e.g. 500m, 2, 1.5Gi, 512Mi)")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4) or ""
    digits = (whole + frac).lstrip("0")
    if not digits:
        result = Fraction(0)
    else:
        mantissa = Fraction(int(digits), 10 ** len(frac)) if frac else Fraction(int(digits))
        if suffix in _BINARY:
            result = mantissa * _BINARY[suffix]
        else:
            exp = _DECIMAL_EXP[suffix] if suffix in _DECIMAL_EXP else int(suffix[1:])
            # order of magnitude of the value: 10**(order-1) <= value < 10**order
            order = len(str(int(mantissa))) if mantissa >= 1 else -(len(frac) - len(digits))
            if order + exp > 20:
                raise _too_large(value)
            if order + exp < -10:
                result = Fraction(1, _NANO)  # finer than 1n: Kubernetes rounds it up to 1n
            else:
                result = mantissa * Fraction(10) ** exp
        if sign == "-":
            result = -result
    result = _bounded(result, value)
    if len(_cache) < _CACHE_SIZE and len(value) <= MAX_QUANTITY_CHARS:
        _cache[value] = result
    return result


def format_quantity(name: str, value: Fraction) -> str:
    """Format ``value`` (cores for ``cpu``, bytes for byte-like resources) as the short canonical quantity string,
    rounded up to the next milli or whole byte (module docstring)."""
    if name in ("memory", "ephemeral-storage", "storage") or name.startswith("hugepages-"):
        n = math.ceil(value)
        if n == 0:
            return "0"
        for suffix, size in _BYTE_UNITS:
            if n % size == 0:
                return f"{n // size}{suffix}"
        return str(n)
    milli = math.ceil(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def add_resources(total: dict[str, Fraction], more: dict[str, Fraction]) -> dict[str, Fraction]:
    """``total + more`` per resource name (a new dict; inputs unchanged)."""
    return {**total, **{k: total.get(k, Fraction(0)) + v for k, v in more.items()}}


def scale_resources(resources: dict[str, Fraction], factor: int) -> dict[str, Fraction]:
    """``resources * factor`` per resource name (a new dict)."""
    return {k: v * factor for k, v in resources.items()}


def max_resources(a: dict[str, Fraction], b: dict[str, Fraction]) -> dict[str, Fraction]:
    """Per-resource maximum of ``a`` and ``b`` (a new dict)."""
    return {**a, **{k: v for k, v in b.items() if v > a.get(k, Fraction(0))}}


def format_resources(resources: dict[str, Fraction]) -> dict[str, str]:
    """A Kubernetes ResourceList (``{"cpu": "1500m", "memory": "3Gi"}``), zero entries dropped, keys sorted."""
    return {k: format_quantity(k, v) for k, v in sorted(resources.items()) if v}
