"""Numbers for people and selection.json: bounds rounded outward (upper up, lower down), so a printed bound never
claims more than the computed one."""

from __future__ import annotations

import decimal
import math


def _round(x, nd=6):
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if math.isfinite(x) else None  # selection.json stays strict JSON


def round_up(x, nd: int = 6, cap: float | None = None):
    """An upper bound rounded up to ``nd`` decimals; never past ``cap`` (alpha) when the bound itself is not."""
    if x is None or not math.isfinite(float(x)):
        return None
    x = float(x)
    r = round(x, nd)
    if r < x:
        r = round(r + 10.0 ** -nd, nd)
    return float(cap) if cap is not None and x <= cap < r else r


def round_down(x, nd: int = 6):
    """A lower bound rounded down to ``nd`` decimals."""
    if x is None or not math.isfinite(float(x)):
        return None
    x = float(x)
    r = round(x, nd)
    return round(r - 10.0 ** -nd, nd) if r > x else r


def bound_text(x, alpha: float | None = None, digits: int = 3) -> str:
    """An upper bound rounded up to ``digits`` significant digits (not past alpha unless the bound is); "": none."""
    if x is None:
        return ""
    x = float(x)
    if x == 0.0:
        return "0"
    with decimal.localcontext() as ctx:
        ctx.prec, ctx.rounding = digits, decimal.ROUND_CEILING
        text = format(+decimal.Decimal(repr(x)), "f")
    if alpha is not None and x <= alpha < float(text):
        return f"{alpha:g}"
    return text


def share_text(x, digits: int = 3) -> str:
    """A lower bound on a share as a percentage rounded *down* to ``digits`` significant digits; "": none."""
    if x is None:
        return ""
    x = float(x) * 100.0
    if x == 0.0:
        return "0%"
    with decimal.localcontext() as ctx:
        ctx.prec, ctx.rounding = digits, decimal.ROUND_FLOOR
        return format(+decimal.Decimal(repr(x)), "f") + "%"
