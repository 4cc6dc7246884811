"""hipskinny.bnb: bitsandbytes' NF4/FP4 weight format, held against the spec's tables
(/work/shared/reference/quant_specs.md section 1), float64 nearest-codebook oracles of their own, and
bitsandbytes itself when it is installed (its CPU backend: the 4-bit decisions, statistics and
tables are its, but for the sign of FP4's zero, which follows its CUDA kernel)."""

from __future__ import annotations

import fractions
import functools
import inspect
import json
import platform
import subprocess
import sys
import types
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

from hipskinny import InputTypeError, InputValueError
from hipskinny.formats import bnb

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.float32, np.float16, BF16]
TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16, BF16: torch.bfloat16}

# quant_specs.md 1.1 and 1.2, typed in again here (not imported from the module under test)
SPEC_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
            -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
            0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
            0.7229568362236023, 1.0]
SPEC_FP4 = [0.0, 0.0052083335, 0.6666667, 1.0, 0.33333334, 0.5, 0.16666667, 0.25,
            -0.0, -0.0052083335, -0.6666667, -1.0, -0.33333334, -0.5, -0.16666667, -0.25]
SPEC_NF4_THRESHOLDS = [0.8614784181118011, 0.6427869200706482, 0.5016634166240692, 0.3893125355243683,
                       0.2920137718319893, 0.2035212516784668, 0.1202552504837513, 0.03979014977812767,
                       -0.045525018125772476, -0.13791173323988914, -0.23460740596055984, -0.33967943489551544,
                       -0.4599952697753906, -0.6106329262256622, -0.8480964004993439]      # descending
SPEC_FP4_THRESHOLDS = [(0.8333333, 3), (0.583333, 2), (0.4166667, 5), (0.29166667, 4), (0.20833333, 7),
                       (0.0859375, 6), (0.00260417, 1)]                                        # (|x| > t, code)

NF4_64 = np.float32(SPEC_NF4).astype(np.float64)
FP4_MAG_64 = np.float32(SPEC_FP4[:8]).astype(np.float64)          # magnitudes of codes 0..7
FP4_ORDER = np.argsort(FP4_MAG_64)                                 # codes by increasing magnitude
NF4_CONST = np.float32(SPEC_NF4_THRESHOLDS[::-1]).astype(np.float64)
FP4_CONST = np.float32([t for t, _ in SPEC_FP4_THRESHOLDS[::-1]]).astype(np.float64)      # the CUDA literals
# bitsandbytes' CPU decision points: the float32 midpoints (a + b) / 2 of the sorted magnitudes
FP4_MID32 = (lambda s: ((s[:-1] + s[1:]) / np.float32(2)).astype(np.float64))(np.sort(np.float32(SPEC_FP4[:8])))
MAP_64 = bnb.DYNAMIC_MAP.astype(np.float64)


def _f32_of_decimal(text):
    """float32 of a decimal literal rounded once (to nearest, a tie to even), as a compiler rounds
    ``0.5016634166240692f``; numpy's float32(float(text)) rounds twice, via float64."""
    q = fractions.Fraction(text)
    f = np.float32(float(q))
    near = [np.nextafter(f, np.float32(-2)), f, np.nextafter(f, np.float32(2))]
    return min(near, key=lambda c: (abs(fractions.Fraction(float(c)) - q), int(c.view(np.uint32)) & 1))


# the CUDA kernel's NF4 comparison constants (the spec's decimals as float literals), ascending
CUDA_NF4_64 = np.float64([_f32_of_decimal(repr(t)) for t in SPEC_NF4_THRESHOLDS[::-1]])
MAP_MID32 = ((bnb.DYNAMIC_MAP[:-1] + bnb.DYNAMIC_MAP[1:]) * np.float32(0.5)).astype(np.float64)

# Tolerance ingredients, all derived:
# - x = w * fp32(1/absmax) is two float32 roundings of w/absmax (|x| <= 1): |x - w/absmax| <= 2**-23;
# - a code is the nearest entry but for the decision points being float32 midpoints instead of the
#   exact ones: that moves a boundary by at most DELTA[quant_type];
# - the largest gap between neighbouring entries bounds the distance to the nearest one by GAP/2.
X_ROUND = 2.0**-23
DELTA = {"nf4": np.abs(NF4_CONST - (NF4_64[:-1] + NF4_64[1:]) / 2).max(),
         "fp4": np.abs(FP4_MID32 - (lambda s: (s[:-1] + s[1:]) / 2)(np.sort(FP4_MAG_64))).max()}
GAP = {"nf4": np.diff(NF4_64).max(), "fp4": np.diff(np.sort(np.float32(SPEC_FP4).astype(np.float64))).max()}
MAP_GAP = np.diff(MAP_64).max()
OUT_ROUND = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11, BF16: 2.0**-8}   # relative, RNE
OUT_ABS = {np.dtype(np.float32): 2.0**-150, np.dtype(np.float16): 2.0**-25, BF16: 2.0**-134}   # half a subnormal


# ----------------------------------------------------------------------------------------------
# oracles


