"""hipskinny.fp8_linear (N = 1..128) on the emulator for every shipped arch, against exact math.

Tolerance (derived, not tuned). The kernel sums exact products (FP8 widened to 16-bit, times
16-bit or widened FP8 activations: exact in fp32) in fp32, K + K/16 + 4 roundings of u = 2**-24
at most (the per-chunk scale multiply-adds in block mode, the scale and bias steps), so
|s - exact| <= (K + K/16 + 4) * u * S with S = sum_k |x w s| + |bias|; then one rounding to the
output type: half an ulp of |exact| + that error.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from benchmarks.choices import override
from hipskinny import InputTypeError, InputValueError, fp8
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import _linear
from hipskinny.ops import fp8_linear as op
from hipskinny.ops.fp8_linear import fp8_linear_exact

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
NATIVE = {"gfx942": "fnuz", "gfx950": "ocp", "gfx1201": "ocp", "gfx1100": "ocp", "gfx1151": "fnuz"}
PAIRED = {"tensor": "tensor", "channel": "token", "block": "group"}


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


def _ulp(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    mant, emin = (10, -14) if dtype == F16 else (7, -126)
    e = np.floor(np.log2(np.maximum(np.abs(v), 2.0**emin)))
    return 2.0 ** (e - mant)


def assert_bound(y, x, w, w_scale, x_scale=None, bias=None):
    """|y - exact| within the accumulation bound of the module docstring, row by row."""
    exact = fp8_linear_exact(x, w, w_scale, x_scale, bias).reshape(-1, w.shape[0])
    abs_terms = fp8_linear_exact(_abs(x), _abs(w), np.abs(np.asarray(w_scale)),
                                 None if x_scale is None else np.abs(np.asarray(x_scale)),
                                 None if bias is None else np.abs(np.asarray(bias).astype(np.float64)))
    k = w.shape[1]
    err = (k + k / 16 + 4) * 2.0**-24 * abs_terms.reshape(exact.shape)
    yd = np.asarray(y).astype(np.float64).reshape(exact.shape)
    tol = err + 0.5 * _ulp(np.abs(exact) + err, np.asarray(y).dtype)
    bad = ~(np.abs(yd - exact) <= tol)
    assert not bad.any(), f"{bad.sum()} outputs off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs {exact[bad][0]}"


def _abs(a):
    a = np.asarray(a)
    flavor = fp8.flavor_of(a)
    if flavor is None:
        return np.abs(a.astype(np.float64))
    raw = a.view(np.uint8)
    if flavor == "ocp":
        mag = raw & 0x7F
    else:                   # negative = sign bit set, except 0x80 (NaN, kept)
        mag = np.where(((raw & 0x80) != 0) & (raw != 0x80), raw & 0x7F, raw)
    return mag.astype(np.uint8).view(a.dtype)


def _data(n, m, k, seed, x_dtype=F16):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.5, 2.0, (m, 1)).astype(np.float32)
    x = rng.standard_normal((n, k)).astype(x_dtype)
    return x, w


# (N, M, K, CUs): K not a multiple of 128 (block groups), K % 16 != 0 (padded on the host),
# M not a multiple of 128 and above it (two row blocks), several tiles per wave; split-K with
# several shards (N = 20) and with 3 of 4 token tiles in use (N = 40).
CASES = [(1, 40, 272, 2), (3, 150, 208, 3), (8, 33, 100, 2), (20, 130, 400, 2), (40, 70, 264, 3)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("gran", ["tensor", "channel", "block"])
def test_w8a16_every_granularity_and_flavour(arch, gran):
    for i, (n, m, k, cus) in enumerate(CASES):
        for flavor in fp8.FLAVORS:
            x_dtype = (F16, BF16)[i % 2]
            x, w = _data(n, m, k, seed=i, x_dtype=x_dtype)
            w8, ws = fp8.quantize(w, granularity=gran, flavor=flavor)
            with hipskinny.on_device(_dev(arch, cus)):
                y = hipskinny.fp8_linear(x, w8, ws)
            assert y.shape == (n, m) and y.dtype == x_dtype
            assert_bound(y, x, w8, ws)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("gran", ["tensor", "channel", "block"])
def test_w8a8_every_granularity(arch, gran):
    flavor = NATIVE[arch]
    for i, (n, m, k, cus) in enumerate(CASES):
        x, w = _data(n, m, k, seed=10 + i, x_dtype=np.float32)
        w8, ws = fp8.quantize(w, granularity=gran, flavor=flavor)
        x8, xs = fp8.quantize(x, granularity=PAIRED[gran], flavor=flavor)
        out_dtype = ("bfloat16", "float16")[i % 2]
        bias = np.random.default_rng(i).standard_normal(m).astype(out_dtype if out_dtype == "float16" else BF16)
        with hipskinny.on_device(_dev(arch, cus)):
            y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, bias=bias, out_dtype=out_dtype)
        assert y.dtype == np.dtype(BF16 if out_dtype == "bfloat16" else F16)
        assert_bound(y, x8, w8, ws, xs, bias)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_small_n_on_the_splitk_kernel(arch):
    """N = 2..8 take the split-K kernel where `_linear.small_n_splitk` says (large calls on the CDNA
    parts; forced here on every arch, several shards, lanes without a token skipping their
    partials): W8A16 per channel and W8A8 with block scales, the same bound."""
    with override(_linear, "SMALL_N_SPLITK_WORK", "always"):
        for i, (n, m, k, gran) in enumerate([(2, 150, 1040, "channel"), (6, 40, 1024, "block")]):
            flavor = NATIVE[arch]
            x, w = _data(n, m, k, seed=60 + i, x_dtype=F16 if gran == "channel" else np.float32)
            w8, ws = fp8.quantize(w, granularity=gran, flavor=flavor)
            x8, xs = (x, None) if gran == "channel" else fp8.quantize(x, granularity="group", flavor=flavor)
            dev = _dev(arch, 2)
            with hipskinny.on_device(dev):
                y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs)
                assert dev.launches[-1].kernel.startswith("fp8_linear_splitk_"), dev.launches[-1].kernel
            assert_bound(y, x8, w8, ws, xs)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("slices", [1, 2, 4])
def test_every_slice_count(arch, slices, keep_shards, force_slices):
    """The split-K kernels with 1, 2 and 4 slices per unit (where built: 2 and 4 at one and two
    token tiles, 2 at four) at N of one, two and four tiles: several row blocks of 128 / slices with
    a tail, several shards of an odd number of groups (a slice without a group at the end), W8A16 per
    channel and W8A8 with block scales (a unit's rows inside one 128-row scale block)."""
    force_slices(slices)
    flavor = NATIVE[arch]
    for i, (n, m, k, gran) in enumerate([(12, 100, 1680, "channel"), (40, 200, 1168, "block"),
                                         (24, 136, 1680, "channel")]):
        x, w = _data(n, m, k, seed=40 + i, x_dtype=F16 if gran == "channel" else np.float32)
        w8, ws = fp8.quantize(w, granularity=gran, flavor=flavor)
        x8, xs = (x, None) if gran == "channel" else fp8.quantize(x, granularity="group", flavor=flavor)
        dev = _dev(arch, 3)
        with hipskinny.on_device(dev):
            y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs)
            info = op.plan_info(dev, x8.dtype, n, m, k, w_flavor=flavor, block=gran == "block", x_scaled=xs is not None)
        assert dev.launches[-1].kernel == info["kernel"] and info["shards"] > 1
        built = (1, 2, 4) if info["token_tiles"] <= 2 else (1, 2)
        assert info["slices"] == (slices if slices in built else 1), info
        assert_bound(y, x8, w8, ws, xs)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("n", [3, 24])
