"""hipskinny.moe.fused_moe on the emulator for every shipped arch, against a float64 reference of
vLLM's fused_experts semantics (quant_specs.md 3.3) built from the checkpoint tensors.

Bound (derived, not tuned). GEMM1's fp32 sums of exact products carry at most K/2 + 40
roundings (16-bit experts: every dot2 goes into the lane's accumulator) or K/32 + 40 (int4: a
chunk's 16 dot2 are summed apart and scaled once, see tests/w4a16_linear/test_w4a16_linear.py), each within
2**-24 of the running |sum| <= sum |x w| (c1 = that count * 2**-24; bf16 int4 adds the
activation-sum correction's c1 * 143 * sum |x| |s|).
So the kernel's gate and up lie in [exact - d, exact + d]; each end is rounded to T, silu's fp32
value is taken with +-4 ulp of fp32 (exp's and the division's error on either side) and
rounded to T, and act = T(s * u) for every combination: the kernel's act lies between the
smallest and the largest of them. GEMM2 is then bounded by interval arithmetic over act, plus
c2 = (I/2 + 40 + k) * 2**-24 (int4: I/32 + 40 + k) of sum_j w_j sum_i |w2 act| for its fp32 sums
and the top-k adds, plus half an ulp of T for out's rounding.
"""

from __future__ import annotations

import dataclasses
import functools

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from hipskinny import InputTypeError, InputValueError, w4a16
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import fused_moe as op

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
U = 2.0**-24


def _dev(arch: str, cus: int = 2) -> EmulatedDevice:
    return _device(arch, cus)


@functools.cache
def _device(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


def _run(arch, *args, cus=2, **kw):
    with hipskinny.on_device(_dev(arch, cus)):
        return hipskinny.moe.fused_moe(*args, **kw)


def _experts16(e, h, i, dt, seed, scale=0.05):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((e, 2 * i, h)) * scale).astype(dt),
            (rng.standard_normal((e, h, i)) * scale).astype(dt))