def _blocks(w32, bs):
    """(x, absmax): the spec's scaled values x = w * fp32(1/absmax) per block (0 for an all-zero block)."""
    n = w32.size
    nb = -(-n // bs)
    pad = np.zeros(nb * bs, np.float32)
    pad[:n] = w32.reshape(-1)
    b = pad.reshape(nb, bs)
    am = np.abs(b).max(axis=1)
    recip = np.array([np.float32(1) / a if a > 0 else np.float32(0) for a in am], np.float32)
    return (b * recip[:, None]).reshape(-1)[:n], am


def _kernel_nearest(x, table, consts, tie):
    """Index of the entry of sorted float64 ``table`` nearest to float32 ``x`` (computed in float64, an
    exact tie going to the lower entry), except where ``x`` lies between an exact midpoint and the
    float32 decision point for it: there the decision point decides (above: upper, below: lower,
    equal: ``tie(i)``)."""
    x = np.asarray(x, np.float64)
    idx = np.abs(x[:, None] - table[None, :]).argmin(axis=1)      # argmin: first (lower) of a tie
    mids = (table[:-1] + table[1:]) / 2
    for i, (m, k) in enumerate(zip(mids, consts, strict=True)):
        d = (x >= min(m, k)) & (x <= max(m, k))
        idx[d] = np.where(x[d] > k, i + 1, np.where(x[d] < k, i, tie(i)))
    return idx


def _oracle_codes(x, quant_type):
    """Decided at the float32 midpoints, a value on one going to the lower entry: for FP4 the smaller
    magnitude if ``x > 0``, the larger if ``x < 0``; FP4's sign bit is ``x < 0``."""
    if quant_type == "nf4":
        return _kernel_nearest(x, NF4_64, NF4_CONST, lambda i: i).astype(np.uint8)
    x = np.asarray(x)
    mags = FP4_MAG_64[FP4_ORDER]
    up = _kernel_nearest(np.abs(x), mags, FP4_MID32, lambda i: i)
    down = _kernel_nearest(np.abs(x), mags, FP4_MID32, lambda i: i + 1)
    mag = FP4_ORDER[np.where(x < 0, down, up)]
    return (mag | np.where(x < 0, 8, 0)).astype(np.uint8)


def _oracle_dynamic(x):
    """bitsandbytes' CPU library: float32 ``x`` clamped to [-1, 1] lands on grid point
    i = trunc(fma((x + 1) * 0.5, 65535, 0.5)) (float32 steps, the fma rounded once: float64 holds it
    exactly), i.e. the float32 value g = 2i/65535 - 1, which takes the entry nearest to it judged at the
    float32 midpoints (a+b)*0.5, a value on a midpoint going to the lower entry."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):
        t = (np.clip(x, -1, 1) + np.float32(1)) * np.float32(0.5)
        u = (t.astype(np.float64) * 65535 + 0.5).astype(np.float32)
    i = np.where(np.isnan(u), 0, np.trunc(np.nan_to_num(u))).astype(np.int64)     # NaN: index 0
    g = np.float32(2) * i.astype(np.float32) / np.float32(65535) - np.float32(1)
    return _kernel_nearest(g, MAP_64, MAP_MID32, lambda i: i).astype(np.uint8)


def _codes(packed, n):
    """Codes from packed bytes, high nibble first."""
    b = np.asarray(packed).reshape(-1)
    return np.stack([b >> 4, b & 15], axis=1).reshape(-1)[:n]


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape[:-1] + (1,)))   # rows of varied scale
    return a.astype(dtype)


def _put_points(w, pts, bs):
    """Write ``pts`` (within [-1, 1]) into the first blocks of ``w``, each block led by 1.0: absmax 1, x = w."""
    flat = w.reshape(-1)
    per = bs - 1
    for b in range(-(-pts.size // per)):
        part = pts[b * per: (b + 1) * per]
        flat[b * bs] = 1.0
        flat[b * bs + 1: b * bs + 1 + part.size] = part
        flat[b * bs + 1 + part.size: (b + 1) * bs] = 0


def _decision_points(quant_type):
    """A block (absmax 1, so x = w exactly) of every entry, every decision point, CUDA literal and exact
    midpoint (float32-rounded), and their float32 neighbours, with both signs."""
    table = NF4_64 if quant_type == "nf4" else FP4_MAG_64
    consts = [NF4_CONST, CUDA_NF4_64] if quant_type == "nf4" else [FP4_CONST, FP4_MID32]
    mids = (np.sort(table)[:-1] + np.sort(table)[1:]) / 2
    pts = np.float32(np.concatenate([table, *consts, mids]))
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(2)), np.nextafter(pts, np.float32(-2))])
    pts = np.concatenate([[1.0], pts, -pts]).astype(np.float32)
    return np.clip(pts, -1, 1)


# ----------------------------------------------------------------------------------------------
# tables


def test_codebooks_are_the_spec_tables():
    assert bnb.NF4.dtype == bnb.FP4.dtype == np.float32 and bnb.NF4.shape == bnb.FP4.shape == (16,)
    assert np.array_equal(bnb.NF4, np.float32(SPEC_NF4))
    assert np.array_equal(bnb.FP4, np.float32(SPEC_FP4))
    # code 8 is +0.0 as in bitsandbytes' table (get_4bit_type's int -0); the spec's -0.0 equals it
    assert np.signbit(bnb.FP4).tolist() == [False] * 9 + [True] * 7
    # NF4: 7 negatives, 0 at code 7, 8 positives, sorted; FP4: sign bit 3 over magnitudes {...}/12
    assert (np.diff(bnb.NF4) > 0).all() and bnb.NF4[7] == 0 and (bnb.NF4[:7] < 0).all()
    mags = np.float32([0, 0.0625, 8, 12, 4, 6, 2, 3]) / np.float32(12)
    assert np.array_equal(bnb.FP4[:8], mags) and np.array_equal(bnb.FP4[8:], -mags)
    assert np.array_equal(bnb.FP4.view(np.uint32)[9:], (-mags).view(np.uint32)[1:])
    assert not bnb.NF4.flags.writeable and not bnb.FP4.flags.writeable


def test_thresholds_are_the_float32_midpoints():
    """The decision points are bitsandbytes' CPU ones, the float32 (a+b)/2 of neighbouring entries; the
    CUDA kernel's literals (the spec's) round to them but at four NF4 and five FP4 thresholds."""
    assert np.array_equal(bnb.NF4_THRESHOLDS, (bnb.NF4[:-1] + bnb.NF4[1:]) / np.float32(2))
    assert np.array_equal(bnb.NF4_THRESHOLDS, NF4_CONST)        # the spec's decimals, via float64 to float32
    s32 = np.sort(bnb.FP4[:8])
    assert np.array_equal(bnb.FP4_THRESHOLDS, (s32[:-1] + s32[1:]) / np.float32(2))
    assert np.array_equal(bnb.FP4_THRESHOLDS, FP4_MID32)
    # the CUDA literals: FP4's within 3.6e-7 of the midpoints of the sorted magnitudes, in the spec's order
    assert np.array_equal(bnb._CUDA_FP4_LITERALS, FP4_CONST)
    s = np.sort(FP4_MAG_64)
    assert np.abs(FP4_CONST - (s[:-1] + s[1:]) / 2).max() < 3.6e-7
    assert (FP4_CONST != FP4_MID32).sum() == 5
    assert [c for _, c in SPEC_FP4_THRESHOLDS[::-1]] == FP4_ORDER[1:].tolist()
    # NF4's decimal literals rounded once (as a compiler does) are one ulp off at the four exact ties
    off = CUDA_NF4_64 != NF4_CONST
    assert off.sum() == 4 and np.array_equal(np.flatnonzero(off), [0, 8, 12, 14])
    ulps = np.abs(np.float32(CUDA_NF4_64).view(np.int32) - np.float32(NF4_CONST).view(np.int32))
    assert ulps.max() == 1


def test_dynamic_map_facts():
    m = bnb.DYNAMIC_MAP
    assert m.dtype == np.float32 and m.shape == (256,) and not m.flags.writeable
    assert (np.diff(m) > 0).all()                                      # sorted, 256 distinct values
    assert m[0] == np.float32(-0.99296874) and m[-1] == 1.0 and m[127] == 0.0
    tiny = np.abs(m[m != 0]).min()              # i = 0: 1e-6 * (0.1 + 1) / 2, float32 arithmetic
    assert tiny == np.float32(1e-6) * ((np.float32(0.1) + np.float32(1)) / np.float32(2))
    assert abs(tiny - 5.5e-7) <= np.spacing(np.float32(5.5e-7))       # the spec's "5.5e-07", 1 ulp above it
    assert np.array_equal(m[:127], -m[128:255][::-1])                  # symmetric but for 1.0
    # 2**i values per decade 10**(i-6), i = 0..6, each side of 0
    pos = m[128:255].astype(np.float64)
    counts = [int(((pos >= 0.1 * 10.0 ** (i - 6)) & (pos < 10.0 ** (i - 6))).sum()) for i in range(7)]
    assert counts == [1, 2, 4, 8, 16, 32, 64]


def test_dynamic_map_is_built_as_bitsandbytes_builds_it():
    """bitsandbytes builds it with torch: float32 linspace, midpoints, a float32 scalar multiply."""
    data = [0.0, 1.0]
    for i in range(7):
        b = torch.linspace(0.1, 1, 2**i + 1, dtype=torch.float32)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (i - 6)) * means).tolist() + (-(10 ** (i - 6)) * means).tolist()
    assert np.array_equal(bnb.DYNAMIC_MAP, np.sort(np.float32(data)))


# ----------------------------------------------------------------------------------------------
# quantize: codes, packing, absmax


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
@pytest.mark.parametrize("blocksize", [32, 64, 128, 4096])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_codes_match_the_nearest_codebook_oracle(quant_type, blocksize, dtype):
    shapes = [(37, 129), (3, 3001), (2, 4096)]          # odd numel with partial blocks; whole blocks
    for seed, shape in enumerate(shapes):
        w = _data(shape, dtype, seed)
        if np.dtype(dtype) == np.float32:               # plus blocks of ties and decision points
            _put_points(w, _decision_points(quant_type), blocksize)
        packed, st = bnb.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=False)
        n = w.size
        assert packed.dtype == np.uint8 and packed.shape == ((n + 1) // 2, 1)
        x, am = _blocks(w.astype(np.float32), blocksize)
        assert st.absmax.dtype == np.float32 and np.array_equal(st.absmax, am)
        assert np.array_equal(_codes(packed, n), _oracle_codes(x, quant_type)), (shape, seed)
        if n % 2:                                        # the pad nibble is the code of 0.0
            assert packed[-1, 0] & 15 == {"nf4": 7, "fp4": 0}[quant_type]
        assert st.shape == shape and st.dtype == np.dtype(dtype) and st.blocksize == blocksize
        assert st.quant_type == quant_type and np.array_equal(st.code, bnb.NF4 if quant_type == "nf4" else bnb.FP4)
        assert st.state2 is None and st.offset is None and not st.nested


def test_hand_computed_bytes():
    def q(values, quant_type, **kw):
        packed, st = bnb.quantize_4bit(np.float32(values), quant_type=quant_type, compress_statistics=False, **kw)
        return packed.reshape(-1).tolist()

    nf4 = bnb.NF4.tolist()
    assert q([nf4[3], nf4[10], 1.0, -1.0], "nf4") == [0x3A, 0xF0]      # codes 0x3, 0xA -> 0x3A
    assert q([1.0, -1.0, 0.5], "nf4") == [0xF0, 0xC7]                  # 0.5 < 0.50166 -> 0xC; pad 7
    assert q([1.0, -1.0, 0.5], "fp4") == [0x3B, 0x50]                  # 0.5 is code 5; pad 0
    assert q([1.0, -0.001], "fp4") == [0x38]                           # negative rounding to 0: 0b1000
    assert q([1.0, -0.0], "fp4") == [0x30] and q([1.0, -0.0], "nf4") == [0xF7]
    half = np.float32(0.0052083335) / np.float32(2)                  # the exact midpoint, below 0.00260417f
    assert q([1.0, half], "fp4") == [0x30]
    assert q([1.0, np.nextafter(np.float32(0.00260417), np.float32(1))], "fp4") == [0x31]
    assert q([1.0, bnb.NF4[8] / 2], "nf4") == [0xF7]                   # a representable midpoint: tie goes low
    assert q([1.0, np.nextafter(bnb.NF4[8] / 2, np.float32(1))], "nf4") == [0xF8]
    assert q([1.0, 0.583333], "fp4") == [0x35]                         # the CUDA literal: still nearer 0.5
    assert q([1.0, np.nextafter(np.float32(0.583333), np.float32(1))], "fp4") == [0x35]    # (the kernel: 2/3)
    mid = (np.float32(0.5) + np.float32(2 / 3)) / np.float32(2)        # 0.58333337, the float32 midpoint
    assert q([1.0, mid], "fp4") == [0x35] and q([1.0, np.nextafter(mid, np.float32(1))], "fp4") == [0x32]
    assert q([1.0, -mid], "fp4") == [0x3A]                             # a negative tie: the larger magnitude
    assert q([1.0, -0.0859375], "fp4") == [0x3E] and q([1.0, 0.0859375], "fp4") == [0x31]
    assert q([4.0, 2.0], "nf4") == [0xFC]                              # scaled 0.5 < 0.50166: code 12
    assert q([-3.0, 1.5], "nf4") == [0x0C]                             # the negative absmax element: -1.0
    # blocks straddle rows: a [3, 3] weight with blocksize 32 is one block
    assert q([[1, 0, 0], [0, 0, 0], [0, 0, -1]], "nf4") == [0xF7, 0x77, 0x77, 0x77, 0x07]


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
def test_all_zero_block(quant_type):
    """Rule: an all-zero block codes every element as 0.0 (NF4 7, FP4 0) and dequantizes to +0.0."""
    w = np.zeros((3, 64), np.float32)
    w[1] = _data((64,), np.float32, 1)
    for nested in (False, True):
        packed, st = bnb.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=nested)
        zero = {"nf4": 0x77, "fp4": 0x00}[quant_type]
        assert (packed[:32] == zero).all() and (packed[64:] == zero).all()
        out = bnb.dequantize_4bit(packed, st)
        assert (out[0] == 0).all() and (out[2] == 0).all()
        if not nested:      # nested, the reconstructed absmax of a zero block is only near 0 (maybe < 0: -0.0)
            assert st.absmax[0] == st.absmax[2] == 0 and not np.signbit(out[[0, 2]]).any()
    # the whole weight zero, nested: r is 0 everywhere, an all-zero block of r is code 0 as bitsandbytes
    # stores it, and code2[0] * 0 + offset is exactly offset = 0
    packed, st = bnb.quantize_4bit(np.zeros(100, np.float16), quant_type=quant_type, compress_statistics=True)
    assert (st.absmax == 0).all() and st.offset == 0 and (st.state2.absmax == 0).all()
    assert (bnb.dequantize_4bit(packed, st) == 0).all()


def test_tiny_absmax_is_divided():
    """A block whose 1/absmax overflows float32 (absmax < 1/FLT_MAX) is scaled by a division."""
    vals = np.float32([2.0**-140, -(2.0**-141), 2.0**-142, 0.0])
    packed, st = bnb.quantize_4bit(vals, quant_type="nf4", compress_statistics=False)
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(1) / vals[0])
    assert _codes(packed, 4).tolist() == [15, 2, 10, 7]      # x = 1, -0.5, 0.25, 0 (scaled by division)
    assert np.array_equal(bnb.dequantize_4bit(packed, st), st.absmax[0] * bnb.NF4[[15, 2, 10, 7]])


def test_scalar_weight():
    packed, st = bnb.quantize_4bit(np.float32(-2.5), quant_type="fp4", compress_statistics=True)
    assert packed.tolist() == [[0xB0]] and st.shape == ()
    out = bnb.dequantize_4bit(packed, st)
    assert out.shape == () and out == -2.5


# ----------------------------------------------------------------------------------------------
# nested (double) quantization


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
def test_nested_codes_match_the_oracle(quant_type):
    w = _data((601, 64), np.float32, 5)                   # 1202 blocks of 32: 5 nested blocks, one partial
    packed, st = bnb.quantize_4bit(w, blocksize=32, quant_type=quant_type, compress_statistics=True)
    plain, st0 = bnb.quantize_4bit(w, blocksize=32, quant_type=quant_type, compress_statistics=False)
    assert np.array_equal(packed, plain)                  # the 4-bit codes use the exact absmax
    am = st0.absmax
    assert st.nested and st.absmax.dtype == np.uint8 and st.absmax.shape == (1202,)
    # the offset is torch's float32 mean (bitsandbytes' absmax.mean()), near the exact mean: a float32
    # sum of n non-negative terms is within (n - 1) * 2**-24 relative, then one rounding
    offset = np.float32(torch.from_numpy(am).mean().item())
    assert st.offset.dtype == np.float32 and st.offset.shape == () and st.offset == offset
    exact = am.astype(np.float64).mean()
    assert abs(float(offset) - exact) <= 1202 * 2.0**-24 * exact
    r = am - offset
    x, am2 = _blocks(r, 256)
    s2 = st.state2
    assert s2.absmax.dtype == np.float32 and np.array_equal(s2.absmax, am2) and s2.absmax.shape == (5,)
    assert s2.blocksize == 256 and s2.dtype == np.float32 and s2.shape == (1202,) and s2.state2 is None
    assert np.array_equal(s2.code, bnb.DYNAMIC_MAP)
    assert np.array_equal(st.absmax, _oracle_dynamic(x))
    # reconstruction: float32 multiply then float32 add, within the derived bound of the true absmax
    rec = bnb.absmax_fp32(st)
    assert rec.dtype == np.float32
    assert np.array_equal(rec, bnb.DYNAMIC_MAP[st.absmax] * np.repeat(am2, 256)[:1202] + offset)
    # |code - x| <= MAP_GAP/2 + float32 midpoint rounding (2**-24) + the grid's half step 1/65535 and
    # its roundings (4 * 2**-24) + x's rounding; two final roundings
    bound = (np.repeat(am2, 256)[:1202] * (MAP_GAP / 2 + 1 / 65535 + 5 * 2.0**-24 + X_ROUND)
             + 2.0**-23 * (am + am2.max()))
    assert (np.abs(rec.astype(np.float64) - am) <= bound).all()


def test_nested_codes_follow_the_cpu_table():
    """The nested 8-bit codes are bitsandbytes' CPU library's: a 65536-point grid over [-1, 1], each
    point coded by its nearest entry, so entries closer together than the grid step are not all used."""
    m = bnb.DYNAMIC_MAP
    grid = np.float32(2) * np.arange(65536, dtype=np.float32) / np.float32(65535) - np.float32(1)
    assert np.array_equal(bnb._dynamic_codes(grid), _oracle_dynamic(grid))
    assert np.array_equal(bnb._dynamic_codes(m), _oracle_dynamic(m))
    assert (np.diff(bnb._dynamic_codes(grid).astype(int)) >= 0).all()           # monotone
    assert bnb._dynamic_codes(np.float32([-1.5, -1.0, 1.0, 2.0, np.nan])).tolist() == [0, 0, 255, 255, 0]
    used = np.unique(bnb._dynamic_codes(grid))
    assert 0 in used and 255 in used and used.size < 256
    # no grid point is 0: 0.0 itself (code 127) is never used, x = 0 lands on point 32768, 2**-16 in float32
    assert 127 not in used
    assert bnb._dynamic_codes(np.float32([0.0]))[0] == np.abs(MAP_64 - 2.0**-16).argmin()
    mid = (m[:-1] + m[1:]) * np.float32(0.5)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1, 1, 4000), rng.standard_normal(4000) * 1e-4, mid,
                        np.nextafter(mid, np.float32(2)), np.nextafter(grid, np.float32(-2))]).astype(np.float32)
    assert np.array_equal(bnb._dynamic_codes(x), _oracle_dynamic(x))


# ----------------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_dequantize_error_bound(quant_type, nested, dtype):
    for blocksize, shape in ((64, (130, 257)), (4096, (3, 5000))):
        w = _data(shape, dtype, blocksize)
        packed, st = bnb.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
        out = bnb.dequantize_4bit(packed, st)
        assert out.dtype == np.dtype(dtype) and out.shape == shape
        # exactly LUT[code] * absmax in float32, rounded once
        a2 = bnb.absmax_fp32(st)
        lut = bnb.NF4 if quant_type == "nf4" else bnb.FP4
        f32 = lut[_codes(packed, w.size)] * np.repeat(a2, blocksize)[: w.size]
        assert np.array_equal(out.reshape(-1), f32.astype(dtype))
        # derived bound: |w/a - c| <= GAP/2 + DELTA + X_ROUND, the absmax error |a' - a| (|c| <= 1), and
        # the two roundings of c * a' (float32, then the dtype)
        _, a = _blocks(w.astype(np.float32), blocksize)
        a_el = np.repeat(a.astype(np.float64), blocksize)[: w.size]
        a2_el = np.repeat(a2.astype(np.float64), blocksize)[: w.size]
        bound = (a_el * (GAP[quant_type] / 2 + DELTA[quant_type] + X_ROUND) + np.abs(a2_el - a_el)
                 + a2_el * (2.0**-24 + OUT_ROUND[np.dtype(dtype)]) + OUT_ABS[np.dtype(dtype)])
        err = np.abs(w.astype(np.float64).reshape(-1) - out.astype(np.float64).reshape(-1))
        assert (err <= bound).all(), (blocksize, float((err - bound).max()))


def test_chunks_change_nothing(monkeypatch):
    """Large weights are processed in slices of whole blocks: the slicing is invisible."""
    w = _data((13, 3000), np.float32, 3)
    runs = []
    for chunk in (bnb._CHUNK, 4096):            # 4096: the smallest slice that is whole blocks of every size
        monkeypatch.setattr(bnb, "_CHUNK", chunk)
        res = []
        for bs in (32, 4096):
            for qt in bnb.QUANT_TYPES:
                packed, st = bnb.quantize_4bit(w, blocksize=bs, quant_type=qt, compress_statistics=True)
                res += [packed.tobytes(), st.absmax.tobytes(), bnb.dequantize_4bit(packed, st).tobytes()]
        runs.append(res)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_torch_matches_numpy(dtype):
    w = _data((33, 77), dtype, 4)
    t = torch.from_numpy(w.astype(np.float32)).to(TORCH[np.dtype(dtype)])
    for qt in bnb.QUANT_TYPES:
        for nested in (False, True):
            pn, sn = bnb.quantize_4bit(w, blocksize=32, quant_type=qt, compress_statistics=nested)
            pt, stt = bnb.quantize_4bit(t, blocksize=32, quant_type=qt, compress_statistics=nested)
            assert isinstance(pt, torch.Tensor) and pt.dtype == torch.uint8 and tuple(pt.shape) == pn.shape
            assert np.array_equal(pt.numpy(), pn)
            assert isinstance(stt.absmax, torch.Tensor) and np.array_equal(stt.absmax.numpy(), sn.absmax)
            assert isinstance(stt.code, torch.Tensor) and np.array_equal(stt.code.numpy(), sn.code)
            assert stt.dtype == TORCH[np.dtype(dtype)] and sn.dtype == np.dtype(dtype)
            assert isinstance(stt.shape, torch.Size) and stt.shape == sn.shape == (33, 77)
            if nested:
                assert isinstance(stt.offset, torch.Tensor) and stt.offset.dim() == 0
                assert stt.offset.item() == sn.offset and stt.state2.dtype == torch.float32
                assert np.array_equal(stt.state2.absmax.numpy(), sn.state2.absmax)
                assert np.array_equal(stt.state2.code.numpy(), sn.state2.code)
            out_t, out_n = bnb.dequantize_4bit(pt, stt), bnb.dequantize_4bit(pn, sn)
            assert isinstance(out_t, torch.Tensor) and out_t.dtype == TORCH[np.dtype(dtype)]
            assert np.array_equal(out_t.float().numpy(), out_n.astype(np.float32))
            # mixed kinds: the result follows packed
            assert np.array_equal(bnb.dequantize_4bit(pn, stt), out_n)
            amax = bnb.absmax_fp32(stt)
            assert isinstance(amax, torch.Tensor) and np.array_equal(amax.numpy(), bnb.absmax_fp32(sn))


def test_quant_storage_views_are_accepted():
    """bitsandbytes' quant_storage=float16/bfloat16/float32 stores the same bytes viewed as that dtype."""
    w = torch.from_numpy(_data((8, 64), np.float32, 6))
    packed, st = bnb.quantize_4bit(w, quant_type="nf4", compress_statistics=True)
    want = bnb.dequantize_4bit(packed, st)
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        assert torch.equal(bnb.dequantize_4bit(packed.reshape(-1).view(dt).unsqueeze(1), st), want)
    assert torch.equal(bnb.dequantize_4bit(packed.t(), st), want)          # old callers' [1, n/2]