def test_nan_encodings_poison_only_their_rows_and_tokens(arch, n):
    m, k = 20, 160
    for flavor, nan in (("ocp", 0x7F), ("fnuz", 0x80)):
        x, w = _data(n, m, k, seed=3, x_dtype=np.float32)
        w8, ws = fp8.quantize(w, granularity="channel", flavor=flavor)
        w8.view(np.uint8)[5, 17] = nan
        if flavor == "ocp":
            w8.view(np.uint8)[9, 150] = 0xFF
        with hipskinny.on_device(_dev(arch, 2)):
            y = hipskinny.fp8_linear(x.astype(F16), w8, ws)
            nan_rows = [5, 9] if flavor == "ocp" else [5]
            assert np.isnan(y[:, nan_rows].astype(np.float32)).all()
            keep = np.setdiff1d(np.arange(m), nan_rows)
            assert not np.isnan(y[:, keep].astype(np.float32)).any()
            if flavor == NATIVE[arch]:          # W8A8: a NaN activation poisons its token only
                x8, xs = fp8.quantize(x, granularity="token", flavor=flavor)
                x8.view(np.uint8)[1, 3] = nan
                w8.view(np.uint8)[5, 17] = 0
                if flavor == "ocp":
                    w8.view(np.uint8)[9, 150] = 0
                y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs)
                assert np.isnan(y[1].astype(np.float32)).all()
                assert not np.isnan(y[[0, 2]].astype(np.float32)).any()
                x8.view(np.uint8)[1, 3] = 0             # ... and a NaN weight its feature only
                w8.view(np.uint8)[7, 100] = nan
                y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs).astype(np.float32)
                assert np.isnan(y[:, 7]).all() and not np.isnan(np.delete(y, 7, axis=1)).any()


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("n", [4, 24])
def test_bitwise_reproducible_across_cu_counts_and_schedules(arch, n, keep_shards):
    """W8A16 with block scales, and W8A8 with block scales (on the FP8 instructions where the arch
    has them): bitwise equal across calls, CU counts and shuffled schedules."""
    m, k = 140, 640
    x, w = _data(n, m, k, seed=7, x_dtype=BF16)
    w8, ws = fp8.quantize(w, granularity="block", flavor=NATIVE[arch])
    x8, xs = fp8.quantize(x.astype(np.float32), granularity="group", flavor=NATIVE[arch])
    for args, kw in (((x, w8, ws), {}), ((x8, w8, ws), {"x_scale": xs})):
        outs = []
        for cus, calls in ((1, 2), (3, 1)):                 # across calls, then across CU counts
            dev = EmulatedDevice(arch, cus, seed=cus)       # seeded shuffled wave schedule
            with hipskinny.on_device(dev):
                outs += [hipskinny.fp8_linear(*args, **kw).view(np.uint16) for _ in range(calls)]
                if n > op.MAX_N:
                    assert op.plan_info(dev, args[0].dtype, n, m, k, w_flavor=NATIVE[arch], block=True,
                                        x_scaled=bool(kw))["shards"] > 1
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_streamed_activations(arch):
    """N = 8 with K past the LDS capacity: x streamed through LDS in K-chunks, block scales
    (W8A8; staged as bytes on the FP8 instructions, as 16-bit when widened)."""
    from hipskinny.arch import ARCHS

    native = arch in op.FP8_HARDWARE
    k = (ARCHS[arch].lds_per_workgroup // (8 if native else 16) // 128 + 1) * 128 + 64
    dev = _dev(arch, 2)
    x, w = _data(8, 3, k, seed=1, x_dtype=np.float32)
    w8, ws = fp8.quantize(w, granularity="block", flavor=NATIVE[arch])
    x8, xs = fp8.quantize(x, granularity="group", flavor=NATIVE[arch])
    with hipskinny.on_device(dev):
        y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs)
    assert_bound(y, x8, w8, ws, xs)
    info = op.plan_info(dev, x8.dtype, 8, 3, k, w_flavor=NATIVE[arch], block=True, x_scaled=True)
    assert info["kernel"].startswith("fp8_linear_fp8_" if native else "fp8_linear_f16_")
    assert not info["staged_once"] and info["lds_bytes"] <= ARCHS[arch].lds_per_workgroup


