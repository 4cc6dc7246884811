"""hipskinny.fp8: exact decoding, quantization to both e4m3 flavours at every granularity, and
FNUZ <-> OCP conversion, held against ml_dtypes, torch and brute-force oracles of their own."""

from __future__ import annotations

import math
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

from hipskinny import InputTypeError, InputValueError, fp8
from hipskinny.formats import fp8 as fp8_format

NP = {"ocp": np.dtype(ml_dtypes.float8_e4m3fn), "fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz)}
TORCH = {"ocp": torch.float8_e4m3fn, "fnuz": torch.float8_e4m3fnuz}
HALF_SUB = {"ocp": 2.0**-10, "fnuz": 2.0**-11}   # half the smallest subnormal: RNE's absolute error there
MAXBYTE = {"ocp": 0x7E, "fnuz": 0x7F}
BYTES = np.arange(256, dtype=np.uint8)
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.float32, np.float16, BF16, np.float64]


def _values(flavor):
    """The oracle's value of every byte: ml_dtypes' own cast."""
    return BYTES.view(NP[flavor]).astype(np.float64)


def _same(a, b):
    """Equal as float64 arrays, NaN where NaN, signed zeros included (a NaN's sign is not a value:
    ml_dtypes gives FNUZ's 0x80 a sign, torch does not)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    num = ~np.isnan(a)
    return (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(np.signbit(a[num]), np.signbit(b[num])))


def _rne(q, flavor):
    """Nearest fp8 byte to float64 ``q`` (|q| <= FMAX) by search over the byte values, ties to the
    even mantissa; independent of the module's rounding."""
    pos = _values(flavor)[: MAXBYTE[flavor] + 1]              # bytes 0.. increase in value
    mag = np.abs(q)
    hi = np.minimum(np.searchsorted(pos, mag), len(pos) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = mag - pos[lo], pos[hi] - mag
    byte = np.where(dhi < dlo, hi, np.where(dlo < dhi, lo, np.where(lo % 2 == 0, lo, hi)))
    byte = np.where(pos[hi] == mag, hi, byte).astype(np.uint8)
    neg = np.signbit(q) & ((byte != 0) | (flavor == "ocp"))
    byte = np.where(neg, byte | 0x80, byte)
    return np.where(np.isnan(q), 0x7F if flavor == "ocp" else 0x80, byte).astype(np.uint8)


def _regions(shape, granularity):
    """(scale index, index into the [R, K] view) for every region, by plain slicing."""
    rows, cols = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
    if granularity == "tensor":
        yield (), (slice(None), slice(None))
    elif granularity in ("channel", "token"):
        for r in range(rows):
            yield (r,), (r, slice(None))
    elif granularity == "group":
        for r in range(rows):
            for g in range(-(-cols // 128)):
                yield (r, g), (r, slice(128 * g, 128 * g + 128))
    else:
        for b in range(-(-rows // 128)):
            for g in range(-(-cols // 128)):
                yield (b, g), (slice(128 * b, 128 * b + 128), slice(128 * g, 128 * g + 128))


def _expected_scale(a64, granularity, flavor):
    rows, cols = (math.prod(a64.shape[:-1]), a64.shape[-1]) if a64.ndim else (1, 1)
    a2 = a64.reshape(rows, cols)
    out = {}
    for idx, sl in _regions(a64.shape, granularity):
        region = np.abs(a2[sl])
        region = region[np.isfinite(region)]
        amax = region.max() if region.size else 0.0
        out[idx] = np.float32(amax / fp8.FMAX[flavor]) if amax > 0 else np.float32(1.0)
    return out


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    # log-uniform magnitudes over 2**-12..2**12 times a per-row factor: normals and subnormals of fp8
    a = np.exp2(rng.uniform(-12, 12, shape)) * rng.choice([-1.0, 1.0], shape)
    a *= np.exp2(rng.integers(-3, 4, shape[:-1] + (1,))) if shape else 1.0
    return np.asarray(a).astype(dtype)


# ----------------------------------------------------------------------------------------------
# decode, flavor_of


@pytest.mark.parametrize("flavor", fp8.FLAVORS)
def test_decode_all_bytes_exact(flavor):
    want = _values(flavor)
    assert _same(fp8.decode(BYTES.view(NP[flavor])), want)
    assert _same(fp8.decode(BYTES, flavor), want)
    assert _same(fp8.decode(torch.from_numpy(BYTES).view(TORCH[flavor])), want)
    assert _same(fp8.decode(torch.from_numpy(BYTES), flavor=flavor), want)
    # torch's own widening agrees too (a second oracle)
    assert _same(torch.from_numpy(BYTES).view(TORCH[flavor]).to(torch.float64).numpy(), want)
    nan = np.flatnonzero(np.isnan(want))
    assert nan.tolist() == ([0x7F, 0xFF] if flavor == "ocp" else [0x80])
    if flavor == "ocp":       # OCP's NaNs keep their sign bit, as in ml_dtypes and torch
        assert np.signbit(fp8.decode(BYTES, "ocp")[nan]).tolist() == [False, True]
    assert np.nanmax(want) == fp8.FMAX[flavor] and np.isfinite(want[~np.isnan(want)]).all()


def test_decode_keeps_shape_and_returns_float64():
    a = BYTES.reshape(4, 8, 8).view(NP["ocp"])
    out = fp8.decode(a)
    assert out.dtype == np.float64 and out.shape == (4, 8, 8)
    assert fp8.decode(a[1, 2, 3]).shape == ()


def test_flavor_of():
    for fl in fp8.FLAVORS:
        assert fp8.flavor_of(np.zeros(3, NP[fl])) == fl
        assert fp8.flavor_of(torch.zeros(3, dtype=TORCH[fl])) == fl
        assert fp8.flavor_of(NP[fl]) == fl and fp8.flavor_of(TORCH[fl]) == fl
    assert fp8.flavor_of(ml_dtypes.float8_e4m3fn) == "ocp"
    for other in (np.zeros(3, np.uint8), np.zeros(3, ml_dtypes.float8_e5m2), torch.zeros(3), [1.0], None, 3.0):
        assert fp8.flavor_of(other) is None


# ----------------------------------------------------------------------------------------------
# quantize / dequantize


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("flavor", fp8.FLAVORS)
@pytest.mark.parametrize("granularity", fp8.GRANULARITIES)
def test_round_trip(granularity, flavor, dtype):
    shapes = [(200, 300), (128, 256), (1, 130), (129, 1)]
    if granularity in ("tensor", "token", "group"):     # activations [..., K]
        shapes += [(2, 3, 260), (300,)]
    for seed, shape in enumerate(shapes):
        a = _data(shape, dtype, seed)
        a64 = a.astype(np.float64)
        a8, scale = fp8.quantize(a, granularity=granularity, flavor=flavor)
        assert a8.dtype == NP[flavor] and a8.shape == a.shape and scale.dtype == np.float32
        rows, cols = (math.prod(shape[:-1]), shape[-1])
        expected_shape = {"tensor": (), "channel": (rows,), "token": (rows,), "group": (rows, -(-cols // 128)),
                          "block": (-(-rows // 128), -(-cols // 128))}[granularity]
        assert scale.shape == expected_shape
        # the scale of each region from an independent slicing of the input
        want = _expected_scale(a64, granularity, flavor)
        assert all(scale[i] == s for i, s in want.items()), (shape, granularity)
        # every byte is the nearest-even fp8 of a / scale (computed here in float64)
        s_el = np.zeros((rows, cols))
        for idx, sl in _regions(shape, granularity):
            s_el[sl] = scale[idx]
        q = np.clip(a64.reshape(rows, cols) / s_el, -fp8.FMAX[flavor], fp8.FMAX[flavor])
        assert np.array_equal(a8.view(np.uint8).reshape(rows, cols), _rne(q, flavor)), (shape, granularity)
        # dequantize (inferred and explicit) is within the rounding bound
        deq = fp8.dequantize(a8, scale)
        assert deq.dtype == np.float32 and deq.shape == shape
        assert np.array_equal(deq, fp8.dequantize(a8, scale, granularity=granularity))
        err = np.abs(deq.astype(np.float64) - a64).reshape(rows, cols)
        bound = (2.0**-4 + 2.0**-20) * np.abs(a64).reshape(rows, cols) + s_el * HALF_SUB[flavor] * (1 + 2.0**-20)
        assert (err <= bound).all(), (shape, granularity, float((err / bound).max()))
        if shape == (200, 300):     # ... and the bound is reached: it is the right one, not a loose one
            assert (err / bound).max() > 0.9


@pytest.mark.parametrize("flavor", fp8.FLAVORS)
def test_rounding_is_nearest_even_from_float64(flavor):
    """Midpoints between neighbours round to the even mantissa, and a hair off them to the nearer
    neighbour -- also where float64 -> float32 -> fp8 (an ml_dtypes cast) would round twice."""
    fmax = fp8.FMAX[flavor]
    pos = _values(flavor)[: MAXBYTE[flavor] + 1]
    mids = (pos[:-1] + pos[1:]) / 2
    for offset, pick in ((0.0, None), (2.0**-40, 1), (-(2.0**-40), 0)):
        q = np.concatenate([[fmax], mids * (1 + offset), -mids * (1 + offset)])  # fmax first: scale 1
        a8, scale = fp8.quantize(q, granularity="tensor", flavor=flavor)
        assert scale == 1.0
        got = a8.view(np.uint8)[1 : 1 + len(mids)]
        if pick is None:
            lo = np.arange(len(mids))
            assert np.array_equal(got, np.where(lo % 2 == 0, lo, lo + 1))
        else:
            assert np.array_equal(got, np.arange(len(mids)) + pick)
        assert np.array_equal(a8.view(np.uint8), _rne(q, flavor))
    # the double rounding the module avoids: 1.0625 + 2**-40 is nearer 1.125 than 1.0
    x = np.array([fmax, 1.0625 + 2.0**-40])
    assert fp8.decode(fp8.quantize(x, granularity="tensor", flavor=flavor)[0])[1] == 1.125
    assert x.astype(np.float32).astype(NP[flavor]).astype(np.float64)[1] == 1.0   # via float32: a tie, to even


@pytest.mark.parametrize("flavor", fp8.FLAVORS)
def test_saturation_inf_nan(flavor):
    fmax = fp8.FMAX[flavor]
    a = np.array([1.0, -2.0, 3.0, np.inf, -np.inf, np.nan, -np.nan, 0.5], np.float32)
    a8, scale = fp8.quantize(a, granularity="tensor", flavor=flavor)
    assert scale == np.float32(3.0 / fmax)
    b = a8.view(np.uint8)
    assert b[2] == b[3] == MAXBYTE[flavor] and b[4] == MAXBYTE[flavor] | 0x80
    assert np.isnan(fp8.decode(a8)[5:7]).all() and not np.isnan(fp8.decode(a8)[[0, 1, 2, 3, 4, 7]]).any()
    deq = fp8.dequantize(a8, scale)
    assert deq[3] == deq[2] == np.float32(fmax * np.float64(scale)) and deq[4] == -deq[3]
    # a quotient just over FMAX (the float32 scale rounded down) saturates instead of becoming NaN
    rng = np.random.default_rng(1)
    amax = next(float(x) for x in rng.uniform(1, 2, 1000).astype(np.float32)
                if float(np.float32(x / fmax)) * fmax < float(x))
    a8, scale = fp8.quantize(np.array([amax, -amax], np.float32), granularity="tensor", flavor=flavor)
    assert amax / float(scale) > fmax and np.array_equal(fp8.decode(a8), [fmax, -fmax])
    # magnitudes beyond the float32 scale range: the scale is clamped, the values saturate
    a8, scale = fp8.quantize(np.array([1e300, -1e300, 1.0]), granularity="tensor", flavor=flavor)
    assert scale == np.finfo(np.float32).max and np.array_equal(fp8.decode(a8), [fmax, -fmax, 0.0])
    # ... and below it: the scale is the smallest float32, never 0
    a8, scale = fp8.quantize(np.array([1e-44], np.float32), granularity="tensor", flavor=flavor)
    assert scale == np.finfo(np.float32).smallest_subnormal and fp8.decode(a8)[0] == 7.0
    # no NaN from overflow anywhere in a wide-range quantization
    a = _data((64, 512), np.float32, 7) * np.float32(1e4)
    for g in fp8.GRANULARITIES:
        a8, _ = fp8.quantize(a, granularity=g, flavor=flavor)
        v = fp8.decode(a8)
        assert not np.isnan(v).any() and np.abs(v).max() == fmax


@pytest.mark.parametrize("flavor", fp8.FLAVORS)
def test_regions_without_finite_values(flavor):
    for region in ([np.nan, np.nan], [np.inf, -np.inf], [0.0, 0.0]):
        a8, scale = fp8.quantize(np.array(region), granularity="tensor", flavor=flavor)
        assert scale == 1.0
        want = np.clip(np.array(region), -fp8.FMAX[flavor], fp8.FMAX[flavor])
        assert _same(fp8.decode(a8), np.where(want == 0, 0.0, want))


@pytest.mark.parametrize("flavor", fp8.FLAVORS)
def test_zero_regions_and_signed_zero(flavor):
    a = _data((300, 260), np.float32, 3)
    a[5] = 0
    a[128:256, 128:256] = 0
    _, s = fp8.quantize(a, granularity="channel", flavor=flavor)
    assert s[5] == 1.0 and (s[np.arange(300) != 5] != 1.0).all()
    a8, s = fp8.quantize(a, granularity="block", flavor=flavor)
    assert s[1, 1] == 1.0 and (np.delete(s.ravel(), 4) != 1.0).all()
    assert not fp8.dequantize(a8, s)[128:256, 128:256].any()
    a8, s = fp8.quantize(np.array([-0.0, 0.0, -1.0]), granularity="tensor", flavor=flavor)
    assert a8.view(np.uint8)[0] == (0x80 if flavor == "ocp" else 0x00)
    assert np.signbit(fp8.dequantize(a8, s)[0]) == (flavor == "ocp")


@pytest.mark.parametrize("granularity", ["channel", "group", "block", "tensor"])
def test_nan_stays_in_its_element(granularity):
    a = _data((200, 300), np.float32, 4)
    a[3, 5] = 1e6                                       # would have set the region's amax
    clean = a.copy()
    clean[3, 5] = 0
    a[3, 5] = np.nan
    a8, s = fp8.quantize(a, granularity=granularity)
    c8, cs = fp8.quantize(clean, granularity=granularity)
    assert np.array_equal(s, cs)
    diff = a8.view(np.uint8) != c8.view(np.uint8)
    assert diff.sum() == 1 and diff[3, 5] and np.isnan(fp8.decode(a8)[3, 5])


def test_row_slices_change_nothing(monkeypatch):
    """Large arrays are processed in slices of 128-row multiples: the slicing is invisible."""
    a = _data((700, 300), np.float32, 10)
    a[300, 7] = np.nan
    whole = {}
    for g in fp8.GRANULARITIES:
        a8, s = fp8.quantize(a, granularity=g, flavor="fnuz")
        whole[g] = (a8, s, fp8.dequantize(a8, s), *fp8.convert(a8, s, "ocp"))
    monkeypatch.setattr(fp8_format, "_CHUNK", 1)            # one 128-row slice at a time
    for g in fp8.GRANULARITIES:
        a8, s = fp8.quantize(a, granularity=g, flavor="fnuz")
        got = (a8, s, fp8.dequantize(a8, s), *fp8.convert(a8, s, "ocp"))
        assert [(x.dtype, x.shape, x.tobytes()) for x in got] == [(y.dtype, y.shape, y.tobytes()) for y in whole[g]], g


def test_scalar_and_empty_inputs():
    a8, s = fp8.quantize(np.float32(3.0), granularity="tensor")
    assert a8.shape == () and s.shape == () and fp8.dequantize(a8, s) == 3.0
    for g in fp8.GRANULARITIES:
        for shape in ((0, 300), (5, 0)):
            a8, s = fp8.quantize(np.zeros(shape, np.float32), granularity=g, flavor="fnuz")
            assert a8.shape == shape and (s == 1).all()
            assert fp8.dequantize(a8, s, granularity=g).shape == shape


def test_scale_nan_and_zero_propagate():
    a8 = np.array([[1.0, -2.0], [0.5, 0.0]]).astype(NP["ocp"])
    out = fp8.dequantize(a8, np.array([np.nan, 0.0], np.float32))
    assert np.isnan(out[0]).all() and _same(out[1], [0.0, 0.0])


# ----------------------------------------------------------------------------------------------
# scale shapes


def test_granularity_of():
    g = fp8.granularity_of
    assert g(300, 260, (), "w") == g(300, 260, (1,), "x") == "tensor"
    assert g(300, 260, (300,), "w") == "channel" and g(300, 260, (300,), "x") == "token"
    assert g(300, 260, (300,)) == "channel"
    assert g(300, 260, (3, 3), "w") == g(300, 260, (3, 3)) == "block"
    assert g(300, 260, (300, 3), "x") == g(300, 260, (300, 3)) == "group"
    assert g(300, 260, torch.Size([300, 3])) == "group"
    # one row: per-row is per-tensor and group is block; the role names the one the op expects
    assert g(1, 260, (1,), "x") == "tensor"
    assert g(1, 260, (1, 3), "w") == "block" and g(1, 260, (1, 3), "x") == "group" and g(1, 260, (1, 3)) == "group"
    # rows <= 128 otherwise: block [1, G] and group [M, G] differ
    assert g(100, 260, (1, 3)) == "block" and g(100, 260, (100, 3)) == "group"
    with pytest.raises(InputValueError, match=r"w_scale of shape \(300, 3\) matches no scale granularity of a "
                       r"\[300, 260\] weight; accepted: \(\) or \(1,\) per tensor, \(300,\) per channel, "
                       r"\(3, 3\) per 128x128 block$"):
        g(300, 260, (300, 3), "w", name="w_scale")
    with pytest.raises(InputValueError, match=r"\(7, 3\) per row and group of 128 columns \(a per-row scale "
                       r"stored as \(7, 1\) must be reshaped to \(7,\)\)$"):
        g(7, 260, (7, 1), "x")
    with pytest.raises(InputValueError, match="unknown role 'y'"):
        g(7, 260, (7,), "y")


def test_dequantize_scale_shapes():
    a8, _ = fp8.quantize(_data((300, 260), np.float32, 5), granularity="tensor")
    with pytest.raises(InputValueError, match=r"scale of shape \(260,\) matches no scale granularity of a "
                       r"\[300, 260\] operand; accepted: \(\) or \(1,\) per tensor, \(300,\) per channel, "
                       r"\(300, 3\) per row and group of 128 columns, \(3, 3\) per 128x128 block"):
        fp8.dequantize(a8, np.ones(260, np.float32))
    with pytest.raises(InputValueError, match=r"granularity 'group' needs a scale of shape \(300, 3\) for a8 of "
                       r"shape \(300, 260\); got \(3, 3\)"):
        fp8.dequantize(a8, np.ones((3, 3), np.float32), granularity="group")
    assert fp8.dequantize(a8, np.ones(1, np.float32), granularity="tensor").shape == (300, 260)
    a3 = a8.reshape(2, 150, 260)
    assert np.array_equal(fp8.dequantize(a3, np.ones((300, 3))), fp8.decode(a3).astype(np.float32))
    with pytest.raises(InputValueError, match=r"\[300, 260\] activation; accepted: .*\(300,\) per token"):
        fp8.dequantize(a3, np.ones((3, 3), np.float32))
    with pytest.raises(InputValueError, match=r"granularity 'block' needs a 2-D weight \[M, K\]; got shape"):
        fp8.dequantize(a3, np.ones((3, 3), np.float32), granularity="block")
    with pytest.raises(InputValueError, match=r"0-d a8: accepted \(\) or \(1,\)"):
        fp8.dequantize(a8[0, 0], np.ones(2))


# ----------------------------------------------------------------------------------------------
# convert


def _deq(a8, s):
    return fp8.decode(a8) * np.float64(s)


def test_convert_ocp_to_fnuz_every_byte_exact():
    for scale in (np.float32(0.75), 0.75, np.array(0.75, np.float32), np.array([0.75], np.float64)):
        b8, s2 = fp8.convert(BYTES.view(NP["ocp"]), scale, "fnuz")
        assert b8.dtype == NP["fnuz"] and type(s2) is type(scale) and np.asarray(s2).dtype == np.asarray(scale).dtype
        assert np.asarray(s2) == 1.5
        want = _deq(BYTES.view(NP["ocp"]), 0.75)
        assert _same(_deq(b8, 1.5), np.where(want == 0, 0.0, want))   # -0 has no FNUZ encoding
        expect = BYTES.copy()
        expect[[0x7F, 0xFF]] = 0x80
        expect[0x80] = 0
        assert np.array_equal(b8.view(np.uint8), expect)


def test_convert_fnuz_to_ocp_every_byte():
    b8, s = fp8.convert(BYTES.view(NP["fnuz"]), np.float32(0.75), to="ocp")
    assert b8.dtype == NP["ocp"] and s == np.float32(0.75)     # holds +-240: scale kept, values re-encoded
    # the bytes are ml_dtypes' own FNUZ -> OCP cast (nearest even), NaN as 0x7F
    oracle = BYTES.view(NP["fnuz"]).astype(NP["ocp"]).view(np.uint8).copy()
    oracle[0x80] = 0x7F
    assert np.array_equal(b8.view(np.uint8), oracle)
    got, want = _deq(b8, s), _deq(BYTES.view(NP["fnuz"]), 0.75)
    inexact = np.flatnonzero(~((got == want) | (np.isnan(got) & np.isnan(want))))
    k = np.array([1, 3, 5, 7, 9, 11, 13, 15])
    assert sorted(inexact.tolist()) == sorted(k.tolist() + (k | 0x80).tolist())
    assert np.array_equal(np.abs(want[inexact] / 0.75), np.concatenate([k, k]) * 2.0**-10)
    assert (np.abs(got[inexact] - want[inexact]) == 2.0**-10 * 0.75).all()
    assert np.isnan(got[0x80]) and np.isnan(got).sum() == 1


def test_no_power_of_two_rescale_is_exact_for_every_fnuz_byte():
    """Why FNUZ -> OCP cannot always keep every value: 240 needs a factor >= 1, 2**-10 one <= 1/2."""
    fnuz = _values("fnuz")
    fnuz = fnuz[~np.isnan(fnuz)]
    ocp = set(_values("ocp")[~np.isnan(_values("ocp"))].tolist())
    for k in range(-12, 13):
        assert not all(v * 2.0**k in ocp for v in fnuz), k


def test_convert_fnuz_to_ocp_per_region():
    """A region without +-240 keeps its bits with the scale halved (exact); one with +-240 its scale."""
    rest = np.setdiff1d(BYTES, [0x7F, 0xFF])
    a8 = np.stack([BYTES, np.resize(rest, 256)]).view(NP["fnuz"])
    scale = np.array([0.5, 3.0], np.float32)
    b8, s = fp8.convert(a8, scale, "ocp")
    assert s.dtype == np.float32 and np.array_equal(s, [0.5, 1.5])
    assert np.array_equal(b8.view(np.uint8)[1], np.where(a8.view(np.uint8)[1] == 0x80, 0x7F, a8.view(np.uint8)[1]))
    assert _same(fp8.dequantize(b8, s)[1], fp8.dequantize(a8, scale)[1])
    # block and group scales are found by shape as in dequantize
    rng = np.random.default_rng(6)
    raw = rng.integers(0, 256, (300, 260), dtype=np.uint8)
    raw[raw == 0x80] = 0
    raw[(raw & 0x7F) == 0x7F] = 0x7E
    raw[((raw & 0x7F) < 16) & ((raw & 1) == 1)] = 0    # and none of the 16 values OCP cannot hold
    raw[0, 0] = 0x7F                                   # only block (0, 0) / group (0, 0) holds 240
    for gran, shape in (("block", (3, 3)), ("group", (300, 3))):
        scale = rng.uniform(0.5, 2, shape).astype(np.float32)
        b8, s = fp8.convert(raw.view(NP["fnuz"]), scale, "ocp")
        factor = np.full(shape, 0.5)
        factor[0, 0] = 1.0
        assert np.array_equal(s, scale * factor), gran
        assert np.array_equal(fp8.dequantize(b8, s), fp8.dequantize(raw.view(NP["fnuz"]), scale))


def test_convert_round_trip_ocp_fnuz_ocp_keeps_bits():
    a8, s = fp8.convert(*fp8.convert(BYTES.view(NP["ocp"]), np.float32(2.0), "fnuz"), "ocp")
    expect = BYTES.copy()
    expect[0xFF] = 0x7F
    expect[0x80] = 0
    assert np.array_equal(a8.view(np.uint8), expect) and s == 2.0


def test_convert_kinds():
    same = BYTES.view(NP["ocp"])
    assert fp8.convert(same, 1.0, "ocp") == (same, 1.0)
    u8, s = fp8.convert(BYTES, 1.0, "fnuz", flavor="ocp")
    assert u8.dtype == np.uint8 and s == 2.0
    t = torch.from_numpy(BYTES).view(torch.float8_e4m3fnuz)
    ts = torch.tensor([0.25], dtype=torch.float64)
    t8, ts2 = fp8.convert(t, ts, "ocp")
    assert t8.dtype == torch.float8_e4m3fn and ts2.dtype == torch.float64 and ts2.shape == (1,)
    n8, ns = fp8.convert(BYTES.view(NP["fnuz"]), np.array([0.25]), "ocp")
    assert np.array_equal(t8.view(torch.uint8).numpy(), n8.view(np.uint8)) and ts2.item() == ns[0]
    with pytest.raises(InputValueError, match=r"unknown target flavor 'e4m3fn': expected 'ocp' \(e4m3fn\)"):
        fp8.convert(same, 1.0, "e4m3fn")


# ----------------------------------------------------------------------------------------------
# torch


@pytest.mark.parametrize("tdtype", [torch.float32, torch.bfloat16, torch.float16])
def test_torch_matches_numpy(tdtype):
    t = torch.from_numpy(_data((200, 300), np.float32, 8)).to(tdtype).requires_grad_(True)
    a = t.detach().to(torch.float64).numpy()
    for g in fp8.GRANULARITIES:
        for fl in fp8.FLAVORS:
            t8, ts = fp8.quantize(t, granularity=g, flavor=fl)
            n8, ns = fp8.quantize(a, granularity=g, flavor=fl)
            assert t8.dtype == TORCH[fl] and ts.dtype == torch.float32 and t8.device == t.device
            assert np.array_equal(t8.view(torch.uint8).numpy(), n8.view(np.uint8)) and np.array_equal(ts.numpy(), ns)
            td = fp8.dequantize(t8, ts)
            assert td.dtype == torch.float32 and np.array_equal(td.numpy(), fp8.dequantize(n8, ns))
            # what a torch engine computes: widen, multiply in fp32
            if g in ("tensor", "channel"):
                native = t8.float() * (ts if g == "tensor" else ts[:, None])
                assert torch.equal(td, native)


def test_torch_scale_with_numpy_a8_and_back():
    n8, ns = fp8.quantize(_data((4, 300), np.float32, 9), granularity="group", flavor="fnuz")
    assert np.array_equal(fp8.dequantize(n8, torch.from_numpy(ns)), fp8.dequantize(n8, ns))
    t8 = torch.from_numpy(n8.view(np.uint8))
    assert np.array_equal(fp8.dequantize(t8, ns, flavor="fnuz").numpy(), fp8.dequantize(n8, ns))


def test_import_does_not_import_torch():
    code = "import sys, hipskinny.fp8 as f, numpy as np; f.quantize(np.ones(3), granularity='tensor'); " \
           "assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs():
    a = np.ones((4, 8), np.float32)
    with pytest.raises(InputValueError, match=r"unknown granularity 'row': expected one of 'tensor', 'channel', "
                       r"'token', 'group', 'block'"):
        fp8.quantize(a, granularity="row")
    with pytest.raises(InputValueError, match=r"unknown flavor 'e4m3': expected 'ocp' \(e4m3fn\) or 'fnuz'"):
        fp8.quantize(a, granularity="tensor", flavor="e4m3")
    for bad in (np.ones(3, np.int32), np.ones(3, bool), np.ones(3, np.complex64), np.ones(3, NP["ocp"])):
        with pytest.raises(InputTypeError, match="quantize takes float16, bfloat16, float32 or float64 arrays"):
            fp8.quantize(bad, granularity="tensor")
    with pytest.raises(InputTypeError, match="tensors; got torch.int64"):
        fp8.quantize(torch.ones(3, dtype=torch.int64), granularity="tensor")
    with pytest.raises(TypeError, match="numpy array or torch tensor .* got builtins.list"):
        fp8.quantize([1.0, 2.0], granularity="tensor")
    for g in ("channel", "block"):
        with pytest.raises(ValueError, match=rf"granularity '{g}' needs a 2-D weight \[M, K\]; got shape \(2, 2, 2\)"):
            fp8.quantize(np.ones((2, 2, 2)), granularity=g)
    with pytest.raises(InputValueError, match=r"granularity 'token' needs activations \[\.\.\., K\]; got shape \(\)"):
        fp8.quantize(np.float32(1), granularity="token")
    with pytest.raises(InputValueError, match="uint8 bytes: say which flavour"):
        fp8.decode(BYTES)
    with pytest.raises(InputValueError, match=r"a8 is float8_e4m3fnuz \('fnuz'\) but flavor='ocp'.*convert"):
        fp8.decode(BYTES.view(NP["fnuz"]), "ocp")
    with pytest.raises(InputTypeError, match="float8_e4m3fn/float8_e4m3fnuz array, or uint8 with flavor=; got float32"):
        fp8.dequantize(a, 1.0)
    with pytest.raises(InputTypeError, match="tensor, or uint8 with flavor=; got torch.float8_e5m2"):
        fp8.decode(torch.zeros(3, dtype=torch.float8_e5m2))
    with pytest.raises(InputTypeError, match="a8 must be a numpy array or torch tensor"):
        fp8.decode(b"\x00\x01", "ocp")
    a8 = a.astype(NP["ocp"])
    with pytest.raises(InputTypeError, match="scale must be a float16, bfloat16, float32 or float64 array; got int64"):
        fp8.dequantize(a8, np.ones(4, np.int64))
    with pytest.raises(InputTypeError, match="scale must be a float tensor"):
        fp8.dequantize(a8, torch.ones(4, dtype=torch.int32))
    with pytest.raises(InputTypeError, match="scale must be a numpy array, torch tensor or Python number"):
        fp8.dequantize(a8, "1.0")
    with pytest.raises(InputValueError, match="unknown granularity 'rows'"):
        fp8.dequantize(a8, np.ones(4), granularity="rows")