def _stack(e, m, k, g, fmt, symmetric, act_order, dt, seed):
    """An int4 expert stack: checkpoint tensors, the float64 weights from them, the prepared stack."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (e, m, k))
    lo = 1 if fmt == "gptq" else 0
    zeros = None if symmetric else rng.integers(lo, lo + 16, (e, m, k // g))
    scales = (rng.uniform(0.002, 0.01, (e, m, k // g)) * rng.choice([-1, 1], (e, m, k // g))).astype(BF16)
    scales = scales.astype(np.float16)   # exact in bf16 too
    g_idx = np.stack([(rng.permutation(k) // g).astype(np.int32) for _ in range(e)]) if act_order else None
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt=fmt, group_size=g, g_idx=g_idx)
    dense = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=g)
    return dense, w4a16.prepare(**ckpt, fmt=fmt, group_size=g, dtype=dt), np.abs(scales).max()


def _routing(n, k, e, seed, weights=True):
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(e, k, replace=False) for _ in range(n)]).astype(np.int32)
    tw = rng.uniform(0.05, 1.0, (n, k)).astype(np.float32)
    return tw, ids


def _act_range(g, u, dg, du, dt):
    """[lo, hi] of the act the kernel can produce from gate/up within +-dg, +-du of exact."""
    cands = []
    for gv in (g - dg, g + dg):
        for uv in (u - du, u + du):
            gt = gv.astype(np.float32).astype(dt).astype(np.float32)
            ut = uv.astype(np.float32).astype(dt).astype(np.float32)
            with np.errstate(over="ignore"):
                s = gt / (np.float32(1) + np.exp(-gt))
            for f in (1 - 4 * 2.0**-23, 1 + 4 * 2.0**-23):
                st = (s * np.float32(f)).astype(dt).astype(np.float32)
                cands.append((st * ut).astype(dt).astype(np.float64))
    c = np.stack(cands)
    return c.min(axis=0), c.max(axis=0)


def assert_moe(y, x, w13, w2, tw, ids, *, int4=(False, False), corr13=None, corr2=None):
    """y within the module docstring's bound. w13/w2: float weights [E, 2I, H] / [E, H, I];
    int4: whether each is an int4 stack; corr13/corr2: bf16 int4's max |scale| (adds the correction
    term) or None."""
    dt = np.asarray(x).dtype
    e, rows, h = w13.shape
    i = rows // 2
    c1 = (h / (32 if int4[0] else 2) + 40) * U
    c2 = (i / (32 if int4[1] else 2) + 40 + ids.shape[1]) * U
    x64 = np.asarray(x).astype(np.float64)
    lo = np.zeros((x64.shape[0], h))
    hi = np.zeros_like(lo)
    mag = np.zeros_like(lo)
    for t in range(x64.shape[0]):
        for j in range(ids.shape[1]):
            ex = int(ids[t, j])
            if not 0 <= ex < e:
                continue
            s = w13[ex] @ x64[t]
            d = c1 * (np.abs(w13[ex]) @ np.abs(x64[t]))
            if corr13 is not None:
                d = d + c1 * 143 * corr13 * np.abs(x64[t]).sum()
            alo, ahi = _act_range(s[:i], s[i:], d[:i], d[i:], dt)
            wlo = np.minimum(w2[ex] * alo, w2[ex] * ahi).sum(axis=1)
            whi = np.maximum(w2[ex] * alo, w2[ex] * ahi).sum(axis=1)
            amax = np.maximum(np.abs(alo), np.abs(ahi))
            m2 = np.abs(w2[ex]) @ amax
            if corr2 is not None:
                m2 = m2 + 143 * corr2 * amax.sum()
            w = float(tw[t, j])
            lo[t] += w * wlo
            hi[t] += w * whi
            mag[t] += w * m2
    err = c2 * mag + U * (np.abs(lo) + np.abs(hi))
    mant, emin = (10, -14) if dt == F16 else (7, -126)
    top = np.maximum(np.abs(lo), np.abs(hi)) + err
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(top, 2.0**emin))) - mant)
    yd = np.asarray(y).astype(np.float64)
    bad = ~((yd >= lo - err - 0.5 * ulp) & (yd <= hi + err + 0.5 * ulp))
    assert not bad.any(), \
        f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs [{lo[bad][0]}, {hi[bad][0]}]"
    # and the bound is not vacuous: act's range is at most 2 ulp of T wide, so the interval is at
    # most 2 ulp of T relative to the magnitude sum sum_j w_j sum_i |w2 act|
    assert np.all(hi - lo <= 2.0 ** (1 - mant) * mag + 1e-30)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("n", [1, 5])
def test_16bit_experts(arch, dt, n):
    e, k, h, i = 16, 4, 256, 128
    w13, w2 = _experts16(e, h, i, dt, seed=n)
    x = np.random.default_rng(7 + n).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=3 + n)
    y = _run(arch, x, w13, w2, tw, ids)
    assert y.dtype == dt and y.shape == (n, h)
    assert_moe(y, x, w13.astype(np.float64), w2.astype(np.float64), tw, ids)


def test_public_reference_is_within_the_bound_and_skips_invalid_ids():
    """`fused_moe_reference` (public) agrees with the kernels' bound, and an id outside [0, E) adds nothing."""
    e, k, h, i, n = 8, 3, 64, 32, 4
    for dt in (F16, BF16):
        w13, w2 = _experts16(e, h, i, dt, seed=11)
        x = np.random.default_rng(12).standard_normal((n, h)).astype(dt)
        tw, ids = _routing(n, k, e, seed=13)
        ref = op.fused_moe_reference(x, w13, w2, tw, ids)
        assert ref.dtype == np.float64 and ref.shape == (n, h)
        assert_moe(ref.astype(dt), x, w13.astype(np.float64), w2.astype(np.float64), tw, ids)
        bad = ids.copy()
        bad[:, -1] = [-1, e, e + 5, -7]
        kept = op.fused_moe_reference(x, w13, w2, tw[:, :-1], ids[:, :-1])
        np.testing.assert_array_equal(op.fused_moe_reference(x, w13, w2, tw, bad), kept)


# (fmt, symmetric, act-order, group size) per arch: every format and quirk on some arch in both dtypes.
INT4 = {"gfx942": ("gptq", False, False, 32), "gfx950": ("awq", False, False, 64),
        "gfx1100": ("gptq_v2", True, True, 128), "gfx1151": ("gptq", True, False, 64),
        "gfx1201": ("gptq_v2", False, True, 32)}


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
def test_int4_experts(arch, dt):
    fmt, sym, act, g = INT4[arch]
    e, k, h, i, n = 16, 4, 256, 128, 3
    w13, p13, s13 = _stack(e, 2 * i, h, g, fmt, sym, act, dt, seed=1)
    w2, p2, s2 = _stack(e, h, i, g, fmt, sym, act, dt, seed=2)
    x = np.random.default_rng(5).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=9)
    y = _run(arch, x, p13, p2, tw, ids)
    corr = dt == BF16
    assert_moe(y, x, w13, w2, tw, ids, int4=(True, True), corr13=s13 if corr else None, corr2=s2 if corr else None)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("dt", [F16, BF16], ids=["f16", "bf16"])
