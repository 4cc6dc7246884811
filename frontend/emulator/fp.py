"""Floating-point helpers for the VALU semantics.

Everything works on numpy arrays (one element per lane) and on raw bit patterns,
so NaN payloads, signed zeros and denormals survive exactly as the hardware sees
them. Rounding is round-to-nearest-even throughout (the MODE our kernels run
with, isa_notes §3); denormals are kept unless a function says otherwise.

Fused operations (fma, dot products, mixed fma) need one rounding of an exact
result. numpy has no fma, so the exact value is formed in float64 (products of
f32/f16/bf16 values are exact there), the sum is made error-free with TwoSum,
and the float64 result is then *rounded to odd*: if the sum was inexact, the
neighbour whose last significand bit is 1 is taken. A round-to-odd value with at
least two more bits than the target rounds to the same result as the exact value
would, so the final cast to f32/f16 is a single correct rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

# ---------------------------------------------------------------------------
# bit views

def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (low 16 bits of each element) to exact f32 values."""
    return ((np.asarray(bits).astype(np.uint32) & 0xFFFF) << 16).view(np.float32)


def is_snan32(bits: np.ndarray) -> np.ndarray:
    b = np.asarray(bits, np.uint32)
    return ((b & 0x7F800000) == 0x7F800000) & ((b & 0x007FFFFF) != 0) & ((b & 0x00400000) == 0)


def is_snan16(bits: np.ndarray) -> np.ndarray:
    b = np.asarray(bits).astype(np.uint32)
    return ((b & 0x7C00) == 0x7C00) & ((b & 0x03FF) != 0) & ((b & 0x0200) == 0)


def is_snan64(bits: np.ndarray) -> np.ndarray:
    b = np.asarray(bits, np.uint64)
    return (((b & np.uint64(0x7FF0000000000000)) == np.uint64(0x7FF0000000000000))
            & ((b & np.uint64(0x000FFFFFFFFFFFFF)) != 0) & ((b & np.uint64(0x0008000000000000)) == 0))