def test_import_does_not_import_torch():
    code = ("import sys, numpy as np, hipskinny.bnb as b; p, s = b.quantize_4bit(np.ones(3, np.float32), "
            "quant_type='nf4', compress_statistics=True); "
            "b.dequantize_4bit(p, s); b.as_state(b.state_dict(p, s)); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------------------------
# state dicts and foreign states


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("nested", [False, True])
def test_state_dict_round_trip(kind, nested):
    w = _data((20, 48), BF16, 7)
    if kind == "torch":
        w = torch.from_numpy(w.astype(np.float32)).to(torch.bfloat16)
    packed, st = bnb.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=nested)
    prefix = "model.layers.0.mlp.down_proj.weight."
    sd = bnb.state_dict(packed, st, prefix=prefix)
    keys = {"model.layers.0.mlp.down_proj.weight", prefix + "absmax", prefix + "quant_map",
            prefix + "quant_state.bitsandbytes__nf4"}
    if nested:
        keys |= {prefix + "nested_absmax", prefix + "nested_quant_map"}
    assert set(sd) == keys
    meta = json.loads(bytes(np.asarray(sd[prefix + "quant_state.bitsandbytes__nf4"]).tobytes()).decode())
    want = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [20, 48]}
    if nested:
        want |= {"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(st.offset)}
    assert meta == want and list(meta) == list(want)              # bitsandbytes' key order
    assert all(isinstance(v, torch.Tensor) == (kind == "torch") for v in sd.values())
    assert sd[prefix + "quant_state.bitsandbytes__nf4"].dtype in (np.uint8, torch.uint8)
    # read back, among another layer's entries, with the prefix with or without its dot
    other = bnb.state_dict(*bnb.quantize_4bit(np.ones(6, np.float32), quant_type="fp4", compress_statistics=True),
                           prefix="lm_head.weight.")
    full = {**other, **sd, "model.norm.weight": np.ones(3)}
    for p in (prefix, prefix[:-1]):
        back = bnb.as_state(full, prefix=p)
        assert back.quant_type == "nf4" and back.blocksize == 64 and tuple(back.shape) == (20, 48)
        assert back.dtype == (torch.bfloat16 if kind == "torch" else BF16) and back.nested == nested
        out = bnb.dequantize_4bit(full[prefix[:-1]], back)
        ref = bnb.dequantize_4bit(packed, st)
        assert (torch.equal(out, ref) if kind == "torch" else np.array_equal(out, ref))
    assert bnb.as_state(full, prefix="lm_head.weight").quant_type == "fp4"
    # no prefix: the stats' keys are bare, the packed bytes are "weight"
    bare = bnb.state_dict(packed, st)
    assert "weight" in bare and "absmax" in bare and bnb.as_state(bare).nested == nested


def test_state_dict_unpacked_entries():
    """bitsandbytes' as_dict() without packing: plain quant_type/blocksize/dtype/shape entries."""
    packed, st = bnb.quantize_4bit(_data((4, 64), np.float16, 8), quant_type="fp4", compress_statistics=True)
    sd = {"absmax": st.absmax, "quant_map": st.code, "nested_absmax": st.state2.absmax,
          "nested_quant_map": st.state2.code, "quant_type": "fp4", "blocksize": 64, "dtype": "float16",
          "shape": (4, 64), "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(st.offset)}
    assert np.array_equal(bnb.dequantize_4bit(packed, bnb.as_state(sd)), bnb.dequantize_4bit(packed, st))


def _bnb_like(st, torch_kind=True):
    """A bitsandbytes QuantState imitation: torch tensors, torch.Size, torch dtypes, a bare state2."""
    tt = (lambda a: torch.from_numpy(np.asarray(a).copy())) if torch_kind else np.asarray
    state2 = None
    if st.nested:
        state2 = types.SimpleNamespace(absmax=tt(st.state2.absmax), shape=None, code=tt(st.state2.code),
                                       blocksize=256, quant_type=None, dtype=torch.float32, offset=None,
                                       state2=None, nested=False)
    return types.SimpleNamespace(absmax=tt(st.absmax), shape=torch.Size(st.shape), code=tt(st.code),
                                 blocksize=st.blocksize, quant_type=st.quant_type, dtype=TORCH[np.dtype(st.dtype)],
                                 offset=tt(st.offset) if st.nested else None, state2=state2, nested=st.nested)


@pytest.mark.parametrize("nested", [False, True])
def test_duck_typed_foreign_states(nested):
    w = _data((16, 96), np.float16, 9)
    packed, st = bnb.quantize_4bit(w, blocksize=32, quant_type="nf4", compress_statistics=nested)
    want = bnb.dequantize_4bit(packed, st)
    foreign = _bnb_like(st)
    params = types.SimpleNamespace(quant_state=foreign, blocksize=32, quant_type="nf4")   # a Params4bit
    for obj in (foreign, params):
        got = bnb.as_state(obj)
        assert isinstance(got, bnb.QuantState) and got.nested == nested and got.dtype == torch.float16
        assert isinstance(got.absmax, torch.Tensor) and got.shape == (16, 96)
        assert np.array_equal(bnb.dequantize_4bit(torch.from_numpy(packed), obj).numpy(), want)
        assert np.array_equal(bnb.dequantize_4bit(packed, obj), want)
        assert np.array_equal(bnb.absmax_fp32(obj).numpy(), bnb.absmax_fp32(st))
    if nested:                                   # bitsandbytes keeps a float offset in some paths
        foreign.offset = float(st.offset)
        assert np.array_equal(bnb.dequantize_4bit(packed, foreign), want)
    # and the state dict written from the foreign state is the one written from ours
    a, b = bnb.state_dict(packed, foreign, "x."), bnb.state_dict(packed, st, "x.")
    assert a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
    assert bnb.as_state(st) is st


# ----------------------------------------------------------------------------------------------
# bad input


def test_bad_quantize_inputs():
    w = np.ones((4, 64), np.float32)
    for bs in (16, 48, 8192, 0, "64", 64.0, True):
        with pytest.raises(InputValueError, match=r"blocksize must be a power of two from 32 to 4096 "
                           r"\(32, 64, 128, 256, 512, 1024, 2048, 4096\); got"):
            bnb.quantize_4bit(w, blocksize=bs)
    with pytest.raises(InputValueError, match=r"quant_type must be 'nf4' or 'fp4'; got 'int4'"):
        bnb.quantize_4bit(w, quant_type="int4")
    with pytest.raises(InputValueError, match=r"quant_type must be 'nf4' or 'fp4'; got 'NF4'"):
        bnb.quantize_4bit(w, quant_type="NF4")
    for bad in (np.ones(4, np.float64), np.ones(4, np.int32), np.ones(4, ml_dtypes.float8_e4m3fn)):
        with pytest.raises(InputTypeError, match=rf"float16, bfloat16 or float32 arrays; got {bad.dtype}"):
            bnb.quantize_4bit(bad)
    with pytest.raises(InputTypeError, match=r"float16, bfloat16 or float32 tensors; got torch.float64"):
        bnb.quantize_4bit(torch.ones(4, dtype=torch.float64))
    with pytest.raises(InputTypeError, match=r"numpy array or torch tensor .*got builtins.list"):
        bnb.quantize_4bit([1.0, 2.0])
    with pytest.raises(InputTypeError, match=r"compress_statistics must be True or False; got 'yes'"):
        bnb.quantize_4bit(w, compress_statistics="yes")
    with pytest.raises(InputValueError, match=r"at least one element; got shape \(0, 5\)"):
        bnb.quantize_4bit(np.ones((0, 5), np.float32))
    bad = w.copy()
    bad[1, 3], bad[2, 0] = np.nan, -np.inf
    with pytest.raises(InputValueError, match=r"w holds 2 NaN or infinite value\(s\)"):
        bnb.quantize_4bit(bad)


def test_bad_states():
    w = _data((3, 70), np.float32, 11)             # 210 elements: 105 bytes, 4 blocks of 64
    packed, st = bnb.quantize_4bit(w, quant_type="nf4", compress_statistics=False)
    _, nst = bnb.quantize_4bit(w, quant_type="nf4", compress_statistics=True)

    def dq(**changes):
        return bnb.dequantize_4bit(packed, bnb.QuantState(**{**vars(st), **changes}))

    def dqn(**changes):
        return bnb.dequantize_4bit(packed, bnb.QuantState(**{**vars(nst), **changes}))

    with pytest.raises(InputValueError, match=r"packed holds 104 bytes, but state.shape \(3, 70\) has 210 elements, "
                       r"which pack into ceil\(210/2\) = 105 bytes"):
        bnb.dequantize_4bit(packed[:-1], st)
    with pytest.raises(InputValueError, match=r"state.absmax has 3 entries; shape \(3, 70\) \(210 elements\) in "
                       r"blocks of 64 needs 4"):
        dq(absmax=st.absmax[:3])
    with pytest.raises(InputValueError, match=r"packed holds 105 bytes, but state.shape \(3, 71\) has 213 elements, "
                       r"which pack into ceil\(213/2\) = 107 bytes"):
        dq(shape=(3, 71))       # still 4 blocks of 64: only the byte count tells
    with pytest.raises(InputValueError, match=r"state.quant_type must be 'nf4' or 'fp4'; got 'int4'"):
        dq(quant_type="int4")
    with pytest.raises(InputValueError, match=r"state.blocksize must be a power of two .* got 100"):
        dq(blocksize=100)
    with pytest.raises(InputTypeError, match=r"state.dtype must be float16, bfloat16 or float32; got "):
        dq(dtype=np.float64)
    with pytest.raises(InputValueError, match=r"state.shape must be a sequence of ints; got None"):
        dq(shape=None)
    with pytest.raises(InputValueError, match=r"state.code is not bitsandbytes' nf4 table"):
        dq(code=bnb.FP4)
    with pytest.raises(InputTypeError, match=r"state.absmax \(not nested\) must be float32; got float16"):
        dq(absmax=st.absmax.astype(np.float16))
    with pytest.raises(InputValueError, match=r"state.absmax holds uint8 codes \(a nested state\) but "
                       r"state.state2 is None"):
        dq(absmax=nst.absmax)
    with pytest.raises(InputTypeError, match=r"a nested state's absmax must be uint8 codes; got float32"):
        dqn(absmax=st.absmax)
    with pytest.raises(InputValueError, match=r"nested state \(state2 is set\) but it has no offset"):
        dqn(offset=None)
    s2 = nst.state2
    with pytest.raises(InputValueError, match=r"state.state2 has no absmax"):
        dqn(state2=bnb.QuantState(absmax=None, code=s2.code, blocksize=256, dtype=np.float32))
    with pytest.raises(InputValueError, match=r"state.state2 has no code"):
        dqn(state2=bnb.QuantState(absmax=s2.absmax, blocksize=256, dtype=np.float32))
    with pytest.raises(InputValueError, match=r"state.state2 has no blocksize"):
        dqn(state2=bnb.QuantState(absmax=s2.absmax, code=s2.code, dtype=np.float32))
    with pytest.raises(InputValueError, match=r"state.state2.absmax has 2 entries; 4 nested codes in blocks of "
                       r"256 need 1"):
        dqn(state2=bnb.QuantState(absmax=np.ones(2, np.float32), code=s2.code, blocksize=256))
    with pytest.raises(InputValueError, match=r"state.state2.code must be the 256-entry float map; got 16"):
        dqn(state2=bnb.QuantState(absmax=s2.absmax, code=bnb.NF4, blocksize=256))
    with pytest.raises(InputTypeError, match=r"packed must be a numpy array or torch tensor of uint8 bytes; "
                       r"got builtins.bytes"):
        bnb.dequantize_4bit(packed.tobytes(), st)
    with pytest.raises(InputTypeError, match=r"expected a hipskinny or bitsandbytes QuantState, an object with "
                       r".quant_state \(Params4bit\), or a state dict; got builtins.int"):
        bnb.as_state(3)
    with pytest.raises(InputValueError, match=r"state is None \(a Params4bit that was never quantized"):
        bnb.dequantize_4bit(packed, types.SimpleNamespace(quant_state=None))
    with pytest.raises(InputValueError, match=r"prefix= applies to a state dict only"):
        bnb.as_state(st, prefix="x.")


def test_bad_state_dicts():
    packed, st = bnb.quantize_4bit(_data((2, 64), np.float32, 12), quant_type="fp4", compress_statistics=True)
    sd = bnb.state_dict(packed, st, "a.weight.")
    key = "a.weight.quant_state.bitsandbytes__fp4"

    def without(k):
        return {kk: v for kk, v in sd.items() if kk != k}

    with pytest.raises(InputValueError, match=r"no 'b.weight.quant_state.bitsandbytes__nf4' or ...fp4 entry in the "
                       r"state dict \(prefix 'b.weight.'\); prefixes with a quant state: \['a.weight.'\]"):
        bnb.as_state(sd, prefix="b.weight.")
    with pytest.raises(InputValueError, match=r"the state dict has no 'a.weight.absmax'"):
        bnb.as_state(without("a.weight.absmax"), prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"the nested state dict has no 'a.weight.nested_quant_map'"):
        bnb.as_state(without("a.weight.nested_quant_map"), prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"the state dict has both .*__nf4' and .*__fp4'"):
        bnb.as_state({**sd, "a.weight.quant_state.bitsandbytes__nf4": sd[key]}, prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"'a.weight.quant_state.bitsandbytes__fp4' says quant_type 'nf4'"):
        meta = json.loads(sd[key].tobytes()) | {"quant_type": "nf4"}
        bnb.as_state({**sd, key: np.frombuffer(json.dumps(meta).encode(), np.uint8)}, prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"is not JSON"):
        bnb.as_state({**sd, key: np.frombuffer(b"{nope", np.uint8)}, prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"is not UTF-8 text"):
        bnb.as_state({**sd, key: np.uint8([0xFF, 0xFE])}, prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"the JSON of .* has no 'nested_offset'"):
        meta = {k: v for k, v in json.loads(sd[key].tobytes()).items() if k != "nested_offset"}
        bnb.as_state({**sd, key: np.frombuffer(json.dumps(meta).encode(), np.uint8)}, prefix="a.weight.")
    with pytest.raises(InputTypeError, match=r"state.dtype must be float16, bfloat16 or float32; got 'float64'"):
        meta = json.loads(sd[key].tobytes()) | {"dtype": "float64"}
        bnb.as_state({**sd, key: np.frombuffer(json.dumps(meta).encode(), np.uint8)}, prefix="a.weight.")
    with pytest.raises(InputValueError, match=r"packed holds 63 bytes, but state.shape \(2, 64\) has 128 elements"):
        bnb.state_dict(packed[:-1], st)
    with pytest.raises(InputTypeError, match=r"prefix must be a str; got int"):
        bnb.as_state(sd, prefix=3)


# ----------------------------------------------------------------------------------------------
# bitsandbytes itself: in the test extra on x86-64 Linux (a missing one fails there), skipped with
# its reason elsewhere


@functools.cache
def _bitsandbytes():
    """``bitsandbytes.functional``, or why it cannot be used (a str)."""
    try:
        with warnings.catch_warnings():         # its import trips torch.jit deprecation warnings
            warnings.simplefilter("ignore", DeprecationWarning)
            import bitsandbytes
            import bitsandbytes.functional as F
    except Exception as exc:
        return f"bitsandbytes not installed: {exc!r}"
    try:
        F.quantize_4bit(torch.ones(64), blocksize=64, quant_type="nf4")
    except Exception as exc:      # importable, but its CPU backend cannot quantize (old releases)
        return f"bitsandbytes not installed: {bitsandbytes.__version__} cannot quantize on the CPU: {exc!r}"
    return F


def _bnb_functional():
    """bitsandbytes.functional, else a failure where the test extra installs it, a skip elsewhere."""
    F = _bitsandbytes()
    if isinstance(F, str):
        if platform.machine() == "x86_64" and sys.platform == "linux":
            pytest.fail(F + " (the test extra installs it here: pip install '.[test]')")
        pytest.skip(F)
    return F


def _excused(w, bs, quant_type, cb, ch):
    """Where bitsandbytes' CPU backend may code differently (``cb``/``ch``: its codes and ours), each
    checked to be what the module says: a partial last block divided instead of multiplied by the
    reciprocal (where the two give different x), and FP4's zero codes (`_assert_fp4_zero_signs`)."""
    w32 = w.float().numpy().reshape(-1)
    n = w32.size
    x, am = _blocks(w32, bs)
    excused = np.zeros(n, bool)
    full = n - n % bs
    if n % bs:
        excused[full:] = (w32[full:] / am[-1]) != x[full:]
    if quant_type == "fp4":
        excused |= _assert_fp4_zero_signs(x, cb, ch)
    return excused


def _assert_fp4_zero_signs(x, cb, ch):
    """The FP4 zero codes (magnitude 0 in both), asserted to carry the sign bits the module says: ours
    ``x < 0`` (the CUDA kernel's), bitsandbytes' CPU backend ``x > 0`` (its (0, m] bucket is code 8)."""
    zero = ((cb & 7) == 0) & ((ch & 7) == 0)
    assert np.array_equal(ch[zero] == 8, x[zero] < 0)
    assert np.array_equal(cb[zero] == 8, x[zero] > 0)
    return zero


def _assert_bnb_codes(w, bs, quant_type, pb, ph):
    """Our packed bytes are bitsandbytes' (whole blocks), but for FP4's zeros, whose sign bits are
    asserted to be as documented: equal after mapping code 8 to 0 where both codes are a zero."""
    n = w.numel()
    assert n % bs == 0
    cb, ch = _codes(pb.numpy(), n), _codes(np.asarray(ph), n)
    if quant_type == "nf4":
        assert np.asarray(ph).tobytes() == pb.numpy().tobytes()
        return
    zero = _assert_fp4_zero_signs(_blocks(w.float().numpy().reshape(-1), bs)[0], cb, ch)
    assert np.array_equal(np.where(zero, 0, cb), np.where(zero, 0, ch))


def _stats(st):
    """A state's statistics as (dtype, shape, bytes): absmax, and if nested the offset, state2.absmax
    and state2.code."""
    def raw(x):
        a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        return a.dtype.str, a.shape, a.tobytes()

    out = {"absmax": raw(st.absmax)}
    if st.state2 is not None:
        out |= {"offset": raw(st.offset), "state2.absmax": raw(st.state2.absmax), "state2.code": raw(st.state2.code)}
    return out


def test_bnb_tables():
    bnbF = _bnb_functional()
    assert np.array_equal(bnbF.get_4bit_type("nf4", device="cpu").numpy(), bnb.NF4)
    assert np.array_equal(bnbF.get_4bit_type("fp4", device="cpu").numpy(), bnb.FP4)     # -0.0 == 0.0
    assert np.array_equal(bnbF.create_dynamic_map().numpy(), bnb.DYNAMIC_MAP)


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_bnb_bytes_and_absmax(quant_type, tdtype):
    """bitsandbytes' CPU backend gives the same absmax bit for bit and the same codes but where the
    module's documented choices apply: a partial last block divided instead of multiplied by the
    reciprocal (excused where the two give different x), and the sign bit of FP4's zero codes."""
    bnbF = _bnb_functional()
    for bs, shape in ((64, (64, 256)), (32, (33, 65)), (128, (3, 1001)), (4096, (3, 4096)), (1024, (7, 333))):
        w = torch.randn(shape, generator=torch.Generator().manual_seed(bs)).to(tdtype)
        pb, sb = bnbF.quantize_4bit(w, blocksize=bs, quant_type=quant_type, compress_statistics=False)
        ph, sh = bnb.quantize_4bit(w, blocksize=bs, quant_type=quant_type, compress_statistics=False)
        assert pb.shape == ph.shape and pb.dtype == ph.dtype
        assert torch.equal(sb.absmax, sh.absmax)
        n = w.numel()
        cb, ch = _codes(pb.numpy(), n), _codes(ph.numpy(), n)
        excused = _excused(w, bs, quant_type, cb, ch)
        full = n - n % bs
        assert np.array_equal(cb[~excused], ch[~excused]), (bs, shape)
        if quant_type == "nf4" and n == full:
            assert not excused.any()


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_bnb_states_interoperate(quant_type, tdtype):
    """bitsandbytes' states dequantize here bit for bit as bitsandbytes does, both ways through the
    state dict."""
    bnbF = _bnb_functional()
    w = torch.randn((300, 256), generator=torch.Generator().manual_seed(1)).to(tdtype)
    for nested in (False, True):
        pb, sb = bnbF.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=nested)
        ph, sh = bnb.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=nested)
        assert torch.equal(bnb.dequantize_4bit(pb, sb), bnbF.dequantize_4bit(pb, sb))
        assert torch.equal(bnb.dequantize_4bit(pb, sb.as_dict(packed=True)), bnbF.dequantize_4bit(pb, sb))
        assert torch.equal(bnbF.dequantize_4bit(ph, sh), bnb.dequantize_4bit(ph, sh))    # ours, read by bnb
        ours = bnb.state_dict(ph, sh)
        back = bnbF.QuantState.from_dict({k: v for k, v in ours.items() if k != "weight"}, device="cpu")
        assert torch.equal(bnbF.dequantize_4bit(ph, back), bnb.dequantize_4bit(ph, sh))
        theirs = sb.as_dict(packed=True)
        mine = bnb.state_dict(pb, sb)
        assert set(mine) - {"weight"} == set(theirs)
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs)          # the JSON bytes included
        if nested:
            assert torch.equal(bnb.absmax_fp32(sb), bnbF.dequantize_blockwise(sb.absmax, sb.state2) + sb.offset)
            assert _stats(sh) == _stats(sb)         # byte for byte (test_bnb_statistics_byte_parity_*)


