"""hipskinny.w4a16.linear on the emulator for every shipped arch, against exact math from the
checkpoint tensors (not the prepared layout). The fused kernel (N = 1..8); the route (N > 8, and
shapes the fused kernel does not take) in test_w4a16_linear_route.py.

Tolerance (derived, not tuned), c = (K/32 + 40) * 2**-24. A lane sums a 32-column chunk with 16
dot2 (fp32) of exact 16-bit values (x, and q - z exact in fp16), scales it once into its
accumulator (K/32 chunks at most), the butterfly adds its levels, the bias one rounding:
|s - exact| <= c * sum_k |x w| + 2**-24 * (|exact| + |bias|). bf16 sums x * (128 + q) (exact in
fp32) and subtracts (128 + z) * sum_x per chunk: the roundings act on terms up to 143 |x|, so
add c * 143 * sum_k |x_k| |s(m, g(k))|. Then one rounding to the output type: half an ulp.
"""

from __future__ import annotations

import dataclasses
import functools

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from hipskinny import InputTypeError, InputValueError, w4a16
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import w4a16_linear as op

TAG = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}   # the kernels' dtype tags

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
U = 2.0**-24


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


def _layer(m, k, g, fmt, symmetric, act_order, dt, seed):
    """Checkpoint tensors from random codes (zeros 1..16 for v1 GPTQ, 0..15 otherwise) and the
    prepared weight with scales in x's dtype."""
    rng = np.random.default_rng(seed)
    gs = k if g == -1 else g
    codes = rng.integers(0, 16, (m, k))
    lo = 1 if fmt == "gptq" else 0
    zeros = None if symmetric else rng.integers(lo, lo + 16, (m, k // gs))
    # fp16 scales that bf16 holds exactly too: the kernels take them in x's dtype
    scales = (rng.uniform(0.002, 0.02, (m, k // gs)) * rng.choice([-1, 1], (m, k // gs))).astype(BF16)
    scales = scales.astype(np.float16)
    g_idx = None
    if act_order:
        g_idx = (rng.permutation(k) // gs).astype(np.int32)
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt=fmt, group_size=g, g_idx=g_idx)
    return ckpt, w4a16.prepare(**ckpt, fmt=fmt, group_size=g, dtype=dt)


def assert_bound(y, x, ckpt, fmt, g, bias=None):
    w = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=g)
    m, k = w.shape
    x64 = np.asarray(x).astype(np.float64).reshape(-1, k)
    exact = op.w4a16_linear_reference(x, **ckpt, fmt=fmt, group_size=g, bias=bias).reshape(-1, m)
    c = (k / 32 + 40) * U
    err = c * (np.abs(x64) @ np.abs(w).T) + U * np.abs(exact)
    if bias is not None:
        err = err + U * np.abs(np.asarray(bias).astype(np.float64).reshape(-1, m))
    dt = np.asarray(y).dtype
    if dt == BF16:
        s = np.abs(np.asarray(ckpt["scales"], np.float64))            # [K/G, M] checkpoint orientation
        gi = ckpt["g_idx"] if ckpt["g_idx"] is not None else np.arange(k) // (k if g == -1 else g)
        err = err + c * 143 * (np.abs(x64) @ s[np.asarray(gi)])
    mant, emin = (10, -14) if dt == F16 else (7, -126)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(exact) + err, 2.0**emin))) - mant)
    yd = np.asarray(y).astype(np.float64).reshape(exact.shape)
    bad = ~(np.abs(yd - exact) <= err + 0.5 * ulp)
    assert not bad.any(), f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs {exact[bad][0]}"