def quiet(x: np.ndarray) -> np.ndarray:
    """Set the quiet bit of every NaN in a float16/32/64 array (other values unchanged)."""
    x = np.asarray(x)
    nan = np.isnan(x)
    if not np.count_nonzero(nan):
        return x
    ut = {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    qbit = {2: 0x0200, 4: 0x00400000, 8: 0x0008000000000000}[x.dtype.itemsize]
    b = x.view(ut)
    return np.where(nan, b | ut(qbit), b).astype(ut).view(x.dtype)


_TINY = {np.dtype(np.float16): np.float16(2.0 ** -14), np.dtype(np.float32): np.float32(2.0 ** -126),
         np.dtype(np.float64): np.float64(2.0 ** -1022)}


def flush_denorm(x: np.ndarray) -> np.ndarray:
    """Replace denormals by zeros of the same sign (for units that do not deliver denormals)."""
    x = np.asarray(x)
    den = np.abs(x) < _TINY[x.dtype]
    if not np.count_nonzero(den):           # (zeros count here too; they are excluded below)
        return x
    den &= x != 0
    if not np.count_nonzero(den):
        return x
    return np.where(den, np.copysign(np.zeros_like(x), x), x)


# ---------------------------------------------------------------------------
# exact sums with one final rounding

def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and the exact error e with a + b = s + e (float64; e is NaN when s is not finite)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def round_to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """Given the exact value s + err (s = its float64 rounding), return it rounded to odd.

    Inexact: truncate toward zero (s itself, or one ulp less in magnitude when the
    exact value is below |s|) and set the last significand bit."""
    inexact = (err != 0) & np.isfinite(err)
    if not np.count_nonzero(inexact):
        return s
    bits = s.view(np.int64)
    below = (err < 0) != (s < 0)
    return np.where(inexact, (bits - below) | 1, bits).view(np.float64)


def sum_rto(terms: list[np.ndarray]) -> np.ndarray:
    """Sum of float64 terms (each exact), rounded to odd in float64.

    Exact for two terms; for more terms the accumulated error is itself a float64
    sum, so the sticky direction could only be wrong after massive cancellation
    between the error terms – far below what the target (f32/f16) can see.
    Non-finite terms give the ordinary IEEE sum.
    """
    s = terms[0]
    es = []
    for t in terms[1:]:
        s, e = two_sum(s, t)
        es.append(e)
    if es and not any(np.count_nonzero(e) for e in es):
        # every addition exact (so s is finite and errs below is +0.0): the steps below give s + 0.0
        return s + 0.0
    errs: np.ndarray | float = 0.0
    for e in es:
        errs = errs + e
    s2, e2 = two_sum(s, errs)
    return round_to_odd(np.where(np.isfinite(errs), s2, s), e2)


def fma_rto(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a*b + c rounded to odd in float64; a, b must have at most 26 significand bits (f32/f16/bf16)."""
    p = np.asarray(a, np.float64) * b               # exact for f32-sized significands
    return round_to_odd(*two_sum(p, np.asarray(c, np.float64)))


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add with a single RNE rounding to f32 (denormals kept; the casts quiet NaNs).

    (A float64 fast path that falls back only where fl64(a*b + c) is an f32 rounding midpoint
    was tried: in accumulation loops many exact sums are such midpoints, so it cost more.)"""
    return fma_rto(a, b, c).astype(np.float32)


def fma_f16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add of f16 values with a single RNE rounding to f16.

    No round-to-odd step is needed: a*b (22 significant bits) is exact in float64, and a*b + c
    is too unless the terms are about 2^30 or more apart in magnitude. If a*b is then the larger,
    it exceeds 2^18 (a nonzero c is at least 2^-24) and the result overflows f16 either way; if c
    is, the tiny a*b lies below half an f16 ulp of c, which is no rounding midpoint, so the f16
    result is c either way. So float64's rounding never changes the f16 result (also checked
    against `fma_rto` on 24M random and boundary samples)."""
    return to_f16(np.asarray(a, np.float64) * b + np.asarray(c, np.float64))


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded f64 fma, exact rational arithmetic per lane (rare op; slow but exact)."""
    a, b, c = (np.asarray(x, np.float64) for x in (a, b, c))
    a, b, c = np.broadcast_arrays(a, b, c)
    out = np.empty(a.shape, np.float64)
    for i in np.ndindex(a.shape):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out[i] = x * y + z
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            p_neg = (np.signbit(x) != np.signbit(y))
            out[i] = -0.0 if (p_neg and np.signbit(z) and (x == 0 or y == 0)) else 0.0
            continue
        try:
            out[i] = exact.numerator / exact.denominator   # CPython int division rounds correctly
        except OverflowError:
            out[i] = np.inf if exact > 0 else -np.inf
    return out


# ---------------------------------------------------------------------------
# f16 / bf16

def to_f16(x: np.ndarray) -> np.ndarray:
    """float32/64 values to float16 with one RNE rounding (overflow -> inf, denormals kept, NaN quieted)."""
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    return quiet(x.astype(np.float16))


F16_MAX = np.float16(65504.0)


def saturate_f16(r: np.ndarray, *sources: object) -> np.ndarray:
    """MODE.FP16_OVFL = 1: an f16 result that overflowed to +-inf becomes +-65504, unless the
    lane had an infinite float source (a "true" inf stays). NaN is unchanged.

    `sources` are the lane's typed operands (arrays or scalars; non-float ones are ignored).
    """
    r = np.asarray(r, np.float16)
    over = np.isinf(r)
    if not np.count_nonzero(over):
        return r
    for src in sources:
        a = np.asarray(src)
        if a.dtype.kind == "f":
            over = over & ~np.isinf(a)
    return np.where(over, np.where(np.signbit(r), -F16_MAX, F16_MAX), r).astype(np.float16)


def f32_to_f16_rtz(x: np.ndarray) -> np.ndarray:
    """f32 to f16 rounding toward zero (v_cvt_pkrtz); overflow saturates to max finite."""
    x = np.asarray(x, np.float32)
    r = to_f16(x)
    over = np.abs(r.astype(np.float64)) > np.abs(x.astype(np.float64))
    step = np.nextafter(r, np.zeros_like(r))
    r = np.where(over & np.isfinite(x), step, r)
    return quiet(np.where(np.isinf(x), x.astype(np.float16), r))


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """f32 values to bf16 bit patterns (uint32 holding 16 bits): RNE, NaN quieted, overflow -> inf."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint32) & 0xFFFF


# ---------------------------------------------------------------------------
# fp8

@dataclass(frozen=True)
class F8Format:
    """An 8-bit float format. FNUZ: NaN only 0x80, no -0, no inf. OCP: IEEE-like sign handling."""

    name: str
    ebits: int
    mbits: int
    bias: int
    fnuz: bool

    @property
    def has_inf(self) -> bool:        # only OCP E5M2
        return not self.fnuz and self.ebits == 5

    @property
    def max_code(self) -> int:
        """Largest positive finite code."""
        if self.fnuz:
            return 0x7F
        return 0x7B if self.ebits == 5 else 0x7E

    def _value(self, code: int) -> float:
        e = (code >> self.mbits) & ((1 << self.ebits) - 1)
        m = code & ((1 << self.mbits) - 1)
        if e == 0:
            return m * 2.0 ** (1 - self.bias - self.mbits)
        return (1 + m / (1 << self.mbits)) * 2.0 ** (e - self.bias)

    @cached_property
    def table(self) -> np.ndarray:
        """Decoded f32 value of each of the 256 codes."""
        out = np.empty(256, np.float32)
        for c in range(256):
            mag = c & 0x7F
            neg = bool(c & 0x80)
            if self.fnuz:
                v = np.nan if c == 0x80 else self._value(mag)
            elif mag > self.max_code:
                v = np.inf if (self.has_inf and mag == 0x7C) else np.nan
            else:
                v = self._value(mag)
            out[c] = -v if neg else v
        return out

    @cached_property
    def _grid(self) -> np.ndarray:
        """Positive finite values by code, plus one sentinel: the value the next code would have."""
        vals = [self._value(c) for c in range(self.max_code + 1)]
        e = (self.max_code >> self.mbits) & ((1 << self.ebits) - 1)
        vals.append(vals[-1] + 2.0 ** (e - self.bias - self.mbits))
        return np.array(vals, np.float64)

    @property
    def nan_code(self) -> int:
        return 0x80 if self.fnuz else 0x7F

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(codes).astype(np.intp) & 0xFF]

    def encode(self, x: np.ndarray, saturate: bool = False) -> np.ndarray:
        """f32/f64 values to codes (uint32) with RNE.

        Out of range (including ±inf) gives NaN for E4M3 and FNUZ E5M2, ±inf for
        OCP E5M2 – unless `saturate` (MODE.FP16_OVFL), which gives ±max instead.
        NaN gives NaN (OCP keeps the sign: 0x7F/0xFF).
        """
        x = np.asarray(x, np.float64)
        grid = self._grid
        ax = np.abs(x)
        neg = np.signbit(x)
        idx = np.searchsorted(grid, ax, side="left")
        hi = np.minimum(idx, len(grid) - 1)
        lo = np.maximum(idx - 1, 0)
        d_lo = ax - grid[lo]
        d_hi = grid[hi] - ax
        pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
        code = np.where(pick_hi, hi, lo)
        code = np.where(ax == grid[hi], hi, code)
        over = (code > self.max_code) | (ax > grid[-1])          # includes inf
        sign = np.where(neg, 0x80, 0)
        out = code | sign
        if self.fnuz:
            out = np.where(code == 0, 0, out)                      # no negative zero
        if saturate:
            ovf = self.max_code | sign
        elif self.has_inf:
            ovf = 0x7C | sign
        else:
            ovf = np.full_like(out, self.nan_code) | (0 if self.fnuz else sign)
        out = np.where(over, ovf, out)
        nan_val = self.nan_code if self.fnuz else (0x7F | sign)
        out = np.where(np.isnan(x), nan_val, out)
        return out.astype(np.uint32)


FP8_FNUZ = F8Format("e4m3fnuz", 4, 3, 8, True)
BF8_FNUZ = F8Format("e5m2fnuz", 5, 2, 16, True)
FP8_OCP = F8Format("e4m3fn", 4, 3, 7, False)
BF8_OCP = F8Format("e5m2", 5, 2, 15, False)


def f8_formats(flavour: str | None) -> tuple[F8Format, F8Format]:
    """(fp8, bf8) formats for a target's fp8 flavour ("fnuz" on gfx942, "ocp" on gfx950/gfx12)."""
    if flavour == "fnuz":
        return FP8_FNUZ, BF8_FNUZ
    if flavour == "ocp":
        return FP8_OCP, BF8_OCP
    raise ValueError(f"this target has no hardware fp8 (flavour {flavour!r})")


# ---------------------------------------------------------------------------
# min / max with the hardware NaN and signed-zero rules

def _gt_signed_zero(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a > b with +0 > -0 (NaN-free inputs)."""
    return (a > b) | ((a == b) & ~np.signbit(a) & np.signbit(b))


def _is_snan(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return {2: is_snan16, 4: is_snan32, 8: is_snan64}[x.dtype.itemsize](
        x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]))


def minmax_ieee(a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    """gfx9/gfx11 v_max/v_min with IEEE=1: sNaN -> that NaN quieted, a qNaN yields the other operand."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    pick_a = _gt_signed_zero(a, b) if is_max else _gt_signed_zero(b, a)
    r = np.where(pick_a, a, b)
    an, bn = np.isnan(a), np.isnan(b)
    r = np.where(an & ~bn, b, r)
    r = np.where(bn & ~an, a, r)
    r = np.where(an & bn, a, r)
    sa, sb = _is_snan(a), _is_snan(b)
    r = np.where(sb, b, r)
    r = np.where(sa, a, r)
    return quiet(r)


def minmax_num(a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    """gfx12 v_max_num/v_min_num (IEEE-754-2019 maximumNumber): a single NaN yields the other operand."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    pick_a = _gt_signed_zero(a, b) if is_max else _gt_signed_zero(b, a)
    r = np.where(pick_a, a, b)
    an, bn = np.isnan(a), np.isnan(b)
    r = np.where(an, b, r)
    r = np.where(bn, a, r)
    r = np.where(an & bn, a, r)
    return quiet(r)


def minmax_nan(a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    """gfx12 v_maximum/v_minimum (IEEE-754-2019 maximum): any NaN gives NaN."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    pick_a = _gt_signed_zero(a, b) if is_max else _gt_signed_zero(b, a)
    r = np.where(pick_a, a, b)
    r = np.where(np.isnan(b), b, r)
    r = np.where(np.isnan(a), a, r)
    return quiet(r)