def test_units_of_every_slot_count(arch, dt):
    """Units holding 1 .. NP slots (a one-slot unit multiplies one row, the others NP rows), int4
    experts: N = 8, k = 2 on 16 experts takes NP = 4 with experts of 4, 3, 2 and 1 slots; N = 4
    takes NP = 2 with experts of 2 and 1 (gfx9's bf16 NP = 2 GEMM2 multiplies both rows)."""
    fmt, sym, act, g = INT4[arch]
    e, k, h, i = 16, 2, 256, 128
    w13, p13, s13 = _stack(e, 2 * i, h, g, fmt, sym, act, dt, seed=3)
    w2, p2, s2 = _stack(e, h, i, g, fmt, sym, act, dt, seed=6)
    corr = dt == BF16
    for ids, np_ in (([[0, 2], [0, 3], [0, 4], [0, 5], [1, 6], [1, 7], [1, 8], [2, 9]], 4),
                     ([[5, 2], [5, 3], [11, 4], [12, 7]], 2)):
        ids = np.array(ids, np.int32)
        n = len(ids)
        assert op.token_group(n, k, e) == np_
        x = np.random.default_rng(n).standard_normal((n, h)).astype(dt)
        tw = np.random.default_rng(n + 1).uniform(0.05, 1.0, (n, k)).astype(np.float32)
        y = _run(arch, x, p13, p2, tw, ids)
        assert_moe(y, x, w13, w2, tw, ids, int4=(True, True), corr13=s13 if corr else None,
                   corr2=s2 if corr else None)


def test_int4_and_16bit_mixed_and_group_sizes():
    """GEMM1 int4 (AWQ, asymmetric) with 16-bit w2, N = 16 (token groups of 2 or more)."""
    dt, e, k, h, i, n = F16, 8, 4, 256, 128, 16
    w13, p13, _ = _stack(e, 2 * i, h, 128, "awq", False, False, dt, seed=4)
    _, w2 = _experts16(e, h, i, dt, seed=4)
    x = np.random.default_rng(1).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=2)
    assert op.token_group(n, k, e) > 1
    y = _run("gfx1151", x, p13, w2, tw, ids)
    assert_moe(y, x, w13, w2.astype(np.float64), tw, ids, int4=(True, False))


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_routing_corner_cases(arch):
    """A token routed twice to one expert, every token on one expert (more slots than a unit holds),
    ids outside [0, E) skipped and counted, a token with no valid choice (exactly 0)."""
    dt, e, k, h, i, n = BF16, 8, 4, 128, 64, 9
    w13, w2 = _experts16(e, h, i, dt, seed=11)
    x = np.random.default_rng(2).standard_normal((n, h)).astype(dt)
    tw = np.random.default_rng(3).uniform(0.1, 1, (n, k)).astype(np.float32)
    ids = np.full((n, k), 5, np.int32)              # every slot on expert 5 (36 slots > 8 per unit)
    ids[0] = [2, 2, 7, 2]                            # token 0 twice... three times on expert 2
    ids[1] = [-1, 3, e, 1 << 30]                     # three invalid ids
    ids[2] = [-5, e + 1, -1, e]                      # no valid choice at all
    y = _run(arch, x, w13, w2, tw, ids)
    assert_moe(y, x, w13.astype(np.float64), w2.astype(np.float64), tw, ids)
    assert np.all(np.asarray(y)[2].astype(np.float64) == 0)
    assert op.invalid_slots(_dev(arch)) == 7
    ids_all_bad = np.full((n, k), -1, np.int32)
    y0 = _run(arch, x, w13, w2, tw, ids_all_bad)
    assert np.all(np.asarray(y0).astype(np.float64) == 0)
    assert op.invalid_slots(_dev(arch)) == n * k



