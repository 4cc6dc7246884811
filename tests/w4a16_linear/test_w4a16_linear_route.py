"""hipskinny.w4a16.linear for N = 9..128: the fused split-K kernel (N = 9..64, weights widened to
x's dtype in registers) and the route (N > 64, ``fused=False``, and shapes no fused kernel takes:
the w4a16_dequantize kernel writes W as x's 16-bit dtype in the checkpoint's column order into a
pooled slot, then skinny_gemm's kernel for N multiplies plain x by it). On the emulator for every
shipped arch, against float64 math from the checkpoint tensors (`w4a16_linear_reference`). Both
round each weight once to T and sum in fp32, so one bound serves both.

Tolerance (derived from the accumulation model, not tuned). Each weight is rounded once to T
(the product s * (q - z) is exact in fp32, then one rounding; the fused kernel's fp16 multiply
of exact operands is the same correctly rounded value): |w16 - w| <= u_T |w| + eta_T, u_T =
2**-11 (fp16) / 2**-8 (bf16), eta_T half the smallest subnormal (2**-25 / 2**-134). skinny_gemm
sums the exact products x * w16 in fp32: at most (K + 8) roundings of U = 2**-24 relative to
S16 = sum_k |x w16| + |bias| (dot2 chains or matrix-unit sums, split-K partials, the bias), so
|s - exact| <= sum_k |x| (u_T |w| + eta_T) + (K + 8) U ((1 + u_T) sum_k |x w| + |bias|). Then
one rounding to the output type: half an ulp.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from benchmarks.choices import override
from hipskinny import InputValueError, scratch, w4a16
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import _linear
from hipskinny.ops import _splitk as splitk
from hipskinny.ops import w4a16_linear as op
from hipskinny.ops._splitk import token_tiles

TAG = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}   # the kernels' dtype tags

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
U = 2.0**-24
FULL_ARCH = "gfx942"


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


def _layer(m, k, g, fmt, symmetric, act_order, dt, seed, scale=1.0):
    """Checkpoint tensors from random codes (true zeros 1..16 for v1 GPTQ, 0..15 otherwise; AWQ
    symmetric: every stored zero 8) and the prepared weight with scales in x's dtype (values that
    fp16 and bf16 both hold exactly, so the prepared scales equal the checkpoint's; with a `scale`
    below 2^-10, fp16 only: subnormal fp16 scales)."""
    rng = np.random.default_rng(seed)
    gs = k if g == -1 else g
    codes = rng.integers(0, 16, (m, k))
    lo = 1 if fmt == "gptq" else 0
    zeros = None if symmetric else rng.integers(lo, lo + 16, (m, k // gs))
    scales = (rng.uniform(0.002, 0.02, (m, k // gs)) * rng.choice([-1, 1], (m, k // gs))).astype(BF16)
    scales = (scales.astype(np.float32) * scale).astype(np.float16)
    g_idx = (rng.permutation(k) // gs).astype(np.int32) if act_order else None
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt=fmt, group_size=g, g_idx=g_idx)
    return ckpt, w4a16.prepare(**ckpt, fmt=fmt, group_size=g, dtype=dt)


def assert_route_bound(y, x, ckpt, fmt, g, bias=None):
    w = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=g)
    m, k = w.shape
    dt = np.asarray(y).dtype
    u_t, eta, mant, emin = (2.0**-11, 2.0**-25, 10, -14) if dt == F16 else (2.0**-8, 2.0**-134, 7, -126)
    x64 = np.asarray(x).astype(np.float64).reshape(-1, k)
    exact = op.w4a16_linear_reference(x, **ckpt, fmt=fmt, group_size=g, bias=bias).reshape(-1, m)
    ax = np.abs(x64)
    s = ax @ np.abs(w).T
    err = u_t * s + eta * ax.sum(axis=1, keepdims=True) + (k + 8) * U * (1 + u_t) * s
    if bias is not None:
        err = err + (k + 8) * U * np.abs(np.asarray(bias).astype(np.float64).reshape(-1, m))
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact) + err, 2.0**emin))) - mant)
    yd = np.asarray(y).astype(np.float64).reshape(exact.shape)
    bad = ~(np.abs(yd - exact) <= err + 0.5 * ulp)
    assert not bad.any(), f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs {exact[bad][0]}"


# (fmt, symmetric, act-order): every checkpoint format, symmetric and asymmetric, act-order
# (GPTQ's g_idx) on both GPTQ versions.
KINDS = [("awq", False, False), ("awq", True, False), ("gptq", False, False), ("gptq", True, False),
         ("gptq", False, True), ("gptq", True, True), ("gptq_v2", False, False), ("gptq_v2", True, False),
         ("gptq_v2", False, True), ("gptq_v2", True, True)]
NS = (9, 16, 33, 64, 128)
# (M, K, group size): small matrices; several groups per row at 32 / 64 / 128, and per-channel
# scales of a K that is not a power of two: K = 200 (no fused kernel: the route at every N) and
# K = 480 (a multiple of 32: the fused split-K kernel's one group).
MATS = [(24, 256, 32), (16, 480, -1), (16, 200, -1), (48, 384, 64), (40, 512, 128)]


def _case(i: int, dt: np.dtype) -> tuple:
    """Case i of the matrix: every kind, each N with both dtypes, the matrices and bias forms in turn."""
    fmt, sym, act = KINDS[i % len(KINDS)]
    n = NS[(i + (dt == BF16)) % len(NS)]
    m, k, g = MATS[i % len(MATS)]
    return n, m, k, g, fmt, sym, act


def _run(arch, dt, i, fused=None):
    """Case i through the route (fused=False) or the default: the fused split-K kernel at N <= 64
    (N = 128 takes the route either way)."""
    n, m, k, g, fmt, sym, act = _case(i, dt)
    ckpt, prepared = _layer(m, k, g, fmt, sym, act, dt, seed=i)
    assert (prepared.perm is not None) == act and prepared.symmetric == sym
    rng = np.random.default_rng(70 + i)
    x = rng.standard_normal((n, k)).astype(dt)
    bias = (None, rng.standard_normal(m), rng.standard_normal((n, m)))[i % 3]
    bias = None if bias is None else bias.astype(dt)
    dev = _dev(arch, 2)
    with hipskinny.on_device(dev):
        y = w4a16.linear(x, prepared, bias, fused=fused)
        kernels = [launch.kernel for launch in dev.launches][-2:]
    assert y.shape == (n, m) and y.dtype == dt
    tag = TAG[np.dtype(dt)]
    if fused is False or not op.fusible(n, k, k if g == -1 else g):
        assert kernels[0] == f"w4a16_linear_dequantize_{tag}", kernels
        assert re.fullmatch(rf"skinny_gemm_splitk_{tag}_t{token_tiles(n)}(_s[24])?", kernels[1]), kernels
    else:   # (one slice or several: `splitk.built_slices`)
        assert re.fullmatch(rf"w4a16_linear_splitk_{tag}_t{token_tiles(n)}(_s[24])?", kernels[-1]), kernels
    assert_route_bound(y, x, ckpt, fmt, g, bias)


@pytest.mark.parametrize("fused", [False, None], ids=["route", "default"])
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("i", range(len(KINDS)))
def test_full_matrix_one_arch(dt, i, fused):
    """Every kind x both dtypes on one arch, N cycling through 9, 16, 33, 64, 128: the route, and
    the default (the fused split-K kernel up to 64 tokens)."""
    _run(FULL_ARCH, dt, i, fused)


@pytest.mark.parametrize("fused", [False, None], ids=["route", "default"])
@pytest.mark.parametrize("arch", [a for a in SHIPPED_ARCHS if a != FULL_ARCH])
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
def test_subset_other_archs(arch, dt, fused):
    """Three kinds per arch and dtype (different ones per arch), so together they cover them all."""
    a = SHIPPED_ARCHS.index(arch)
    for i in (a, a + 3, a + 6):
        _run(arch, dt, i, fused)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_small_n_on_the_splitk_kernel(arch):
    """N = 2..8 take the fused split-K kernel where `_linear.small_n_splitk` says (large calls on the
    CDNA parts; forced here on every arch): act-order and asymmetric, several shards, lanes without
    a token skipping their partials; the split-K kernel's bound (each weight rounded once to T)."""
    cases = [(3, 24, 1024, 128, "gptq", False, True, F16), (7, 40, 512, 32, "awq", False, False, BF16)]
    with override(_linear, "SMALL_N_SPLITK_WORK", "always"):
        for i, (n, m, k, g, fmt, sym, act, dt) in enumerate(cases):
            ckpt, prepared = _layer(m, k, g, fmt, sym, act, dt, seed=80 + i)
            x = np.random.default_rng(90 + i).standard_normal((n, k)).astype(dt)
            dev = _dev(arch, 2)
            with hipskinny.on_device(dev):
                y = w4a16.linear(x, prepared)
                assert re.fullmatch(rf"w4a16_linear_splitk_{TAG[dt]}_t1(_s[24])?", dev.launches[-1].kernel)
            assert_route_bound(y, x, ckpt, fmt, g)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("slices", [1, 2, 4])