# (N, M, K, group size, fmt, symmetric, act-order, CUs): every format, asymmetric (v1 zeros up to
# 16) and symmetric, act-order, K streamed through LDS (8 x 8192 x 2 bytes > 64 KiB), per-channel
# (one group of the whole row), M not a multiple of the tiles.
CASES = [(1, 40, 256, 32, "gptq", False, False, 2), (3, 24, 512, 64, "awq", False, False, 3),
         (8, 16, 8192, 128, "gptq", True, True, 2), (5, 37, 4096, -1, "gptq_v2", True, False, 2),
         (2, 48, 1024, 128, "gptq_v2", False, True, 1)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
def test_against_exact(arch, dt):
    for i, (n, m, k, g, fmt, sym, act, cus) in enumerate(CASES):
        ckpt, prepared = _layer(m, k, g, fmt, sym, act, dt, seed=i)
        assert (prepared.perm is not None) == act and prepared.symmetric == sym
        rng = np.random.default_rng(50 + i)
        x = rng.standard_normal((n, k)).astype(dt)
        bias = (None, rng.standard_normal(m), rng.standard_normal((n, m)))[i % 3]
        bias = None if bias is None else bias.astype(dt)
        with hipskinny.on_device(_dev(arch, cus)):
            y = w4a16.linear(x, prepared, bias)
            info = op.plan_info(_dev(arch, cus), dt, n, m, k)
        assert y.shape == (n, m) and y.dtype == dt
        assert info["kernel"].startswith(f"w4a16_linear_{TAG[np.dtype(dt)]}_n{n}_")
        need = n * k * 2 + (n * k // 8 if dt == BF16 else 0)      # x (+ bf16's per-chunk sums)
        assert info["staged_once"] == (need <= ARCHS[arch].lds_per_workgroup)
        assert_bound(y, x, ckpt, fmt, g, bias)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_bitwise_reproducible_across_cu_counts_and_schedules(arch):
    n, m, k, g = 4, 296, 1024, 64
    _, prepared = _layer(m, k, g, "gptq", False, True, BF16, seed=9)
    x = np.random.default_rng(2).standard_normal((n, k)).astype(BF16)
    outs = []
    for cus in (1, 3):
        dev = EmulatedDevice(arch, cus, seed=cus)           # seeded shuffled wave schedule
        with hipskinny.on_device(dev):
            outs += [w4a16.linear(x, prepared).view(np.uint16) for _ in range(2)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_bad_input_messages():
    _, p = _layer(16, 256, 64, "gptq", False, False, F16, seed=0)
    x = np.zeros((2, 256), F16)
    with hipskinny.on_device(_dev("gfx1100", 2)):
        with pytest.raises(InputTypeError, match="x has dtype float32; supported: float16, bfloat16"):
            w4a16.linear(x.astype(np.float32), p)
        with pytest.raises(InputValueError, match=r"scales must be bfloat16 \(x's dtype: prepare\(..., dtype=...\)\)"):
            w4a16.linear(x.astype(BF16), p)
        with pytest.raises(InputValueError, match=r"x must be \[..., K\] with K=256"):
            w4a16.linear(np.zeros((2, 128), F16), p)
        with pytest.raises(InputValueError, match="bias must be float16"):
            w4a16.linear(x, p, np.zeros(16, np.float32))
        with pytest.raises(InputTypeError, match="prepared must be a hipskinny.w4a16.Prepared"):
            w4a16.linear(x, {"qweight": p.qweight})
        ck, _ = _layer(8, 64, 32, "gptq", True, False, F16, seed=2)
        stack = w4a16.prepare(*(np.stack([ck[n]] * 2) for n in ("qweight", "scales")), fmt="gptq", group_size=32)
        with pytest.raises(InputValueError, match="a stack of 2 experts"):
            w4a16.linear(np.zeros((1, 64), F16), stack)


# A host perm that is not a permutation of 0..K-1: (how it is broken, the message's reason).
BAD_PERMS = [(lambda p: p.__setitem__(3, -1), r"perm\[3\] = -1 is outside \[0, 256\)"),
             (lambda p: p.__setitem__(5, 256), r"perm\[5\] = 256 is outside \[0, 256\)"),
             (lambda p: p.__setitem__(0, 2**31 - 1), r"perm\[0\] = 2147483647 is outside \[0, 256\)"),
             (lambda p: p.__setitem__(1, p[0]), r"\d+ appears 2 times")]


@pytest.mark.parametrize("n, fused", [(2, None), (12, None), (3, False)], ids=["lane_split", "splitk", "route"])
def test_host_perm_not_a_permutation_is_refused_on_every_call(n, fused):
    """Every kernel indexes x (or W, the route) by perm: a host perm is checked on every call,
    before any launch, also when only its contents changed since the signature was bound."""
    _, p = _layer(16, 256, 64, "gptq", False, True, F16, seed=4)
    x = np.random.default_rng(1).standard_normal((n, 256)).astype(F16)
    dev = _dev("gfx1100", 2)
    with hipskinny.on_device(dev):
        for breaks, reason in BAD_PERMS:
            perm = p.perm.copy()
            mine = dataclasses.replace(p, perm=perm)
            good = w4a16.linear(x, mine, fused=fused)            # binds the signature
            breaks(perm)
            last = dev.launches[-1]
            with pytest.raises(InputValueError, match=r"w4a16_linear: the prepared perm must be a permutation of "
                                                      r"0..K-1 \(K=256\); " + reason):
                w4a16.linear(x, mine, fused=fused)
            assert dev.launches[-1] is last                       # refused before any launch
            perm[:] = p.perm                                       # repaired: the same result
            np.testing.assert_array_equal(w4a16.linear(x, mine, fused=fused).view(np.uint16), good.view(np.uint16))