def test_invalid_ids_with_int4_act_order_experts():
    """Ids outside [0, E) (negative, E, huge, INT32_MIN) with int4 act-order stacks, whose expert
    index also picks the perm row: skipped and counted, no access outside any buffer."""
    arch, dt, e, k, h, i, n = "gfx1151", F16, 4, 2, 64, 32, 3
    w13, p13, _ = _stack(e, 2 * i, h, 32, "gptq", False, True, dt, seed=21)
    w2, p2, _ = _stack(e, h, i, 32, "gptq_v2", True, True, dt, seed=22)
    x = np.random.default_rng(23).standard_normal((n, h)).astype(dt)
    tw = np.random.default_rng(24).uniform(0.1, 1, (n, k)).astype(np.float32)
    ids = np.array([[1, -1], [e, 3], [2**30, -(2**31)]], np.int32)
    y = _run(arch, x, p13, p2, tw, ids)
    assert_moe(y, x, w13, w2, tw, ids, int4=(True, True))
    assert np.all(np.asarray(y)[2].astype(np.float64) == 0)
    assert op.invalid_slots(_dev(arch)) == 4


@pytest.mark.parametrize("name", ["w13", "w2"])
def test_host_perm_not_a_permutation_is_refused_on_every_call(name):
    """The kernels gather x (act) through each expert's perm row: host perms are checked on every
    call, before any launch, also when only their contents changed since the signature was bound."""
    dt, e, k, h, i, n = F16, 4, 2, 64, 64, 2
    _, p13, _ = _stack(e, 2 * i, h, 32, "gptq", False, True, dt, seed=31)
    _, p2, _ = _stack(e, h, i, 32, "gptq", False, True, dt, seed=32)
    x = np.random.default_rng(33).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=34)
    kdim = h if name == "w13" else i
    perm = (p13 if name == "w13" else p2).perm.copy()
    ws = {"w13": p13, "w2": p2}
    ws[name] = dataclasses.replace(ws[name], perm=perm)
    dev = _dev("gfx1201")
    good = _run("gfx1201", x, ws["w13"], ws["w2"], tw, ids)
    for j, v, reason in ((7, -3, rf"perm\[7\] = -3 is outside \[0, {kdim}\)"),
                         (0, kdim, rf"perm\[0\] = {kdim} is outside \[0, {kdim}\)"),
                         (5, int(perm[2, 4]), f"{perm[2, 4]} appears 2 times")):
        was = perm[2, j]
        perm[2, j] = v
        last = dev.launches[-1]
        with pytest.raises(InputValueError, match=rf"fused_moe: {name}'s prepared perm must be a permutation of 0..K-1 "
                                                  rf"for every expert \(K={kdim}\); expert 2: " + reason):
            _run("gfx1201", x, ws["w13"], ws["w2"], tw, ids)
        assert dev.launches[-1] is last                       # refused before any launch
        perm[2, j] = was
        y = _run("gfx1201", x, ws["w13"], ws["w2"], tw, ids)
        np.testing.assert_array_equal(np.asarray(y).view(np.uint16), np.asarray(good).view(np.uint16))

def test_unrouted_experts_are_not_read():
    """Appending experts no slot routes to leaves every byte count of the call unchanged."""
    arch, dt, k, h, i, n = "gfx1100", F16, 4, 256, 128, 2
    dev = _dev(arch)
    x = np.random.default_rng(4).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, 8, seed=6)
    counts = []
    w13, w2 = _experts16(40, h, i, dt, seed=1)
    assert op.token_group(n, k, 32) == op.token_group(n, k, 40) == 1    # the same launches for both stacks
    for e in (32, 40):                   # the slots route to experts 0..7 only
        dev.launches.clear()
        y = _run(arch, x, w13[:e], w2[:e], tw, ids)
        stats = list(dev.launches)
        assert [s.kernel.split("_")[2] for s in stats] == ["route", "gemm1", "gemm2"]
        counts.append([dict(s.bytes_loaded) for s in stats[1:]])
        if e == 32:
            y8 = np.asarray(y)
    assert counts[0] == counts[1]
    np.testing.assert_array_equal(np.asarray(y).view(np.uint16), y8.view(np.uint16))
    # and the weight bytes are exactly the routed experts' (each read once at N=2: group 1 holds a slot)
    distinct = len(set(ids.ravel().tolist()))
    g1 = counts[0][0]["global"]
    assert g1 >= distinct * 2 * i * h * 2