# bitsandbytes' statistics byte for byte. Its CPU path is the reference: the offset is torch's float32
# absmax.mean() and the nested codes come from its CPU library's table (its CUDA kernel sums in the
# GPU's order and searches the map instead, so GPU-made states may differ in those bytes).


def test_quantize_4bit_defaults_are_bitsandbytes_defaults():
    bnbF = _bnb_functional()
    theirs = inspect.signature(bnbF.quantize_4bit).parameters
    ours = inspect.signature(bnb.quantize_4bit).parameters
    for name in ("quant_type", "compress_statistics"):
        assert ours[name].default == theirs[name].default, name
    bs = theirs["blocksize"].default
    if bs is None:                  # bitsandbytes' body turns None into 64
        bs = bnbF.quantize_4bit(torch.ones(128))[1].blocksize
    assert ours["blocksize"].default == bs == 64
    w = torch.randn((8, 256), generator=torch.Generator().manual_seed(0))
    pb, sb = bnbF.quantize_4bit(w)
    ph, sh = bnb.quantize_4bit(w)
    assert (sh.quant_type, sh.blocksize, sh.nested) == (sb.quant_type, sb.blocksize, sb.nested) == ("fp4", 64, False)
    assert _stats(sh) == _stats(sb)


def test_bnb_nested_parity_issue_example():
    """Issue 22's case: the offset was 0.025870082899928093 (the float64 mean rounded), bitsandbytes'
    float32 torch mean is one ulp above, and one of the 768 nested codes differed."""
    bnbF = _bnb_functional()
    w = torch.randn((96, 512), generator=torch.Generator().manual_seed(2)) * 0.01
    pb, sb = bnbF.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
    for src in (w, w.numpy()):
        ph, sh = bnb.quantize_4bit(src, blocksize=64, quant_type="nf4", compress_statistics=True)
        assert _stats(sh) == _stats(sb)
        assert np.asarray(ph).tobytes() == pb.numpy().tobytes()