@pytest.mark.parametrize("arch", op.FP8_HARDWARE)
@pytest.mark.parametrize("gran", ["channel", "block"])
def test_native_and_widened_paths_agree_with_the_reference(arch, gran):
    """W8A8 on the FP8 instructions (MFMA / dot4 / WMMA) and through widening, on one arch: both
    within the same bound of the exact result, for the lane-split and the split-K kernels."""
    flavor = NATIVE[arch]
    for i, (n, m, k, cus) in enumerate([(2, 70, 400, 2), (5, 20, 1040, 3), (24, 130, 272, 2)]):
        x, w = _data(n, m, k, seed=20 + i, x_dtype=np.float32)
        w8, ws = fp8.quantize(w, granularity=gran, flavor=flavor)
        x8, xs = fp8.quantize(x, granularity=PAIRED[gran], flavor=flavor)
        dev = _dev(arch, cus)
        for native, tag in ((True, "fp8"), (False, "f16")):
            with hipskinny.on_device(dev):
                y = hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, native=native)
            assert_bound(y, x8, w8, ws, xs)
            info = op.plan_info(dev, x8.dtype, n, m, -(-k // 16) * 16, w_flavor=flavor, block=gran == "block",
                                x_scaled=True, native=native)
            assert info["kernel"].startswith(f"fp8_linear_{tag}_" if n <= op.MAX_N else f"fp8_linear_splitk_{tag}_")


def test_bad_input_messages():
    dev = _dev("gfx942", 2)
    x, w = _data(2, 16, 256, seed=0)
    w8, ws = fp8.quantize(w, granularity="channel", flavor="fnuz")
    with hipskinny.on_device(dev):
        with pytest.raises(InputTypeError, match="w has dtype float16; supported: float8_e4m3fn"):
            hipskinny.fp8_linear(x, w.astype(F16), ws)
        with pytest.raises(InputValueError, match="w_scale of shape .* matches no scale granularity"):
            hipskinny.fp8_linear(x, w8, np.ones(5, np.float32))
        with pytest.raises(InputTypeError, match="w_scale has dtype float16; supported: float32"):
            hipskinny.fp8_linear(x, w8, ws.astype(F16))
        with pytest.raises(InputValueError, match="x_scale is for FP8 activations"):
            hipskinny.fp8_linear(x, w8, ws, x_scale=np.ones(2, np.float32))
        x8, xs = fp8.quantize(x.astype(np.float32), granularity="token", flavor="fnuz")
        with pytest.raises(InputValueError, match="needs x_scale"):
            hipskinny.fp8_linear(x8, w8, ws)
        with pytest.raises(InputValueError, match="block weight scales go with per-token-group"):
            hipskinny.fp8_linear(x8, *fp8.quantize(w, granularity="block", flavor="fnuz"), x_scale=xs)
        o8, os_ = fp8.quantize(w, granularity="channel", flavor="ocp")
        ox, oxs = fp8.quantize(x.astype(np.float32), granularity="token", flavor="ocp")
        with pytest.raises(InputValueError, match=r"W8A8 on gfx942 takes fnuz .*hipskinny.fp8.convert"):
            hipskinny.fp8_linear(ox, o8, os_, x_scale=oxs)
        with pytest.raises(InputTypeError, match="W8A8 needs one FP8 flavour"):
            hipskinny.fp8_linear(ox, w8, ws, x_scale=oxs)
        with pytest.raises(InputTypeError, match="out_dtype must be float16 or bfloat16 .*got 'float32'"):
            hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, out_dtype="float32")
        with pytest.raises(InputValueError, match="the output is float16; got out_dtype=bfloat16"):
            hipskinny.fp8_linear(x, w8, ws, out_dtype="bfloat16")
        with pytest.raises(InputTypeError, match="bias has dtype float32; it must be the output dtype"):
            hipskinny.fp8_linear(x, w8, ws, bias=np.zeros(16, np.float32))
        with pytest.raises(InputValueError, match="N=129 rows .* supported: N = 1..128"):
            hipskinny.fp8_linear(np.zeros((129, 256), F16), w8, ws)
        with pytest.raises(InputValueError, match=r"native=True needs FP8 x \(W8A8\)"):
            hipskinny.fp8_linear(x, w8, ws, native=True)
        # W8A16 takes the non-native flavour (decoding is software).
        y = hipskinny.fp8_linear(x, o8, os_)
        assert_bound(y, x, o8, os_)