def test_epilogue_is_vllm_silu_and_mul_bit_for_bit():
    """Integer-valued x and w13 (exact fp32 sums) and a w2 that copies act (one 1.0 per row, k = 1,
    weight 1.0): out is act itself, and it must equal silu_and_mul_reference bit for bit except
    where silu's fp32 value is within 4 ulp of a rounding boundary of T."""
    h, i, e = 64, 64, 2
    for dt in (F16, BF16):
        rng = np.random.default_rng(0)
        x = rng.integers(-3, 4, (4, h)).astype(dt)
        w13 = (rng.integers(-2, 3, (e, 2 * i, h)) * 0.125).astype(dt)
        w2 = np.zeros((e, h, i), dt)
        w2[:, np.arange(h), np.arange(h) % i] = 1
        ids = np.array([[0], [1], [1], [0]], np.int32)
        tw = np.ones((4, 1), np.float32)
        for arch in SHIPPED_ARCHS:
            y = np.asarray(_run(arch, x, w13, w2, tw, ids)).astype(np.float64)
            g = np.stack([w13[ids[t, 0]].astype(np.float64) @ x[t].astype(np.float64) for t in range(4)])
            want = op.silu_and_mul_reference(g[:, :i], g[:, i:], dt).astype(np.float64)
            gt = g[:, :i].astype(np.float32).astype(dt).astype(np.float32)
            s = gt / (np.float32(1) + np.exp(-gt))
            near = (s * np.float32(1 - 4 * 2.0**-23)).astype(dt) != (s * np.float32(1 + 4 * 2.0**-23)).astype(dt)
            assert np.array_equal(y[~near], want[~near]), arch
            assert near.mean() < 0.05


def test_deterministic_across_calls_schedules_and_cu_counts():
    dt, e, k, h, i, n = BF16, 16, 4, 256, 128, 6
    w13, p13, _ = _stack(e, 2 * i, h, 64, "gptq", False, False, dt, seed=8)
    w13b, w2 = _experts16(e, h, i, dt, seed=8)
    x = np.random.default_rng(9).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=10)
    ref = np.asarray(_run("gfx950", x, p13, w2, tw, ids)).view(np.uint16)
    for cus in (1, 7):
        got = np.asarray(_run("gfx950", x, p13, w2, tw, ids, cus=cus)).view(np.uint16)
        np.testing.assert_array_equal(got, ref)
    # seeded shuffled wave schedules (a new one per call): the row blocks' last arrivals differ, the
    # sums do not; the second call also reuses the device's scratch
    with hipskinny.on_device(EmulatedDevice("gfx950", 3, seed=1)):
        for _ in range(2):
            got = np.asarray(hipskinny.moe.fused_moe(x, p13, w2, tw, ids)).view(np.uint16)
            np.testing.assert_array_equal(got, ref)


def test_real_qwen3_width_few_experts():
    """Qwen3-30B-A3B's H = 2048, I = 768 (int4 GPTQ, group 128), with 4 experts, top-2."""
    dt, e, k, h, i, n = F16, 4, 2, 2048, 768, 1
    w13, p13, _ = _stack(e, 2 * i, h, 128, "gptq", True, False, dt, seed=12)
    w2, p2, _ = _stack(e, h, i, 128, "gptq", True, False, dt, seed=13)
    x = np.random.default_rng(14).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=15)
    y = _run("gfx1151", x, p13, p2, tw, ids)
    assert_moe(y, x, w13, w2, tw, ids, int4=(True, True))


def test_out_and_plan_shapes():
    dt, e, k, h, i, n = F16, 4, 2, 64, 32, 3
    w13, w2 = _experts16(e, h, i, dt, seed=1)
    x = np.random.default_rng(1).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=1)
    out = np.full((n, h), np.nan, dt)
    got = _run("gfx1100", x, w13, w2, tw, ids, out=out)
    assert got is out and not np.isnan(out.astype(np.float32)).any()
    info = op.plan_info(_dev("gfx1100"), dt, 1, 2048, 768, 128, 8)
    assert [p["kernel"] for p in info] == ["fused_moe_route", "fused_moe_gemm1_f16_w4_n1",
                                           "fused_moe_gemm2_f16_w4_n1_s1"]
    info = op.plan_info(_dev("gfx942"), dt, 1, 2048, 768, 128, 8)
    assert info[2]["kernel"] == "fused_moe_gemm2_f16_w4_n1_s2"      # 24 chunks of I: two row groups per wave64
    # Qwen3-30B-A3B (k = 8 of 128): NP from the slot counts' tail, at most half an expert over
    assert [op.token_group(n, 8, 128) for n in (1, 2, 4, 16, 64)] == [1, 1, 2, 4, 4]


def _bad(**over):
    dt, e, k, h, i, n = F16, 4, 2, 64, 32, 2
    w13, w2 = _experts16(e, h, i, dt, seed=1)
    args = dict(x=np.zeros((n, h), dt), w13=w13, w2=w2, topk_weights=np.ones((n, k), np.float32),
                topk_ids=np.zeros((n, k), np.int32))
    args.update(over)
    with hipskinny.on_device(_dev("gfx1100")):
        hipskinny.moe.fused_moe(args.pop("x"), args.pop("w13"), args.pop("w2"), args.pop("topk_weights"),
                                args.pop("topk_ids"), **args)


