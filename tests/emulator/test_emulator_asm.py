"""Instruction tests from hand-written assembly kernels: rounding, fp8 conversions, MFMA / WMMA.

The kernels are tests/kernels/asm/{rounding,fp8cvt,matrix}.s (each file's header says
what its records hold), assembled by ``python -m build_scripts`` into tests/hsaco/. Expected
values are worked out here from the ISA rules (shared/reference/isa_notes.md §5.0, §5.4, §5.7,
§5.14 and shared/reference/matrix_layouts.md), never taken from the emulator:

* f32 arithmetic (v_fma_f32, v_fmac_f32, v_mul_f32, v_add_f32): the exact result in rationals,
  rounded once to nearest even by `round_f32` (denormals kept, overflow decided after rounding,
  IEEE signed zeros). `F32_HAND` lists cases worked out by hand; the rule is checked against it.
* f32 -> f16: numpy's cast, which is the ISA's RNE with f16 denormals kept and overflow to inf
  (FP16_OVFL = 0); f16 -> f32: numpy's exact widening. numpy differs from the ISA on NaNs: it
  keeps a signalling NaN signalling (and its f32 -> f16 cast can leave the quiet bit clear),
  while the ISA returns quiet NaNs from conversions and arithmetic. The payload is not pinned by
  the ISA, so NaN results are checked for being NaN with the quiet bit set.
  `F16_HAND` / `H_HAND` pin the ties, the overflow threshold and the denormal edges by hand.
* fp8: ml_dtypes' float8_e4m3fnuz / float8_e5m2fnuz (gfx942, FNUZ) and float8_e4m3fn /
  float8_e5m2 (gfx950, gfx1201, OCP) decode every byte as the ISA tables say, and encode like
  the ISA at FP16_OVFL = 0 (RNE from f32, then a rounded magnitude past the maximum becomes NaN,
  or inf for OCP E5M2; FNUZ has no -0, so results rounding to -0 are 0x00). Where they differ:
  ml_dtypes picks one NaN code where the ISA only says "NaN" (NaN results are checked by
  decoding them), and it has no saturating cast (FP16_OVFL = 1: finite inputs are clamped to
  +-max first). `F8_HAND` pins the boundary cases by hand and is checked against ml_dtypes.
  With FP16_OVFL = 1 the ISA notes do not say what +-inf becomes, so no inf is fed to the
  saturating kernels.
* MFMA / WMMA: matrices placed by the inverse lane layouts of matrix_layouts.md and compared
  with numpy's A @ B + C, exactly for small-integer data (every sum is exact whatever the
  accumulation order) and within an f32 accumulation error bound for general data.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from emulated import from_device, launch, load_test_kernel, to_device

from hipskinny.arch import ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.emulator.descriptor import descriptor_of

ALL_ARCHS = list(ARCHS)
FP8_ARCHS = ["gfx942", "gfx950", "gfx1201"]
GFX9 = ("gfx942", "gfx950")
INF = float("inf")
SENTINEL = 0xDEADBEEF


def device(arch: str) -> EmulatedDevice:
    return EmulatedDevice(arch, num_cus=4)


def f32_of_bits(words) -> np.ndarray:
    return np.asarray(words, np.uint32).view(np.float32)


def bits_of_f32(values) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


def block_of(n: int) -> int:
    """The block for n work-items: the kernels have no bounds check, so n fills whole waves of
    both sizes (a multiple of 64) and at most max_flat_workgroup_size (256)."""
    assert n % 64 == 0 and 0 < n <= 256, n
    return n


def with_bits(values, nan_bits) -> np.ndarray:
    """f32 `values` followed by the NaNs of `nan_bits`, built as bits: a signalling NaN that went
    through a double (Python float, float64 array) would come back quiet."""
    return np.concatenate([np.asarray(values, np.float64).astype(np.float32), f32_of_bits(nan_bits)])


# --- f32 reference: exact arithmetic, one RNE rounding ---------------------------------------

_TWO = Fraction(2)
_F32_LIMIT = _TWO ** 128            # the first magnitude past the f32 range after rounding


def round_f32(v: Fraction) -> np.float32:
    """`v` rounded once to f32, nearest even; denormals kept; overflow (after rounding) -> inf.

    Nonzero `v` only: a tiny value that rounds to zero keeps its sign.
    """
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < _TWO ** e:
        e -= 1                                   # now 2^e <= a < 2^(e + 1)
    quantum = _TWO ** (max(e, -126) - 23)        # the spacing of f32 values there (2^-149 below 2^-126)
    n, rem = divmod(a, quantum)
    if rem > quantum / 2 or (rem == quantum / 2 and n % 2):
        n += 1
    r = n * quantum
    mag = INF if r >= _F32_LIMIT else float(r)   # float(r) is exact: every f32 is a double
    return np.float32(-mag if v < 0 else mag)


def fma_ref(x, y, z) -> np.float32:
    """IEEE fused multiply-add in f32: x * y + z exactly, rounded once."""
    x, y, z = np.float32(x), np.float32(y), np.float32(z)
    if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
        # Only inf or NaN can come out; double arithmetic has the IEEE rules for them.
        with np.errstate(invalid="ignore", over="ignore"):
            return np.float32(np.float64(x) * np.float64(y) + np.float64(z))
    p = Fraction(float(x)) * Fraction(float(y))
    s = p + Fraction(float(z))
    if s == 0:
        # An exact zero sum is +0 under RNE unless both terms are -0 (a zero product has the xor sign).
        negative = p == 0 and bool(np.signbit(x) ^ np.signbit(y)) and bool(np.signbit(z))
        return np.float32(-0.0 if negative else 0.0)
    return round_f32(s)


def mul_ref(x, y) -> np.float32:
    return fma_ref(x, y, -0.0)                   # x * y + (-0) is x * y, signed zeros included


def add_ref(x, y) -> np.float32:
    return fma_ref(x, 1.0, y)


# Hand-worked f32 cases, as bits: x, y, z, then fma(x, y, z), x * y, x + y, (x * y) + z.
F32_HAND = [
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the product alone ties and rounds to 1 + 2^-11 (even),
    # so mul-then-add gives 2^-11 where the fused op keeps 2^-11 + 2^-24.
    (0x3F800800, 0x3F800800, 0xBF800000, 0x3A000400, 0x3F801000, 0x40000800, 0x3A000000),
    # (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46: fused -> -2^-46; the product rounds to 1, then 1 - 1 = +0.
    (0x3F800001, 0x3F7FFFFE, 0xBF800000, 0xA8800000, 0x3F800000, 0x40000000, 0x00000000),
    # 2^127 * 3 overflows on its own; fused with z = -1.5 * 2^127 it is 1.5 * 2^127.
    (0x7F000000, 0x40400000, 0xFF400000, 0x7F400000, 0x7F800000, 0x7F000000, 0x7F800000),
    # 2^-100 * 2^-30 = 2^-130: an f32 denormal (2^19 * 2^-149), kept.
    (0x0D800000, 0x30800000, 0x00000000, 0x00080000, 0x00080000, 0x30800000, 0x00080000),
    # 2^-75 * 2^-75 = 2^-150: halfway between 0 and 2^-149 -> 0 (even); + (-0) stays +0.
    (0x1A000000, 0x1A000000, 0x80000000, 0x00000000, 0x00000000, 0x1A800000, 0x00000000),
    # 1.5 * 2^-75 * 2^-75 = 0.75 * 2^-149 -> 2^-149.
    (0x1A400000, 0x1A000000, 0x00000000, 0x00000001, 0x00000001, 0x1AA00000, 0x00000001),
    # -2^-150 rounds to -0; -0 + -0 = -0; x + (-x) = +0.
    (0x9A000000, 0x1A000000, 0x80000000, 0x80000000, 0x80000000, 0x00000000, 0x80000000),
    # 2^-126 - 3 * 2^-149 = 0x007ffffd (denormal, exact); a product far below 2^-149 rounds to -0.
    (0x00800000, 0x80000003, 0x00000001, 0x00000001, 0x80000000, 0x007FFFFD, 0x00000001),
    # 2^-149 + 2^-149 = 2^-148; (2^-149)^2 -> +0.
    (0x00000001, 0x00000001, 0x3F800000, 0x3F800000, 0x00000000, 0x00000002, 0x3F800000),
    # 1 + 2^-24 ties -> 1 (even).
    (0x3F800000, 0x33800000, 0x33800000, 0x34000000, 0x33800000, 0x3F800000, 0x34000000),
    # (1 + 2^-23) + 2^-24 ties -> 1 + 2^-22 (even); -1 + 2^-24 + 2^-47 -> -(1 - 2^-24).
    (0x3F800001, 0x33800000, 0xBF800000, 0xBF7FFFFF, 0x33800001, 0x3F800002, 0xBF7FFFFF),
    # max + 2^103 (half its ulp) ties; max is odd -> rounds up past the range -> inf.
    (0x7F7FFFFF, 0x73000000, 0xFF7FFFFF, 0x7F800000, 0x7F800000, 0x7F800000, 0x7F800000),
    # max + 2^102 -> max.
    (0x7F7FFFFF, 0x72800000, 0x00000000, 0x7F800000, 0x7F800000, 0x7F7FFFFF, 0x7F800000),
    # inf * 0 -> NaN; inf + 0 -> inf.
    (0x7F800000, 0x00000000, 0x3F800000, None, None, 0x7F800000, None),
    # a signalling and a quiet NaN operand -> quiet NaN everywhere.
    (0x7FA00001, 0x3F800000, 0x3F800000, None, None, None, None),
    (0x3F800000, 0xFFC00000, 0x00000000, None, None, None, None),
    # signed zeros: (-0)(-0) + (-0) = +0; 0 * (-0) + (-0) = -0; -0 + -0 = -0; 0 + -0 = +0.
    (0x80000000, 0x80000000, 0x80000000, 0x00000000, 0x00000000, 0x80000000, 0x00000000),
    (0x00000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000, 0x00000000, 0x80000000),
    # 1.5 * (-1.5) + 2.25 = exactly 0 -> +0.
    (0x3FC00000, 0xBFC00000, 0x40100000, 0x00000000, 0xC0100000, 0x00000000, 0x00000000),
    # denormal x + (-x) = +0; a tiny negative product rounds to -0, + 2^-149 -> 2^-149.
    (0x000116C2, 0x800116C2, 0x00000001, 0x00000001, 0x80000000, 0x00000000, 0x00000001),
]

# f32 value -> f16 bits (RNE, overflow to inf, f16 denormals kept).
F16_HAND = [
    (1 + 2 ** -11, 0x3C00),            # halfway between 1 and 1 + 2^-10: even -> 1
    (1 + 3 * 2 ** -11, 0x3C02),        # halfway between 1 + 2^-10 and 1 + 2^-9: even -> 1 + 2^-9
    (1 + 2 ** -11 + 2 ** -20, 0x3C01),  # just above a tie
    (-(1 + 2 ** -11), 0xBC00),
    (65504.0, 0x7BFF),                 # f16 max
    (65520 - 2 ** -8, 0x7BFF),         # just below the midpoint between max and 2^16
    (65520.0, 0x7C00),                 # the midpoint: max is odd -> rounds up -> inf
    (1e5, 0x7C00), (-1e5, 0xFC00), (INF, 0x7C00), (-INF, 0xFC00),
    (2 ** -24, 0x0001),                # smallest f16 denormal
    (2 ** -25, 0x0000),                # halfway between 0 and 2^-24: even -> 0
    (1.5 * 2 ** -25, 0x0001),
    (3 * 2 ** -25, 0x0002),            # halfway between 2^-24 and 2^-23: even -> 2^-23
    (2 ** -14 - 2 ** -24, 0x03FF),     # largest denormal
    (2 ** -14 - 2 ** -25, 0x0400),     # halfway between it (odd) and 2^-14 -> 2^-14
    (-(2 ** -26), 0x8000),             # underflows to -0
    (1e-40, 0x0000), (-1e-40, 0x8000),  # f32 denormals
]
F16_NAN_INPUTS = [0x7FA00001, 0xFFC00000, 0x7F800001, 0xFF812345]   # f32 bits; the third would truncate to inf

# f16 bits -> f32 bits (exact widening); None: a NaN, returned quiet.
H_HAND = [
    (0x0001, 0x33800000), (0x03FF, 0x387FC000), (0x0400, 0x38800000), (0x3C00, 0x3F800000),
    (0x7BFF, 0x477FE000), (0x8000, 0x80000000), (0x83FF, 0xB87FC000), (0x7C00, 0x7F800000),
    (0xFC00, 0xFF800000), (0x7C01, None), (0xFD55, None), (0x7E00, None),
]


# --- fp8 reference ---------------------------------------------------------------------------

# (E4M3 "fp8" dtype, E5M2 "bf8" dtype) per arch: FNUZ on gfx942, OCP on gfx950 and gfx1201.
F8_TYPES = {"gfx942": (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz),
            "gfx950": (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2),
            "gfx1201": (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)}
F8_MAX = {ml_dtypes.float8_e4m3fnuz: 240.0, ml_dtypes.float8_e5m2fnuz: 57344.0,
          ml_dtypes.float8_e4m3fn: 448.0, ml_dtypes.float8_e5m2: 57344.0}
NAN8 = None      # in the tables below: "some NaN code of the format"

# f32 value -> byte at FP16_OVFL = 0, worked out from each format's bias, max and NaN/inf codes.
F8_HAND = {
    ml_dtypes.float8_e4m3fn: [            # bias 7, max 448 = 0x7e, NaN 0x7f / 0xff, -0 = 0x80
        (448.0, 0x7E), (464.0, 0x7E),     # 464 is halfway to 480 (not a value): 448 is even -> 448
        (465.0, NAN8), (480.0, NAN8), (-464.0, 0xFE), (1e9, NAN8), (INF, NAN8), (-INF, NAN8),
        (1.0, 0x38), (1 + 2 ** -4, 0x38), (1 + 3 * 2 ** -4, 0x3A),   # ties to even
        (2 ** -6, 0x08), (7 * 2 ** -9, 0x07), (2 ** -9, 0x01),        # min normal, denormals
        (2 ** -10, 0x00), (1.5 * 2 ** -10, 0x01), (-(2 ** -10), 0x80), (-0.0, 0x80),
    ],
    ml_dtypes.float8_e4m3fnuz: [          # bias 8, max 240 = 0x7f, NaN only 0x80, no -0
        (240.0, 0x7F), (247.99, 0x7F),
        (248.0, NAN8), (256.0, NAN8),     # 248 is halfway to 256: 240 is odd -> rounds up -> overflow
        (-240.0, 0xFF), (INF, NAN8), (-INF, NAN8),
        (1.0, 0x40), (1 + 2 ** -4, 0x40), (1 + 3 * 2 ** -4, 0x42),
        (2 ** -7, 0x08), (2 ** -10, 0x01), (2 ** -11, 0x00), (-(2 ** -10), 0x81),
        (-(2 ** -11), 0x00), (-0.0, 0x00),                            # no -0: rounds to +0
    ],
    ml_dtypes.float8_e5m2: [              # bias 15, max 57344 = 0x7b, inf 0x7c, NaN 0x7d..0x7f
        (57344.0, 0x7B), (61439.0, 0x7B),
        (61440.0, 0x7C),                  # halfway to 65536: max is odd -> rounds up -> inf
        (1e9, 0x7C), (-1e9, 0xFC), (INF, 0x7C), (-INF, 0xFC),
        (1.0, 0x3C), (1.125, 0x3C), (1.375, 0x3E),                    # ties to even
        (2 ** -14, 0x04), (2 ** -16, 0x01), (2 ** -17, 0x00), (-(2 ** -17), 0x80), (-0.0, 0x80),
    ],
    ml_dtypes.float8_e5m2fnuz: [          # bias 16, max 57344 = 0x7f, NaN only 0x80, no -0, no inf
        (57344.0, 0x7F), (61439.0, 0x7F), (61440.0, NAN8), (1e9, NAN8), (INF, NAN8),
        (-57344.0, 0xFF), (1.0, 0x40), (1.125, 0x40), (1.375, 0x42),
        (2 ** -15, 0x04), (2 ** -17, 0x01), (2 ** -18, 0x00), (-(2 ** -18), 0x00), (-0.0, 0x00),
    ],
}

# byte -> value, by hand: the extremes and the smallest denormal of each format.
F8_DECODE_HAND = {
    ml_dtypes.float8_e4m3fn: [(0x7E, 448.0), (0x08, 2 ** -6), (0x01, 2 ** -9), (0x80, -0.0), (0x7F, NAN8),
                              (0xFF, NAN8), (0x38, 1.0)],
    ml_dtypes.float8_e4m3fnuz: [(0x7F, 240.0), (0x08, 2 ** -7), (0x01, 2 ** -10), (0x80, NAN8), (0xFF, -240.0),
                                (0x40, 1.0)],
    ml_dtypes.float8_e5m2: [(0x7B, 57344.0), (0x7C, INF), (0xFC, -INF), (0x7D, NAN8), (0x7F, NAN8),
                            (0x01, 2 ** -16), (0x80, -0.0), (0x3C, 1.0)],
    ml_dtypes.float8_e5m2fnuz: [(0x7F, 57344.0), (0x7C, 32768.0), (0x01, 2 ** -17), (0x80, NAN8), (0x40, 1.0)],
}


def f8_encode(x: np.ndarray, fmt, saturate: bool = False) -> np.ndarray:
    """f32 -> fp8 bytes by the ISA rule (ml_dtypes' RNE cast); `saturate`: MODE.FP16_OVFL = 1."""
    x = np.asarray(x, np.float32)
    if saturate:
        assert not np.isinf(x).any(), "FP16_OVFL = 1 with +-inf inputs is not pinned by the notes"
        m = F8_MAX[fmt]
        x = np.where(np.isnan(x), x, np.clip(x, -m, m)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(fmt).view(np.uint8)


def f8_decode(codes: np.ndarray, fmt) -> np.ndarray:
    return np.asarray(codes, np.uint8).view(fmt).astype(np.float32)


# --- checks ----------------------------------------------------------------------------------

def check_f32(got_bits: np.ndarray, want: np.ndarray, what: str, inputs: Callable[[int], str]) -> None:
    """Bit-exact f32 results; where `want` is NaN, any quiet NaN (exponent all ones, bit 22 set)."""
    got_bits = np.asarray(got_bits, np.uint32)
    want = np.asarray(want, np.float32)
    nan = np.isnan(want)
    bad = np.flatnonzero(~nan & (got_bits != want.view(np.uint32)))
    bad_nan = np.flatnonzero(nan & ((got_bits & 0x7FC00000) != 0x7FC00000))
    msgs = [f"  [{i}] {inputs(i)}: got 0x{got_bits[i]:08x}, want 0x{want.view(np.uint32)[i]:08x}" for i in bad[:8]]
    msgs += [f"  [{i}] {inputs(i)}: got 0x{got_bits[i]:08x}, want a quiet NaN" for i in bad_nan[:8]]
    assert not msgs, f"{what}: {len(bad) + len(bad_nan)} wrong\n" + "\n".join(msgs)


def check_f16(got: np.ndarray, want: np.ndarray, what: str, inputs: Callable[[int], str]) -> None:
    """Bit-exact f16 bit patterns; where `want` is NaN, any quiet f16 NaN (0x7e00 set in the bits)."""
    got = np.asarray(got, np.uint16)
    want = np.asarray(want, np.float16)
    nan = np.isnan(want)
    bad = np.flatnonzero(~nan & (got != want.view(np.uint16)))
    bad_nan = np.flatnonzero(nan & ((got & 0x7E00) != 0x7E00))
    msgs = [f"  [{i}] {inputs(i)}: got 0x{got[i]:04x}, want 0x{want.view(np.uint16)[i]:04x}" for i in bad[:8]]
    msgs += [f"  [{i}] {inputs(i)}: got 0x{got[i]:04x}, want a quiet NaN" for i in bad_nan[:8]]
    assert not msgs, f"{what}: {len(bad) + len(bad_nan)} wrong\n" + "\n".join(msgs)


def check_f8(got: np.ndarray, want: np.ndarray, fmt, what: str, inputs: Callable[[int], str]) -> None:
    """Bit-exact fp8 bytes; where `want` is a NaN code, any byte that decodes to NaN."""
    got, want = np.asarray(got, np.uint8), np.asarray(want, np.uint8)
    nan = np.isnan(f8_decode(want, fmt))
    bad = np.flatnonzero(np.where(nan, ~np.isnan(f8_decode(got, fmt)), got != want))
    msgs = [f"  [{i}] {inputs(i)}: got 0x{got[i]:02x}, want {'NaN' if nan[i] else f'0x{want[i]:02x}'}"
            for i in bad[:8]]
    assert not msgs, f"{what} ({np.dtype(fmt).name}): {len(bad)} wrong\n" + "\n".join(msgs)


# --- the reference rules against the hand-worked tables (no device) -----------------------------

def test_reference_rules_match_hand_tables():
    for x, y, z, *want in F32_HAND:
        xf, yf, zf = f32_of_bits([x, y, z])
        got = [fma_ref(xf, yf, zf), mul_ref(xf, yf), add_ref(xf, yf), add_ref(mul_ref(xf, yf), zf)]
        for name, g, w in zip(("fma", "mul", "add", "mul+add"), got, want, strict=True):
            if w is None:
                assert np.isnan(g), (name, hex(x), hex(y), hex(z))
            else:
                assert int(bits_of_f32(g)) == w, (name, hex(x), hex(y), hex(z), hex(int(bits_of_f32(g))), hex(w))
    # numpy's f32 -> f16 cast and f16 -> f32 widening are the ISA's rules for non-NaN values
    x = np.array([v for v, _ in F16_HAND], np.float32)
    with np.errstate(over="ignore"):
        assert x.astype(np.float16).view(np.uint16).tolist() == [b for _, b in F16_HAND]
    for h, w in H_HAND:
        v = np.array([h], np.uint16).view(np.float16).astype(np.float32)
        assert np.isnan(v[0]) if w is None else int(v.view(np.uint32)[0]) == w, hex(h)
    for fmt, rows in F8_HAND.items():
        got = f8_encode(np.array([v for v, _ in rows], np.float32), fmt)
        for (v, w), g in zip(rows, got, strict=True):
            assert np.isnan(f8_decode([g], fmt)[0]) if w is None else g == w, (np.dtype(fmt).name, v, hex(g))
    for fmt, rows in F8_DECODE_HAND.items():
        for code, w in rows:
            v = f8_decode([code], fmt)[0]
            assert np.isnan(v) if w is None else (v == w and np.signbit(v) == np.signbit(w)), (fmt, hex(code))
    # OCP bytes are worth twice the FNUZ bytes (matrix_layouts.md §4.2) wherever both are finite
    for ocp, fnuz in ((ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz),
                      (ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)):
        a, b = f8_decode(np.arange(256), ocp), f8_decode(np.arange(256), fnuz)
        both = np.isfinite(a) & np.isfinite(b) & (np.arange(256) != 0x80)
        np.testing.assert_array_equal(a[both], 2 * b[both])


# --- rounding ----------------------------------------------------------------------------------

def rounding_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x, y, z (f32) and h (u32 = two f16) per work-item: the hand tables, then random cases."""
    hand = np.array([r[:3] for r in F32_HAND], np.uint32)
    xs = [f32_of_bits(hand[:, 0]), np.array([v for v, _ in F16_HAND], np.float32), f32_of_bits(F16_NAN_INPUTS)]
    ys = [f32_of_bits(hand[:, 1])]
    zs = [f32_of_bits(hand[:, 2])]
    n_hand = sum(len(a) for a in xs)
    ys.append(rng.standard_normal(n_hand - len(ys[0])).astype(np.float32))
    zs.append(rng.standard_normal(n_hand - len(zs[0])).astype(np.float32))

    def spread(n: int, lo: int, hi: int) -> np.ndarray:
        return (rng.standard_normal(n) * 2.0 ** rng.integers(lo, hi, n)).astype(np.float32)

    total = 256
    n, m = (total - n_hand) // 3, total - n_hand - 2 * ((total - n_hand) // 3)
    # general values; near-cancelling z (fused and unfused differ); products near the denormal range
    gx, gy = spread(n, -40, 40), spread(n, -40, 40)
    cx, cy = spread(n, -8, 8), spread(n, -8, 8)
    cz = (-(cx * cy) * (1 + rng.integers(-4, 5, n) * np.float32(2 ** -22))).astype(np.float32)
    tx, ty = spread(m, -80, -60), spread(m, -80, -60)
    tz = f32_of_bits(rng.integers(0, 1 << 23, m) | (rng.integers(0, 2, m) << 31))    # denormals, both signs
    xs += [gx, cx, tx]
    ys += [gy, cy, ty]
    zs += [spread(n, -40, 40), cz, tz]
    x, y, z = (np.concatenate(a) for a in (xs, ys, zs))
    assert x.dtype == y.dtype == z.dtype == np.float32 and len(x) == total
    hlist = [h for h, _ in H_HAND]
    lo = np.concatenate([hlist, rng.integers(0, 1 << 16, total - len(hlist))]).astype(np.uint32)
    hi = np.concatenate([hlist[::-1], rng.integers(0, 1 << 16, total - len(hlist))]).astype(np.uint32)
    return x, y, z, lo | (hi << 16)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_rounding(arch):
    x, y, z, h = rounding_inputs(np.random.default_rng(7))
    n = len(x)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "rounding")
    ins = [to_device(dev, a) for a in (x, y, z, h)]
    out = to_device(dev, np.full((n, 8), SENTINEL, np.uint32))
    launch(dev, module, "rounding", 1, block_of(n), [*ins, out])
    rec = from_device(dev, out, (n, 8), np.uint32)

    xb, yb, zb = bits_of_f32(x), bits_of_f32(y), bits_of_f32(z)

    def xyz(i: int) -> str:
        return f"x=0x{xb[i]:08x} y=0x{yb[i]:08x} z=0x{zb[i]:08x}"

    def xbits(i: int) -> str:
        return f"x=0x{xb[i]:08x} ({x[i]!r})"

    # 0: f32 -> f16; the other half of the destination is zeroed on gfx9 and kept on gfx10+
    upper = 0 if arch in GFX9 else 0xBEEF
    with np.errstate(over="ignore", invalid="ignore"):
        want16 = x.astype(np.float16)
    assert (rec[:, 0] >> 16).tolist() == [upper] * n, f"bits 31:16 of a 16-bit result should be 0x{upper:04x}"
    check_f16(rec[:, 0] & 0xFFFF, want16, "v_cvt_f16_f32", xbits)

    # 1, 2: f16 -> f32 of each half (exact; NaNs quiet)
    for plane, half in ((1, h & 0xFFFF), (2, h >> 16)):
        want = half.astype(np.uint16).view(np.float16).astype(np.float32)
        check_f32(rec[:, plane], want, f"v_cvt_f32_f16 (bits {'15:0' if plane == 1 else '31:16'})",
                  lambda i, half=half: f"h=0x{half[i]:04x}")

    fma = np.array([fma_ref(*t) for t in zip(x, y, z, strict=True)], np.float32)
    mul = np.array([mul_ref(a, b) for a, b in zip(x, y, strict=True)], np.float32)
    add = np.array([add_ref(a, b) for a, b in zip(x, y, strict=True)], np.float32)
    mul_add = np.array([add_ref(m, c) for m, c in zip(mul, z, strict=True)], np.float32)
    check_f32(rec[:, 3], fma, "v_fma_f32", xyz)
    check_f32(rec[:, 4], fma, "v_fmac_f32", xyz)
    check_f32(rec[:, 5], mul, "v_mul_f32", xyz)
    check_f32(rec[:, 6], add, "v_add_f32", xyz)
    check_f32(rec[:, 7], mul_add, "v_add_f32(v_mul_f32)", xyz)
    # the fused and unfused results really differ on some inputs (the test would be blind otherwise)
    assert (fma.view(np.uint32) != mul_add.view(np.uint32))[np.isfinite(fma)].sum() >= 10


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_rounding_fp16_overflow_mode(arch):
    """MODE.FP16_OVFL = 1 from the kernel descriptor: finite f16 overflow clamps to +-65504."""
    rng = np.random.default_rng(8)
    special = with_bits([65504.0, 65519.0, 65520.0, 65536.0, 1e5, -1e5, 3.4e38, -3.4e38, INF, -INF, 1.0, -2.5,
                         2 ** -25, 3 * 2 ** -25, -1e-40], F16_NAN_INPUTS)
    m = 64 - len(special)
    x = np.concatenate([special, (rng.standard_normal(m) * 2.0 ** rng.integers(-30, 20, m)).astype(np.float32)])
    n = len(x)
    dev = device(arch)
    module, code = load_test_kernel(dev, "rounding")
    assert descriptor_of(code.kernel("rounding_ovfl"), arch).fp16_overflow, "the kernel descriptor sets FP16_OVFL"
    xd, out = to_device(dev, x), to_device(dev, np.full(n, SENTINEL, np.uint32))
    launch(dev, module, "rounding_ovfl", 1, block_of(n), [xd, out])
    got = from_device(dev, out, n, np.uint32)
    assert (got >> 16).tolist() == [0] * n
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.where(np.isfinite(x), np.clip(x, -65504.0, 65504.0), x).astype(np.float16)
    xb = bits_of_f32(x)
    check_f16(got & 0xFFFF, want, "v_cvt_f16_f32 with FP16_OVFL", lambda i: f"x=0x{xb[i]:08x} ({x[i]!r})")


# --- fp8 conversions ---------------------------------------------------------------------------

def run_fp8cvt(arch: str, x: np.ndarray, y: np.ndarray, q: np.ndarray) -> np.ndarray:
    n = len(x)
    dev = device(arch)
    module, _ = load_test_kernel(dev, "fp8cvt")
    ins = [to_device(dev, a) for a in (x.astype(np.float32), y.astype(np.float32), q.astype(np.uint32))]
    out = to_device(dev, np.full((n, 16), SENTINEL, np.uint32))
    launch(dev, module, "fp8cvt", 1, block_of(n), [*ins, out])
    return from_device(dev, out, (n, 16), np.uint32)


@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_fp8_decode_every_byte(arch):
    e4m3, e5m2 = F8_TYPES[arch]
    codes = np.arange(256, dtype=np.uint8)
    q = codes.view("<u4")                        # work-item i holds bytes 4i .. 4i + 3
    n = len(q)
    zeros = np.zeros(n, np.float32)
    rec = run_fp8cvt(arch, zeros, zeros, q)
    byte = codes.reshape(n, 4)

    def src(b: int) -> Callable[[int], str]:
        return lambda i: f"byte 0x{byte[i, b]:02x}"

    for b in range(4):
        check_f32(rec[:, b], f8_decode(byte[:, b], e4m3), f"v_cvt_pk_f32_fp8 word {b // 2} byte {b % 2}", src(b))
        check_f32(rec[:, 4 + b], f8_decode(byte[:, b], e5m2), f"v_cvt_pk_f32_bf8 word {b // 2} byte {b % 2}", src(b))
        check_f32(rec[:, 8 + b], f8_decode(byte[:, b], e4m3), f"v_cvt_f32_fp8 byte {b}", src(b))
    if arch == "gfx950":
        # v_cvt_scalef32_pk_f32_fp8 of word 1 with scale -0.75: only the exponent field (126) counts: x 2^-1
        for b in (2, 3):
            want = f8_decode(byte[:, b], e4m3) * np.float32(0.5)
            check_f32(rec[:, 12 + b], want, f"v_cvt_scalef32_pk_f32_fp8 byte {b}", src(b))
    else:
        assert (rec[:, 14:] == SENTINEL).all()


def fp8_encode_inputs(arch: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    e4m3, e5m2 = F8_TYPES[arch]
    hand = [v for fmt in (e4m3, e5m2) for v, _ in F8_HAND[fmt]]
    special = with_bits(hand + [1e-30, -1e-30, 3.4e38], [0x7FC00000, 0xFFC00000, 0x7FA00001, 0xFF812345])
    m = 128 - len(special)
    x = np.concatenate([special, (rng.standard_normal(m) * 2.0 ** rng.integers(-20, 18, m)).astype(np.float32)])
    return x, rng.permutation(x)


@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_fp8_encode(arch):
    e4m3, e5m2 = F8_TYPES[arch]
    x, y = fp8_encode_inputs(arch, np.random.default_rng(9))
    n = len(x)
    rec = run_fp8cvt(arch, x, y, np.zeros(n, np.uint32))
    xb, yb = bits_of_f32(x), bits_of_f32(y)

    def show(v: np.ndarray, vb: np.ndarray) -> Callable[[int], str]:
        return lambda i: f"0x{vb[i]:08x} ({v[i]!r})"

    lo, hi = rec[:, 12], rec[:, 13]
    # the half that is not written keeps the destination's old bits
    assert ((lo >> 16) == 0x5A5A).all(), "v_cvt_pk_fp8_f32 (word 0) must keep bits 31:16"
    assert ((hi & 0xFFFF) == 0x5A5A).all(), "v_cvt_pk_bf8_f32 op_sel:[0,0,1] must keep bits 15:0"
    check_f8(lo & 0xFF, f8_encode(x, e4m3), e4m3, "v_cvt_pk_fp8_f32 S0 -> byte 0", show(x, xb))
    check_f8((lo >> 8) & 0xFF, f8_encode(y, e4m3), e4m3, "v_cvt_pk_fp8_f32 S1 -> byte 1", show(y, yb))
    check_f8((hi >> 16) & 0xFF, f8_encode(x, e5m2), e5m2, "v_cvt_pk_bf8_f32 S0 -> byte 2", show(x, xb))
    check_f8(hi >> 24, f8_encode(y, e5m2), e5m2, "v_cvt_pk_bf8_f32 S1 -> byte 3", show(y, yb))


@pytest.mark.parametrize("arch", FP8_ARCHS)
def test_fp8_encode_saturating_mode(arch):
    """MODE.FP16_OVFL = 1 (kernel descriptor): finite values past the maximum give +-max."""
    e4m3, e5m2 = F8_TYPES[arch]
    rng = np.random.default_rng(10)
    special = with_bits([240.0, 247.99, 248.0, 256.0, 448.0, 464.0, 465.0, 480.0, 57344.0, 61439.0, 61440.0,
                         1e9, 3.4e38, -248.0, -480.0, -61440.0, -1e9, -3.4e38, 1.0, -0.0, 2 ** -10],
                        [0x7FC00000, 0xFFA00001])
    m = 64 - len(special)
    x = np.concatenate([special, (rng.standard_normal(m) * 2.0 ** rng.integers(-12, 20, m)).astype(np.float32)])
    y = rng.permutation(x)
    n = len(x)
    dev = device(arch)
    module, code = load_test_kernel(dev, "fp8cvt")
    assert descriptor_of(code.kernel("fp8cvt_sat"), arch).fp16_overflow, "the kernel descriptor sets FP16_OVFL"
    xd, yd = to_device(dev, x), to_device(dev, y)
    out = to_device(dev, np.full(n, SENTINEL, np.uint32))
    launch(dev, module, "fp8cvt_sat", 1, block_of(n), [xd, yd, out])
    got = from_device(dev, out, n, np.uint32)
    xb, yb = bits_of_f32(x), bits_of_f32(y)

    def show(v: np.ndarray, vb: np.ndarray) -> Callable[[int], str]:
        return lambda i: f"0x{vb[i]:08x} ({v[i]!r})"

    check_f8(got & 0xFF, f8_encode(x, e4m3, saturate=True), e4m3, "v_cvt_pk_fp8_f32 FP16_OVFL S0", show(x, xb))
    check_f8((got >> 8) & 0xFF, f8_encode(y, e4m3, saturate=True), e4m3, "v_cvt_pk_fp8_f32 FP16_OVFL S1",
             show(y, yb))
    check_f8((got >> 16) & 0xFF, f8_encode(x, e5m2, saturate=True), e5m2, "v_cvt_pk_bf8_f32 FP16_OVFL S0",
             show(x, xb))
    check_f8(got >> 24, f8_encode(y, e5m2, saturate=True), e5m2, "v_cvt_pk_bf8_f32 FP16_OVFL S1", show(y, yb))


# --- MFMA / WMMA -------------------------------------------------------------------------------

Layout = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _mfma16(kpl: int) -> tuple[Layout, Layout]:
    # A[l mod 16][kpl floor(l/16) + e] (B mirrored); D[4 floor(l/16) + r][l mod 16]
    return ((lambda lane, e: (lane % 16 + 0 * e, kpl * (lane // 16) + e)),
            (lambda lane, r: (4 * (lane // 16) + r, lane % 16 + 0 * r)))


def _wmma11() -> tuple[Layout, Layout]:
    # A[l mod 16][e], replicated in both lane halves; D[2r + floor(l/16)][l mod 16]
    return ((lambda lane, e: (lane % 16 + 0 * e, e + 0 * lane)),
            (lambda lane, r: (2 * r + lane // 16, lane % 16 + 0 * r)))


def _wmma12() -> tuple[Layout, Layout]:
    # A[l mod 16][8 floor(e/4) + 4 floor(l/16) + e mod 4]; D[8 floor(l/16) + r][l mod 16]
    return ((lambda lane, e: (lane % 16 + 0 * e, 8 * (e // 4) + 4 * (lane // 16) + e % 4)),
            (lambda lane, r: (8 * (lane // 16) + r, lane % 16 + 0 * r)))


# arch -> (K, A/B elements per lane, D elements per lane, (A/B layout, D layout), mnemonics)
MATRIX = {
    "gfx942": (16, 4, 4, _mfma16(4), ("v_mfma_f32_16x16x16_f16", "v_mfma_f32_16x16x16_bf16")),
    "gfx950": (32, 8, 4, _mfma16(8), ("v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_bf16")),
    "gfx1100": (16, 16, 8, _wmma11(), ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16")),
    "gfx1151": (16, 16, 8, _wmma11(), ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16")),
    "gfx1201": (16, 8, 8, _wmma12(), ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16")),
}
IN_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def run_matrix(arch: str, kind: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A @ B + C through matrix_<kind> on `arch`: A (16 x K), B (K x 16) of `kind`, C f32."""
    w = ARCHS[arch].wave_size
    k, n_ab, n_d, (ab_layout, d_layout), _ = MATRIX[arch]
    assert a.shape == (16, k) and b.shape == (k, 16) and c.shape == (16, 16)
    lanes = np.arange(w)[:, None]
    rc, kk = ab_layout(lanes, np.arange(n_ab)[None, :])
    di, dj = d_layout(lanes, np.arange(n_d)[None, :])
    # every A (and B) element is held somewhere, every D element exactly once
    assert len(set(zip(rc.ravel().tolist(), kk.ravel().tolist(), strict=True))) == 16 * k
    d_slots = sorted(zip(di.ravel().tolist(), dj.ravel().tolist(), strict=True))
    assert d_slots == [(i, j) for i in range(16) for j in range(16)]
    dt = IN_TYPES[kind]
    a_lanes = np.ascontiguousarray(a.astype(dt)[rc, kk])      # (w, n_ab): lane l's elements in order
    b_lanes = np.ascontiguousarray(b.astype(dt)[kk, rc])
    c_lanes = np.ascontiguousarray(c.astype(np.float32)[di, dj])

    dev = device(arch)
    module, _ = load_test_kernel(dev, "matrix")
    ad, bd = to_device(dev, a_lanes.view(np.uint16)), to_device(dev, b_lanes.view(np.uint16))
    cd = to_device(dev, c_lanes)
    dd = to_device(dev, np.full((w, n_d), np.nan, np.float32))
    launch(dev, module, f"matrix_{kind}", 1, w, [ad, bd, cd, dd])
    d_lanes = from_device(dev, dd, (w, n_d), np.float32)
    d = np.full((16, 16), np.nan, np.float32)
    d[di, dj] = d_lanes
    return d


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_matrix_exact_integers(arch, kind):
    """Small integers: every product and partial sum is exact, so D must equal A @ B + C exactly."""
    k = MATRIX[arch][0]
    rng = np.random.default_rng(11)
    a = rng.integers(-4, 5, (16, k)).astype(np.float64)
    b = rng.integers(-4, 5, (k, 16)).astype(np.float64)
    c = rng.integers(-64, 65, (16, 16)).astype(np.float64)
    d = run_matrix(arch, kind, a, b, c)
    want = (a @ b + c).astype(np.float32)
    np.testing.assert_array_equal(d, want, err_msg=f"{MATRIX[arch][4][kind == 'bf16']} on {arch}")


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_matrix_general_values(arch, kind):
    """Normal data: within an f32 accumulation bound of numpy's A @ B + C (products exact)."""
    k = MATRIX[arch][0]
    rng = np.random.default_rng(12)
    dt = IN_TYPES[kind]
    a = rng.standard_normal((16, k)).astype(dt).astype(np.float64)     # the values the instruction sees
    b = rng.standard_normal((k, 16)).astype(dt).astype(np.float64)
    c = rng.standard_normal((16, 16)).astype(np.float32).astype(np.float64)
    d = run_matrix(arch, kind, a, b, c)
    want = a @ b + c
    # k + 1 f32 roundings in some order, each at most 2^-24 relative to the sums' magnitude
    bound = 2 * (k + 1) * 2.0 ** -24 * (np.abs(a) @ np.abs(b) + np.abs(c))
    err = np.abs(d - want)
    assert (err <= bound).all(), (f"{MATRIX[arch][4][kind == 'bf16']} on {arch}: max error {err.max():.3g} "
                                  f"(bound {bound[np.unravel_index(err.argmax(), err.shape)]:.3g}) at "
                                  f"{np.unravel_index(err.argmax(), err.shape)}")