def test_every_slice_count(arch, slices, keep_shards, force_slices):
    """The fused split-K kernels with 1, 2 and 4 slices per unit where built (2 and 4 at one and two
    token tiles, 2 at four) at N of one, two and four tiles: several row blocks of 128 / slices with
    a tail, several shards of an odd number of groups (a slice without a group at the end),
    act-order, asymmetric and symmetric."""
    force_slices(slices)
    cases = [(12, 104, 1664, 128, "gptq", False, True, F16), (40, 200, 1152, 64, "awq", False, False, BF16),
             (24, 136, 1664, 128, "gptq", True, False, F16)]
    for i, (n, m, k, g, fmt, sym, act, dt) in enumerate(cases):
        ckpt, prepared = _layer(m, k, g, fmt, sym, act, dt, seed=100 + i)
        x = np.random.default_rng(110 + i).standard_normal((n, k)).astype(dt)
        dev = _dev(arch, 3)
        with hipskinny.on_device(dev):
            y = w4a16.linear(x, prepared)
            info = op.plan_info(dev, dt, n, m, k)
        nt = token_tiles(n)
        assert info["shards"] > 1 and info["slices"] == (slices if slices in ((1, 2, 4) if nt <= 2 else (1, 2)) else 1)
        assert dev.launches[-1].kernel == info["kernel"] == splitk.sliced(f"w4a16_linear_splitk_{TAG[dt]}_t{nt}", nt,
                                                                           info["slices"])
        assert_route_bound(y, x, ckpt, fmt, g)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_small_n_route(arch):
    """N <= 8 where the fused kernel does not apply (per-channel scales of a K that is not a
    power of two, or fused=False): the dequantize kernel, then skinny_gemm's lane-split kernel."""
    dev = _dev(arch, 2)
    for i, (n, m, k, g, fused) in enumerate([(3, 24, 200, -1, None), (4, 24, 256, 64, False)]):
        dt = (F16, BF16)[i]
        fmt, sym, act = KINDS[(SHIPPED_ARCHS.index(arch) + 4 * i) % len(KINDS)]
        ckpt, prepared = _layer(m, k, g, fmt, sym, act, dt, seed=40 + i)
        rng = np.random.default_rng(i)
        x = rng.standard_normal((n, k)).astype(dt)
        bias = rng.standard_normal(m).astype(dt)
        with hipskinny.on_device(dev):
            y = w4a16.linear(x, prepared, bias, fused=fused)
            kernels = [launch.kernel for launch in dev.launches][-2:]
        assert kernels[0] == f"w4a16_linear_dequantize_{TAG[np.dtype(dt)]}" and kernels[1].startswith(
            f"skinny_gemm_{TAG[np.dtype(dt)]}_n{n}_"), kernels
        assert_route_bound(y, x, ckpt, fmt, g, bias)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("fused", [False, None], ids=["route", "fused"])