@pytest.mark.parametrize("over, err, match", [
    (dict(x=np.zeros((2, 64), np.float32)), InputTypeError, "x has dtype float32; supported: float16, bfloat16"),
    (dict(x=np.zeros((2, 2, 64), np.float16)), InputValueError, r"x must be \[N, H\]"),
    (dict(topk_ids=np.zeros((2, 2), np.int64)), InputTypeError, "topk_ids has dtype int64; it must be int32"),
    (dict(topk_ids=np.zeros((3, 2), np.int32)), InputValueError, r"topk_ids must be \[N, k\] with N=2"),
    (dict(topk_weights=np.ones((2, 2), np.float16)), InputTypeError,
     "topk_weights has dtype float16; it must be float32"),
    (dict(topk_weights=np.ones((2, 3), np.float32)), InputValueError, "topk_weights must have topk_ids' shape"),
    (dict(topk_ids=np.zeros((2, 17), np.int32), topk_weights=np.ones((2, 17), np.float32)), InputValueError,
     r"k=17 choices for N=2 tokens; supported: k = 1..16"),
    (dict(w2=np.zeros((5, 64, 32), np.float16)), InputValueError, "w13 has 4 experts and w2 5; they must match"),
    (dict(w2=np.zeros((4, 64, 48), np.float16)), InputValueError, r"w2 must be \[E, H, I\] = \[4, 64, 32\]"),
    (dict(w13=np.zeros((4, 64, 48), np.float16)), InputValueError, r"w13 must be \[E, 2I, H\] with H=64"),
    (dict(w13=np.zeros((4, 64, 64), np.float32)), InputTypeError, "w13 has dtype float32; 16-bit experts"),
    (dict(activation="gelu"), InputValueError, "activation 'gelu'; supported: silu"),
    (dict(w13=None), InputTypeError, "w13 is required"),
])
def test_bad_input(over, err, match):
    with pytest.raises(err, match=match):
        _bad(**over)


def test_bad_prepared_input():
    dt = F16
    _, p13, _ = _stack(2, 64, 64, 32, "gptq", True, False, dt, seed=1)
    _, w2 = _experts16(2, 64, 32, dt, seed=1)
    x, tw, ids = np.zeros((1, 64), dt), np.ones((1, 1), np.float32), np.zeros((1, 1), np.int32)
    with hipskinny.on_device(_dev("gfx1100")):
        with pytest.raises(InputValueError, match=r"w2 must be \[E, H, I\] = \[2, 64, 32\] \(I from w13's 2I rows\); "
                                                  r"got \[2, 64, 16\]"):
            hipskinny.moe.fused_moe(x, p13, w2[:, :, :16], tw, ids)
        _, pb, _ = _stack(2, 64, 64, 32, "gptq", True, False, BF16, seed=1)
        with pytest.raises(InputValueError, match="prepared scales must be float16"):
            hipskinny.moe.fused_moe(x, pb, w2, tw, ids)
        _, dense, _ = _stack(1, 64, 64, 32, "gptq", True, False, dt, seed=1)
        dense1 = w4a16.prepare(**w4a16.pack_checkpoint(np.zeros((64, 64), int), None, np.ones((64, 2), np.float16),
                                                       fmt="gptq", group_size=32), fmt="gptq", group_size=32)
        with pytest.raises(InputValueError, match="prepared dense weight"):
            hipskinny.moe.fused_moe(x, dense1, w2, tw, ids)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_gemm2_whole_wave_per_row_group(arch):
    """I with more chunks than half a wave (33 x 32 columns): GEMM2 with one row group per wave
    (the other tests' I take two)."""
    dt, e, k, h, i, n = F16, 4, 2, 64, 1056, 2
    w13, w2 = _experts16(e, h, i, dt, seed=21)
    x = np.random.default_rng(22).standard_normal((n, h)).astype(dt)
    tw, ids = _routing(n, k, e, seed=23)
    assert op.plan_info(_dev(arch), dt, n, h, i, e, k)[2]["kernel"].endswith("_s1")
    y = _run(arch, x, w13, w2, tw, ids)
    assert_moe(y, x, w13.astype(np.float64), w2.astype(np.float64), tw, ids)