def test_native_needs_fp8_hardware():
    x, w = _data(2, 16, 256, seed=0, x_dtype=np.float32)
    w8, ws = fp8.quantize(w, granularity="channel", flavor="ocp")
    x8, xs = fp8.quantize(x, granularity="token", flavor="ocp")
    with hipskinny.on_device(_dev("gfx1100", 2)):
        with pytest.raises(InputValueError, match=r"on an arch with FP8 instructions \(gfx942, gfx950, gfx1201\); "
                                                  "got float8_e4m3fn x on gfx1100"):
            hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, native=True)
        assert_bound(hipskinny.fp8_linear(x8, w8, ws, x_scale=xs), x8, w8, ws, xs)


@pytest.mark.parametrize("mode", ["w8a16", "w8a8"])
def test_torch_fallback_route(mode):
    """The N > 128 route for torch tensors on a ROCm GPU (dequantize + F.linear; selecting it
    needs ROCm torch, which this machine lacks), run on CPU tensors against the reference: the
    result within one rounding of the output dtype plus fp32 summation."""
    import torch
    n, m, k = 130, 24, 256
    x, w = _data(n, m, k, seed=4, x_dtype=np.float32)
    w8, ws = fp8.quantize(torch.from_numpy(w), granularity="block", flavor="ocp")
    bias = torch.randn(m).to(torch.bfloat16)
    if mode == "w8a16":
        xt, xs = torch.from_numpy(x).to(torch.bfloat16), None
    else:
        xt, xs = fp8.quantize(torch.from_numpy(x), granularity="group", flavor="ocp")
    out = torch.empty(n, m, dtype=torch.bfloat16)
    y = op._TorchFallback()((xt, w8, ws, xs, bias, out), None)
    assert y is out

    def npf(t):
        return t.float().numpy().astype(BF16) if t.dtype == torch.bfloat16 else t.numpy()

    x_np = npf(xt) if xs is None else xt.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    assert_bound(y.float().numpy().astype(BF16), x_np, w8.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn),
                 ws.numpy(), None if xs is None else xs.numpy(), npf(bias))
