"""Resource quantities and a Pod's requests as the operators' Go code computes them, for the emulations (written
from k8s.io/apimachinery ``pkg/api/resource`` and k8s.io/component-helpers ``resource/helpers.go``, not from
admit's own arithmetic, so that an emulation can disagree with admit).

- :func:`parse`: ``resource.ParseQuantity``: a signed decimal number with a binary suffix (``Ki`` .. ``Ei``), a
  decimal suffix (``n``, ``u``, ``m``, none, ``k``, ``M``, ``G``, ``T``, ``P``, ``E``) or an exponent (``e3``), and
  the format it was written in (``BinarySI``, ``DecimalSI``, ``DecimalExponent``).
- :class:`Quantity` ``+``/``*``: ``Quantity.Add`` (a zero quantity takes the other's format) and ``Quantity.Mul``.
- :func:`Quantity.canonical`: ``Quantity.String`` -> ``CanonicalizeBytes``: a ``BinarySI`` value of at least 1024
  (in magnitude) that is whole gets the largest binary suffix that divides it (``1Gi``); any other value the
  largest decimal suffix, a power of 1000, with a whole mantissa (``1500m``, ``8k``; ``8e3`` for ``DecimalExponent``),
  rounded up to nano.
- :func:`pod_requests`: ``resourcehelpers.PodRequests`` with no options: the sum of the containers' requests, the
  restartable init containers (sidecars) added, the maximum with each other init container (plus the sidecars
  started before it), plus ``spec.overhead``. Pod-level ``spec.resources`` is not emulated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = ["Quantity", "parse", "pod_requests", "scaled", "summed", "canonical"]

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_GRAMMAR = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


@dataclass(frozen=True)
class Quantity:
    """An exact value and the format its string was written in (``BinarySI``, ``DecimalSI``, ``DecimalExponent``;
    ``""``: a zero value that takes the format of what is added to it)."""

    value: Fraction
    format: str = ""

    def __add__(self, other: "Quantity") -> "Quantity":
        return Quantity(self.value + other.value, self.format if self.value or not other.format else other.format)

    def __mul__(self, n: int) -> "Quantity":
        return Quantity(self.value * n, self.format)

    def canonical(self) -> str:
        """``Quantity.String()`` (module docstring)."""
        value = self.value
        if self.format == "BinarySI" and abs(value) >= 1024 and value.denominator == 1:
            for suffix, size in reversed(_BINARY.items()):
                if value.numerator % size == 0:
                    return f"{value.numerator // size}{suffix}"
        nanos = math.ceil(value * 10**9)
        exponent = -9
        while nanos and nanos % 1000 == 0 and exponent < 18:
            nanos //= 1000
            exponent += 3
        if nanos == 0:
            return "0"
        if self.format == "DecimalExponent":
            return f"{nanos}e{exponent}" if exponent else str(nanos)
        return f"{nanos}{next(s for s, e in _DECIMAL.items() if e == exponent)}"


def parse(value: Any) -> Quantity:
    """``resource.ParseQuantity`` of a string (an int or float as its JSON number); ValueError if not a quantity."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    match = _GRAMMAR.match(text)
    if match is None:
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return Quantity(number * _BINARY[suffix], "BinarySI")
    if suffix[:1] in ("e", "E"):
        return Quantity(number * Fraction(10) ** int(suffix[1:]), "DecimalExponent")
    return Quantity(number * Fraction(10) ** _DECIMAL[suffix], "DecimalSI")


def summed(total: dict[str, Quantity], more: dict[str, Quantity]) -> dict[str, Quantity]:
    """``addResourceList``: ``total + more`` per resource name (a new dict)."""
    out = dict(total)
    for name, q in more.items():
        out[name] = out.get(name, Quantity(Fraction(0))) + q
    return out


def scaled(resources: dict[str, Quantity], n: int) -> dict[str, Quantity]:
    """Each quantity times ``n`` (``Quantity.Mul``)."""
    return {name: q * n for name, q in resources.items()}


def canonical(resources: dict[str, Quantity]) -> dict[str, str]:
    """A ResourceList as kube-apiserver stores it: each quantity's canonical string."""
    return {name: q.canonical() for name, q in resources.items()}


def _requests(container: Any) -> dict[str, Quantity]:
    requests = ((container or {}).get("resources") or {}).get("requests") or {}
    return {name: parse(v) for name, v in requests.items()}


def _max(into: dict[str, Quantity], other: dict[str, Quantity]) -> dict[str, Quantity]:
    """``maxResourceList``."""
    out = dict(into)
    for name, q in other.items():
        if name not in out or q.value > out[name].value:
            out[name] = q
    return out


def pod_requests(pod_spec: dict[str, Any]) -> dict[str, Quantity]:
    """``resourcehelpers.PodRequests(pod, PodResourcesOptions{})`` of a Pod spec (module docstring)."""
    reqs: dict[str, Quantity] = {}
    for container in pod_spec.get("containers") or []:
        reqs = summed(reqs, _requests(container))
    sidecars: dict[str, Quantity] = {}
    init: dict[str, Quantity] = {}
    for container in pod_spec.get("initContainers") or []:
        own = _requests(container)
        if (container or {}).get("restartPolicy") == "Always":
            reqs = summed(reqs, own)
            sidecars = summed(sidecars, own)
            own = dict(sidecars)
        else:
            own = summed(own, sidecars)
        init = _max(init, own)
    reqs = _max(reqs, init)
    overhead = {name: parse(v) for name, v in (pod_spec.get("overhead") or {}).items()}
    return summed(reqs, overhead)
