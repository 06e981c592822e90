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

__all__ = [
    "QuantityError",
    "parse_quantity",
    "format_quantity",
    "add_resources",
    "scale_resources",
    "max_resources",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BYTE_UNITS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_cache: dict[str, Fraction] = {}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity (e.g. ``"12x"``, ``"1.2.3"``, ``""``)."""


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity (``"250m"``, ``"1.5"``, ``"512Mi"``, ``"1e3"``, or an int/float) to an exact number.

    The unit is whatever the resource counts: cores for ``cpu``, bytes for ``memory``.

    Raises:
        QuantityError: the value is not a quantity (message names the value).
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    cached = _cache.get(value)
    if cached is not None:
        return cached
    m = _QUANTITY_RE.match(value.strip())
    if not m:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (expected e.g. 500m, 2, 1.5Gi, 512Mi)")
    number = Fraction(m.group(1))
    suffix = m.group(2) or ""
    if suffix in _BINARY:
        result = number * _BINARY[suffix]
    elif suffix in _DECIMAL:
        result = number * _DECIMAL[suffix]
    else:  # decimal exponent
        result = number * Fraction(10) ** int(suffix[1:])
    if len(_cache) < 4096:
        _cache[value] = result
    return result


def _is_byte_resource(name: str) -> bool:
    return name in ("memory", "ephemeral-storage", "storage") or name.startswith("hugepages-")


def format_quantity(name: str, value: Fraction) -> str:
    """Format ``value`` (cores for ``cpu``, bytes for byte-like resources) as the short canonical quantity string.

    Sub-milli fractions are rounded up to the next milli (Kubernetes' smallest precision), byte values up to the
    next whole byte.
    """
    if _is_byte_resource(name):
        n = math.ceil(value)
        if n == 0:
            return "0"
        for suffix, size in _BYTE_UNITS:
            if n % size == 0:
                return f"{n // size}{suffix}"
        return str(n)
    milli = math.ceil(value * 1000)
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def add_resources(total: dict[str, Fraction], more: dict[str, Fraction]) -> dict[str, Fraction]:
    """``total + more`` per resource name (a new dict; inputs unchanged)."""
    out = dict(total)
    for k, v in more.items():
        out[k] = out.get(k, Fraction(0)) + v
    return out


def scale_resources(resources: dict[str, Fraction], factor: int) -> dict[str, Fraction]:
    """``resources * factor`` per resource name (a new dict)."""
    return {k: v * factor for k, v in resources.items()}


def max_resources(a: dict[str, Fraction], b: dict[str, Fraction]) -> dict[str, Fraction]:
    """Per-resource maximum of ``a`` and ``b`` (a new dict)."""
    out = dict(a)
    for k, v in b.items():
        if v > out.get(k, Fraction(0)):
            out[k] = v
    return out


def format_resources(resources: dict[str, Fraction]) -> dict[str, str]:
    """A Kubernetes ResourceList (``{"cpu": "1500m", "memory": "3Gi"}``), zero entries dropped, keys sorted."""
    return {k: format_quantity(k, v) for k, v in sorted(resources.items()) if v}