PARITY_SHAPES = {64: [(96, 512), (75, 640)], 128: [(150, 384)], 256: [(200, 768)], 4096: [(75, 4096)]}


@pytest.mark.parametrize("quant_type", bnb.QUANT_TYPES)
@pytest.mark.parametrize("blocksize", sorted(PARITY_SHAPES))
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_bnb_statistics_byte_parity_with_and_without_nesting(quant_type, blocksize, tdtype):
    """absmax, and nested the codes, offset, state2.absmax and state2.code, are bitsandbytes' bytes from
    torch and from numpy input (whole 4-bit blocks; 768, 750, 450, 600 and 75 of them), and so are the
    packed bytes, but for the sign bit of FP4's zero codes (`_assert_bnb_codes`)."""
    bnbF = _bnb_functional()
    shapes = PARITY_SHAPES[blocksize]
    for seed in range(3):
        shape = shapes[seed % len(shapes)]
        g = torch.Generator().manual_seed(100 * blocksize + seed)
        scale = torch.exp2(torch.randint(-16, 3, (shape[0], 1), generator=g).float())    # rows of varied scale
        w = (torch.randn(shape, generator=g) * scale).to(tdtype)
        wn = w.view(torch.int16).numpy().view(BF16) if tdtype == torch.bfloat16 else w.numpy()
        for nested in (False, True):
            pb, sb = bnbF.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
            for src in (w, wn):
                ph, sh = bnb.quantize_4bit(src, blocksize=blocksize, quant_type=quant_type,
                                           compress_statistics=nested)
                where = (shape, seed, nested, type(src).__name__)
                assert _stats(sh) == _stats(sb), where
                _assert_bnb_codes(w, blocksize, quant_type, pb, ph)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bnb_nested_parity_above_torch_parallel_grain(threads):
    """From 32768 blocks on, torch sums the absmax in one chunk per thread, then sums the chunks: the
    offset depends on torch's thread count, which the numpy path reads from torch once it is loaded."""
    bnbF = _bnb_functional()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = torch.randn((1120, 2000), generator=torch.Generator().manual_seed(threads))   # 70000 blocks of 32
        pb, sb = bnbF.quantize_4bit(w, blocksize=32, quant_type="nf4", compress_statistics=True)
        for src in (w, w.numpy()):
            ph, sh = bnb.quantize_4bit(src, blocksize=32, quant_type="nf4", compress_statistics=True)
            assert _stats(sh) == _stats(sb), type(src).__name__
    finally:
        torch.set_num_threads(old)