def test_bitwise_reproducible_across_calls_cu_counts_and_schedules(arch, fused, keep_shards):
    n, m, k, g = 20, 136, 1024, 128
    _, prepared = _layer(m, k, g, "gptq", False, True, BF16, seed=9)
    x = np.random.default_rng(2).standard_normal((n, k)).astype(BF16)
    outs = []
    for cus, calls in ((1, 2), (3, 1)):                     # across calls, then across CU counts
        dev = EmulatedDevice(arch, cus, seed=cus)           # seeded shuffled wave schedule
        with hipskinny.on_device(dev):
            outs += [w4a16.linear(x, prepared, fused=fused).view(np.uint16) for _ in range(calls)]
    from hipskinny.ops import skinny_gemm as sg

    info = sg.plan_info(dev, BF16, n, m, k) if fused is False else op.plan_info(dev, BF16, n, m, k)
    assert info["shards"] > 1                                  # shard partials summed in order
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_dequantized_weights_are_the_checkpoint_values_rounded_once():
    """The pooled weights after a route call: T(s * (q - z)) in the checkpoint's column order
    (act-order undone), bit for bit."""
    dev = _dev("gfx1201", 2)
    for dt in (F16, BF16):
        ckpt, prepared = _layer(16, 256, 64, "gptq", False, True, dt, seed=3)
        x = np.zeros((12, 256), dt)
        with hipskinny.on_device(dev):
            w4a16.linear(x, prepared, fused=False)
        pool = scratch.pool(dev, 0)
        got = np.empty((16, 256), dt)
        dev.copy_to_host(got, pool.buffer(op.ROUTE_SLOT, got.nbytes), got.nbytes)
        want = w4a16.dequantize_checkpoint(**ckpt, fmt="gptq", group_size=64).astype(dt)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


