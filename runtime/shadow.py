"""Shadow mode: compiled code and the interpreter run side by side, op by op.

Expects: a module at the `grad` stage with shadow taps (`lowering.instrument.shadow_taps`): a
`dg.tap` after each op that makes tensors, and their table. Guarantees: `Shadow.run` runs the
compiled code first, keeping what each tap shows, then the interpreter; at each tap the
interpreter compares its value with compiled code's and goes on with compiled code's, so that
every op is compared on the same inputs and a difference is the op's own, not one carried from
an earlier op. The first op whose values differ beyond rounding (`differ`) is a
`ShadowDivergence` at its `.dg` line, with both values; so is a failure in one mode that the
other does not have. What the call returns is compiled code's. Only shadow mode pays for any
of this: the taps exist in its module alone.
"""
from __future__ import annotations

import numpy as np

from dg.core.attrs import table
from dg.core.errors import DgRuntimeError
from dg.core.locations import loc_from_row
from dg.lowering.codegen.units import Unit

from . import interp, targets
from .cpu import CPU

# How far apart the two modes' values may be, in units of the element type's epsilon, relative to
# the value (or to the largest magnitude in the array, for elements near zero): compiled code
# sums in other orders and vectorizes exp and tanh with approximations good to a few units.
ROUNDING_EPS = 512
_EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


class ShadowDivergence(DgRuntimeError):
    """The interpreter and compiled code disagree at this op."""


def differ(a, b) -> str | None:
    """Why two values of one op differ beyond rounding (None where they agree)."""
    a, b = np.asarray(a), _as_bits_of(np.asarray(b), np.asarray(a).dtype)
    if a.shape != b.shape:
        return f"shapes {a.shape} and {b.shape}"
    if a.dtype.name not in _EPS:
        bad = a != b
        if not np.any(bad):
            return None
        return f"{int(np.count_nonzero(bad))} of {a.size} elements differ, first at {_first(bad)}"
    x, y = a.astype(np.float64), b.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    scale = np.max(np.abs(y[np.isfinite(y)]), initial=0.0)
    with np.errstate(invalid="ignore"):
        close = np.abs(x - y) <= ROUNDING_EPS * _EPS[a.dtype.name] * (np.abs(y) + scale)
    bad = ~(same | close)
    if not np.any(bad):
        return None
    at = _first(bad)
    return (f"{int(np.count_nonzero(bad))} of {a.size} elements differ beyond rounding, first at {at}: "
            f"{float(x[at])!r} against {float(y[at])!r}")


def _as_bits_of(v: np.ndarray, dtype) -> np.ndarray:
    """`v` read as `dtype` where both are integers of one width that differ in sign only (a key,
    u64 in the interpreter, comes out of compiled code as the same 64 bits read as i64)."""
    if v.dtype != dtype and v.dtype.kind in "iu" and dtype.kind in "iu" and v.dtype.itemsize == dtype.itemsize:
        return v.view(dtype)
    return v


def _first(bad: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()


def _shown(v) -> str:
    return np.array2string(np.asarray(v), threshold=20, edgeitems=3, precision=8)


class Shadow:
    """A specialization run in both modes, compared at every tap."""

    def __init__(self, module, symbol: str):
        self.taps = [(loc_from_row(place), name, grad) for place, name, grad in table(module, "dg.taps")]
        self.translation = interp.Translation(module)
        self.compiled = targets.build(CPU, Unit(module=module, entry=symbol))

    def run(self, symbol: str, arrays):
        shown: list = []
        before, self.compiled.on_tap = self.compiled.on_tap, lambda tid, value: shown.append((tid, value))
        try:
            out, failed = self.compiled.call(symbol, arrays), None
        except DgRuntimeError as e:
            out, failed = None, e
        finally:
            self.compiled.on_tap = before
        pending = iter(shown)
        self.translation.ns["_tap"] = lambda tid, value: self._compare(tid, value, pending, failed)
        interp._Console.muted = True  # (each line printed once: compiled code's)
        try:
            interp.run(self.translation, symbol, arrays)
        except ShadowDivergence:
            raise
        except DgRuntimeError as e:
            if failed is None:
                raise ShadowDivergence(f"shadow: the interpreter stopped here ({e.raw_message}) and compiled code "
                                       "did not", e.loc, notes=e.notes) from None
            raise failed from None
        finally:
            interp._Console.muted = False
        if failed is not None:
            raise ShadowDivergence(f"shadow: compiled code stopped here ({failed.raw_message}) and the "
                                   "interpreter did not", failed.loc, notes=failed.notes)
        return out

    def _compare(self, tid: int, value, pending, failed):
        loc, name, grad = self.taps[tid]
        what = f"{name}{' in the gradient of this line' if grad else ''}"
        try:
            ctid, cvalue = next(pending)
        except StopIteration:
            raise ShadowDivergence(f"shadow: the interpreter reached {what}, which compiled code did not"
                                   + (f" (it stopped at {failed.loc}: {failed.raw_message})" if failed else ""),
                                   loc) from None
        if ctid != tid:
            other, oname, _ = self.taps[ctid]
            raise ShadowDivergence(f"shadow: the interpreter reached {what} where compiled code reached "
                                   f"{oname} at {other}: their control flow differs", loc)
        why = differ(value, cvalue)
        if why is not None:
            raise ShadowDivergence(f"shadow: {what} differs between the modes: {why}", loc,
                                   notes=[f"  interpreter: {_shown(value)}", f"  compiled:    {_shown(cvalue)}"])
        cvalue = np.asarray(_as_bits_of(np.asarray(cvalue), np.asarray(value).dtype),
                            dtype=np.asarray(value).dtype)  # go on with compiled code's value
        return cvalue if isinstance(value, np.ndarray) else cvalue[()]