def test_numpy_offset_is_torch_cpu_float32_mean():
    """The numpy path's mean is torch's CPU float32 mean bit for bit (a cascade sum over SIMD lanes and
    four accumulators, per thread chunk from 32768 elements on, then one division), at every length."""
    rng = np.random.default_rng(7)
    old = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            lanes, got_threads = bnb._torch_cpu_reduction()
            assert got_threads == threads and lanes in (8, 16)
            for m in [*range(1, 70), 255, 256, 511, 512, 513, 4095, 4097, 8191, 16385, 32767, 32768, 40000, 65537,
                      100003, 300001]:
                x = (rng.random(m) * np.exp2(rng.integers(-8, 8))).astype(np.float32)
                want = np.float32(torch.from_numpy(x).mean().item())
                assert bnb._torch_cpu_mean(x, lanes, threads) == want, (threads, m)
    finally:
        torch.set_num_threads(old)


def test_nested_codes_match_bnb_cpu_quantize_blockwise():
    """Blocks of 256 against the dynamic map, as bitsandbytes' CPU quantize_blockwise codes them: random
    values, values on and next to its grid's edges and the map's float32 midpoints, an all-zero block
    (code 0) and a block whose 1/absmax overflows (0 * inf is NaN: code 0)."""
    bnbF = _bnb_functional()
    rng = np.random.default_rng(11)
    m = bnb.DYNAMIC_MAP
    mid = (m[:-1] + m[1:]) * np.float32(0.5)
    edges = ((np.arange(65536) - 0.5) / 65535 * 2 - 1).astype(np.float32)       # grid index changes here
    pts = np.concatenate([mid, np.nextafter(mid, np.float32(2)), np.nextafter(mid, np.float32(-2)),
                          edges, np.nextafter(edges, np.float32(2)), np.nextafter(edges, np.float32(-2))])
    pts = np.clip(pts, -1, 1)
    per = 255
    blocks = -(-pts.size // per)
    a = np.zeros(blocks * 256, np.float32).reshape(blocks, 256)
    a[:, 0] = 1.0                                                                   # absmax 1: x = a
    flat = np.zeros(blocks * per, np.float32)
    flat[: pts.size] = pts
    a[:, 1:] = flat.reshape(blocks, per)
    a = np.concatenate([a.reshape(-1), rng.standard_normal(3000).astype(np.float32), np.zeros(256, np.float32),
                        np.float32([2.0**-140, 0.0, -(2.0**-141)] + [0.0] * 253), rng.random(77).astype(np.float32)])
    qb, sb = bnbF.quantize_blockwise(torch.from_numpy(a), blocksize=256)
    q, absmax2 = bnb._quantize_dynamic(a)
    assert np.array_equal(absmax2, sb.absmax.numpy())
    assert np.array_equal(q, qb.numpy())


def test_numpy_only_process_gives_bnb_nested_bytes(tmp_path):
    """Without torch in the process the numpy path still gives bitsandbytes' bytes (below 32768 blocks
    the thread count does not matter)."""
    bnbF = _bnb_functional()
    w = (torch.randn((75, 640), generator=torch.Generator().manual_seed(5)) * 0.02).to(torch.float16)
    np.save(tmp_path / "w.npy", w.numpy())
    code = ("import sys, numpy as np, hipskinny.bnb as b; w = np.load(sys.argv[1]); "
            "p, s = b.quantize_4bit(w, blocksize=64, quant_type='nf4', compress_statistics=True); "
            "assert 'torch' not in sys.modules; np.savez(sys.argv[2], packed=p, absmax=s.absmax, offset=s.offset, "
            "absmax2=s.state2.absmax, code2=s.state2.code)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "w.npy"), str(tmp_path / "out.npz")], check=True)
    got = np.load(tmp_path / "out.npz")
    pb, sb = bnbF.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
    want = _stats(sb)
    mine = {"absmax": got["absmax"], "offset": got["offset"], "state2.absmax": got["absmax2"],
            "state2.code": got["code2"]}
    assert {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in mine.items()} == want
    assert got["packed"].tobytes() == pb.numpy().tobytes()


# ----------------------------------------------------------------------------------------------
# 4-bit decisions at bitsandbytes' decision points, against bitsandbytes itself (issue 55): its CPU
# backend's rule (float32 midpoints, a value on one to the lower entry), but for the sign of FP4's zero


def _to_torch(a):
    """A numpy float32/float16/bfloat16 array as a torch tensor of that dtype."""
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _led_blocks(runs, blocksize, dtype):
    """Whole blocks of ``blocksize``: each ``(a, points)`` run cut into blocks led by ``a`` (the absmax,
    every point being smaller in magnitude), zero-filled."""
    per = blocksize - 1
    out = []
    for a, pts in runs:
        for s in range(0, len(pts), per):
            block = np.zeros(blocksize, dtype)
            block[0] = a
            block[1: 1 + len(pts[s: s + per])] = pts[s: s + per]
            out.append(block)
    return np.concatenate(out)


def _dtype_neighbours(v):
    """``v`` (an array of one float dtype, no zeros) with its dtype neighbours on both sides."""
    bits = {2: np.uint16, 4: np.uint32}[v.dtype.itemsize]
    u = v.view(bits)
    return np.concatenate([v, (u + 1).view(v.dtype), (u - 1).view(v.dtype)])


def _midpoint_weight(dtype, blocksize):
    """For each absmax ``a`` (1, 3, 0.75, 384, 3 * 2**-10): the float32 midpoints, exact midpoints and
    CUDA literals of adjacent NF4 entries and FP4 magnitudes (both signs), times ``a``, rounded to
    ``dtype``, with their ``dtype`` neighbours on both sides; in whole blocks led by ``a``."""
    exact_fp4 = (np.sort(FP4_MAG_64)[:-1] + np.sort(FP4_MAG_64)[1:]) / 2
    exact_nf4 = (NF4_64[:-1] + NF4_64[1:]) / 2
    fp4 = np.concatenate([FP4_MID32, exact_fp4, FP4_CONST])
    pts = np.concatenate([fp4, -fp4, NF4_CONST, CUDA_NF4_64, exact_nf4])
    runs = []
    for a in (1.0, 3.0, 0.75, 384.0, 3 * 2.0**-10):
        v = np.unique((pts * a).astype(dtype))
        runs.append((a, np.unique(_dtype_neighbours(v[v != 0]))))
    return _to_torch(_led_blocks(runs, blocksize, dtype))


@pytest.mark.parametrize("nested", [False, True], ids=["plain", "nested"])
@pytest.mark.parametrize("blocksize", [32, 64, 256, 4096])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_bnb_codes_at_midpoints_literals_and_their_neighbours(dtype, blocksize, nested):
    """At the float32 midpoint, the exact midpoint and the CUDA literal of every pair of adjacent NF4
    entries and FP4 magnitudes (both signs), times the block's absmax and rounded to the weight's
    dtype, and at the dtype's neighbours on both sides: NF4's and FP4's codes are bitsandbytes' (FP4's
    zeros: the documented sign bits), and so are the statistics. The points land exactly on every FP4
    decision point with both signs (3 * 2**k absmax reach them in every dtype), and on every NF4 one in
    float32."""
    bnbF = _bnb_functional()
    w = _midpoint_weight(dtype, blocksize)
    x = _blocks(w.float().numpy().reshape(-1), blocksize)[0].astype(np.float64)
    assert set(FP4_MID32) <= set(x[x > 0]) and set(-FP4_MID32) <= set(x[x < 0])
    if dtype == np.float32:
        assert set(NF4_CONST) <= set(x) and set(CUDA_NF4_64) <= set(x)
    for quant_type in bnb.QUANT_TYPES:
        pb, sb = bnbF.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
        ph, sh = bnb.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
        assert _stats(sh) == _stats(sb), quant_type
        _assert_bnb_codes(w, blocksize, quant_type, pb, ph)


@pytest.mark.parametrize("nested", [False, True], ids=["plain", "nested"])
@pytest.mark.parametrize("blocksize", [64, 128])
def test_bnb_codes_float16_subnormal_blocks_at_exact_midpoints(blocksize, nested):
    """float16 blocks of subnormals: absmax a * 2**-24 for a = 1..1023 and values k * 2**-24 at and next
    to every FP4 and NF4 midpoint times a. x = k * fl(1/a) lands exactly on decision points (the FP4
    midpoints with both signs among them) for many a; the codes there are bitsandbytes'."""
    bnbF = _bnb_functional()
    exact_fp4 = (np.sort(FP4_MAG_64)[:-1] + np.sort(FP4_MAG_64)[1:]) / 2
    mids = np.concatenate([exact_fp4, -exact_fp4, (NF4_64[:-1] + NF4_64[1:]) / 2])
    runs = []
    for a in range(1, 1024):
        k = np.unique(np.round(mids * a)[:, None] + np.arange(-1, 2)).astype(np.int64)
        k = k[(k != 0) & (np.abs(k) <= a)]
        runs.append((np.float16(a * 2.0**-24), (k * 2.0**-24).astype(np.float16)))
    w = _to_torch(_led_blocks(runs, blocksize, np.float16))
    x = _blocks(w.float().numpy().reshape(-1), blocksize)[0].astype(np.float64)
    assert set(FP4_MID32) <= set(x[x > 0]) and set(-FP4_MID32) <= set(x[x < 0])
    for quant_type in bnb.QUANT_TYPES:
        pb, sb = bnbF.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
        ph, sh = bnb.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)
        assert _stats(sh) == _stats(sb), quant_type
        _assert_bnb_codes(w, blocksize, quant_type, pb, ph)


def test_bnb_fp4_float32_96x512_blocksize64_seed0_value_between_cuda_literal_and_midpoint():
    """``torch.randn((96, 512))`` seeded 0, float32, blocks of 64: element 31981 scales to 0.58333325,
    above the CUDA kernel's literal 0.583333f and below the float32 midpoint 0.58333337 (and the exact
    7/12): bitsandbytes codes it 0.5 (code 5), the nearer entry, and so do we. Every other code is
    bitsandbytes' too (FP4's zeros: the documented sign bits), and so are the statistics, nested or
    not, from torch and from numpy."""
    bnbF = _bnb_functional()
    w = torch.randn((96, 512), generator=torch.Generator().manual_seed(0))
    x = _blocks(w.numpy().reshape(-1), 64)[0]
    assert x[31981] == np.float32(0.58333325) and FP4_CONST[5] < x[31981] < 7 / 12 < FP4_MID32[5]
    for nested in (False, True):
        pb, sb = bnbF.quantize_4bit(w, blocksize=64, quant_type="fp4", compress_statistics=nested)
        assert _codes(pb.numpy(), w.numel())[31981] == 5
        for src in (w, w.numpy()):
            ph, sh = bnb.quantize_4bit(src, blocksize=64, quant_type="fp4", compress_statistics=nested)
            assert _codes(np.asarray(ph), w.numel())[31981] == 5
            assert _stats(sh) == _stats(sb), (nested, type(src).__name__)
            _assert_bnb_codes(w, 64, "fp4", pb, ph)


def test_bnb_state_code_bytes_and_fp4_code8_positive_zero():
    """``state.code`` is bitsandbytes' byte for byte (FP4 code 8 is +0.0), for both types, nested or not,
    from torch and numpy; so code 8 dequantizes to +0.0 here as in bitsandbytes' Python path (an odd last
    dimension), while its CPU library (an even one) reads the sign bit and gives -0.0."""
    bnbF = _bnb_functional()
    w = torch.randn((4, 64), generator=torch.Generator().manual_seed(3))
    for quant_type in bnb.QUANT_TYPES:
        for nested in (False, True):
            _, sb = bnbF.quantize_4bit(w, quant_type=quant_type, compress_statistics=nested)
            for src in (w, w.numpy()):
                _, sh = bnb.quantize_4bit(src, quant_type=quant_type, compress_statistics=nested)
                assert np.asarray(_host_np(sh.code)).tobytes() == sb.code.numpy().tobytes()
    for shape in ((2, 63), (2, 64)):
        v = torch.full(shape, -1e-4)
        v.view(-1)[::32] = 1.0                          # each block's absmax; the rest code 8: a negative zero
        ph, sh = bnb.quantize_4bit(v, blocksize=32, quant_type="fp4")
        n = v.numel()
        eight = _codes(ph.numpy(), n) == 8
        assert eight.sum() == n - len(range(0, n, 32))
        ours = bnb.dequantize_4bit(ph, sh).reshape(-1)
        back = bnbF.QuantState.from_dict({k: t for k, t in bnb.state_dict(ph, sh).items() if k != "weight"},
                                         device="cpu")
        theirs = bnbF.dequantize_4bit(ph, back).reshape(-1)
        assert torch.equal(ours, theirs) and not torch.signbit(ours[torch.from_numpy(eight)]).any()
        assert torch.equal(torch.signbit(theirs), torch.from_numpy(eight) & (shape[-1] % 2 == 0))


def _host_np(t):
    return t.numpy() if isinstance(t, torch.Tensor) else t


@pytest.mark.parametrize("nested", [False, True], ids=["plain", "nested"])
@pytest.mark.parametrize("bad", ["inf", "minus_inf", "nan", "inf_and_nan"])
def test_nonfinite_weight_error_says_what_bitsandbytes_makes_of_it(bad, nested):
    """bitsandbytes quantizes a weight holding inf or NaN: the blocks holding them get absmax inf (NaN
    for a NaN) and dequantize to NaN/inf throughout (nested: the offset too, and the whole weight), the
    other blocks stay finite; but in bfloat16 its CPU library turns an all-ones NaN (a NaN in the
    partial last block) into 0.0. hipskinny refuses the weight, and its message says exactly that."""
    bnbF = _bnb_functional()
    values = {"inf": [np.inf], "minus_inf": [-np.inf], "nan": [np.nan], "inf_and_nan": [np.inf, np.nan]}[bad]
    where = [70, 290][: len(values)]            # 300 elements: blocks of 64, the last (256..299) partial
    held = sorted({i // 64 for i in where})
    for tdtype in (torch.float32, torch.float16, torch.bfloat16):
        for quant_type in bnb.QUANT_TYPES:
            w = torch.randn((3, 100), generator=torch.Generator().manual_seed(4)).to(tdtype)
            w.view(-1)[where] = torch.tensor(values, dtype=tdtype)
            _, plain = bnbF.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=False)
            pb, sb = bnbF.quantize_4bit(w, blocksize=64, quant_type=quant_type, compress_statistics=nested)
            out = bnbF.dequantize_4bit(pb, sb).reshape(-1).float()
            has_nan = bad in ("nan", "inf_and_nan")
            wrapped = tdtype == torch.bfloat16 and has_nan
            lost = ~torch.isfinite(out) | ((out == 0) if wrapped else False)       # NaN/inf (or the wrapped 0.0)
            blocks_lost = [bool(lost[b * 64: (b + 1) * 64].all()) for b in range(5)]       # every element
            blocks_finite = [bool(torch.isfinite(out[b * 64: (b + 1) * 64]).all()) for b in range(5)]
            if nested:
                assert all(blocks_lost)
            else:
                assert blocks_lost == [b in held for b in range(5)]
                assert all(blocks_finite[b] for b in range(5) if b not in held)
            kinds = {"NaN" if torch.isnan(plain.absmax[b]) else "inf" for b in held}
            assert all(not torch.isfinite(plain.absmax[b]) for b in held)
            word = kinds.pop() if len(kinds) == 1 else "inf (NaN in a block holding a NaN)"
            who = "bitsandbytes' CPU backend" if has_nan else "bitsandbytes"
            them = "it" if len(where) == 1 else "them"
            want = (f"w holds {len(where)} NaN or infinite value(s) (the first at flat index 70): 4-bit absmax "
                    f"quantization needs finite weights. {who} would quantize it with absmax {word}, and the "
                    f"{len(held)} block(s) of 64 holding {them} dequantize to NaN/inf")
            if nested:
                offset = float(sb.offset)
                assert not np.isfinite(offset)
                kind = "NaN" if np.isnan(offset) else "inf"
                want += (f"; with compress_statistics its offset (the mean absmax) is {kind} too, and the whole "
                         "weight dequantizes to NaN/inf")
            if wrapped:
                want += " (or to 0.0, where its CPU library's bfloat16 rounding wraps a NaN whose bits are all ones)"
            wn = w.view(torch.int16).numpy().view(BF16) if tdtype == torch.bfloat16 else w.numpy()
            for src in (w, wn):
                with pytest.raises(InputValueError) as exc:
                    bnb.quantize_4bit(src, blocksize=64, quant_type=quant_type, compress_statistics=nested)
                assert str(exc.value) == want, (tdtype, quant_type)