# (fmt, symmetric, act_order, group size, K, scale): AWQ zero points, GPTQ act-order, symmetric
# (no zero points) with and without act-order -- the kernel's four loops -- per-channel scales of a
# K that is not a power of two (one group of 192 columns), subnormal fp16 scales and products.
ROUTE_VARIANTS = [("awq", False, False, 128, 256, 1.0), ("gptq", False, True, 64, 256, 1.0),
                  ("gptq", True, False, 32, 256, 1.0), ("gptq", True, True, 64, 256, 1.0),
                  ("awq", False, False, -1, 192, 1.0),
                  ("gptq", False, False, 64, 256, 2.0**-12)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_dequantize_kernel_bitwise_every_arch(arch):
    """The dequantize kernel's weights, every variant of its loop on every arch: T(s * (q - z)) in
    the checkpoint's column order, bit for bit (signed zeros included: negative scales and q == z)."""
    dev = _dev(arch, 2)
    for i, (fmt, symmetric, act_order, g, k, scale) in enumerate(ROUTE_VARIANTS):
        for dt in (F16, BF16) if scale == 1.0 else (F16,):
            ckpt, prepared = _layer(24, k, g, fmt, symmetric, act_order, dt, seed=10 + i, scale=scale)
            with hipskinny.on_device(dev):
                w4a16.linear(np.zeros((12, k), dt), prepared, fused=False)
            got = np.empty((24, k), dt)
            dev.copy_to_host(got, scratch.pool(dev, 0).buffer(op.ROUTE_SLOT, got.nbytes), got.nbytes)
            want = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=g).astype(dt)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=f"{fmt} {g} {dt}")


def test_route_error_messages():
    ckpt, p = _layer(16, 256, 64, "gptq", False, False, F16, seed=0)
    with hipskinny.on_device(_dev("gfx1100", 2)):
        with pytest.raises(InputValueError, match=r"N=129 tokens; supported: N = 1..128 \(torch tensors on a ROCm"):
            w4a16.linear(np.zeros((129, 256), F16), p)
        with pytest.raises(InputValueError, match="fused=True, but the fused kernels take N = 1..64 tokens"):
            w4a16.linear(np.zeros((65, 256), F16), p, fused=True)
        _, p200 = _layer(8, 200, -1, "gptq", True, False, F16, seed=1)
        with pytest.raises(InputValueError, match="got N=2, K=200, group size 200"):
            w4a16.linear(np.zeros((2, 200), F16), p200, fused=True)
        bad = dataclasses.replace(p, group_size=12)
        with pytest.raises(InputValueError, match="K must be a multiple of 8 and of the group size"):
            w4a16.linear(np.zeros((2, 256), F16), bad)
