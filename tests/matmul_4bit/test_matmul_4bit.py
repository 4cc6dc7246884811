"""hipskinny.bnb.matmul_4bit on the emulator for every shipped arch, against exact math.

Tolerance (derived, not tuned). The reference is float64 from the exact codes: w = code[q] *
absmax, the nested absmax code2[q2] * absmax2 + offset also in float64. The kernel's products
x * code are exact inside fp32 FMAs; a lane sums 32 of them per chunk (32 roundings of u =
2**-24 relative to the running magnitude), scales the chunk sum into its accumulator (one
more per chunk: K/32 at most), the butterfly adds 6 levels, the bias one: |s - exact| <= (32
+ K/32 + 8) * u * S with S = sum_k |x w| + |bias|. Nested: the kernel decodes absmax with one
fp32 rounding (fma), u * (|code2 * absmax2| + |offset|) per block, times that block's
sum_k |x code|. Then one rounding to the output type: half an ulp.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from benchmarks.choices import override
from hipskinny import InputTypeError, InputValueError, bnb, scratch
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import _linear
from hipskinny.ops import _splitk as splitk
from hipskinny.ops import matmul_4bit as op
from hipskinny.ops._splitk import token_tiles

TAG = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}   # the kernels' dtype tags

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
U = 2.0**-24


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


def _codes(packed: np.ndarray, numel: int) -> np.ndarray:
    raw = np.asarray(packed).reshape(-1)
    c = np.empty(raw.size * 2, np.int64)
    c[0::2], c[1::2] = raw >> 4, raw & 15
    return c[:numel]


def _absmax_slack(st: bnb.QuantState) -> np.ndarray:
    """Per block, the bound of the kernel's one fp32 rounding of a nested absmax (0 when plain)."""
    if st.state2 is None:
        return np.zeros(np.asarray(st.absmax).size)
    q = np.asarray(st.absmax).astype(np.int64)
    c2 = np.asarray(st.state2.code, np.float64)[q]
    a2 = np.asarray(st.state2.absmax, np.float64)[np.arange(q.size) // 256]
    return U * (np.abs(c2 * a2) + abs(float(np.asarray(st.offset, np.float64))))


def assert_bound(y, x, packed, st, bias=None):
    m, k = (int(d) for d in st.shape)
    bs = int(st.blocksize)
    code = np.asarray(st.code, np.float64)[_codes(packed, m * k)].reshape(m, k)
    slack = _absmax_slack(st)
    per = np.arange(m * k).reshape(m, k) // bs
    w = op.dequantize_exact(packed, st)
    x64 = np.asarray(x).astype(np.float64).reshape(-1, k)
    exact = op.matmul_4bit_reference(x, packed, st, bias).reshape(-1, m)
    s = np.abs(x64) @ np.abs(w).T
    if bias is not None:
        s = s + np.abs(np.asarray(bias).astype(np.float64).reshape(-1, m))
    err = (32 + k / 32 + 8) * U * s + np.abs(x64) @ (np.abs(code) * slack[per]).T
    yd = np.asarray(y).astype(np.float64).reshape(exact.shape)
    dt = np.asarray(y).dtype
    mant, emin = (10, -14) if dt == F16 else (7, -126)
    mag = np.abs(exact) + err
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(mag, 2.0**emin))) - mant)
    bad = ~(np.abs(yd - exact) <= err + 0.5 * ulp)
    assert not bad.any(), f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs {exact[bad][0]}"


def _weights(m, k, seed, blocksize, quant_type, nested):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.2, 3.0, (m, 1)).astype(np.float32)
    return bnb.quantize_4bit(w, blocksize=blocksize, quant_type=quant_type, compress_statistics=nested)


# (N, M, K, blocksize, CUs): several blocks per row at blocksizes 32/64/128, a block spanning
# the whole row (4096), K streamed through LDS (8 x 8192 x 2 bytes > 64 KiB), M not a
# multiple of the tiles, rows of more than 256 blocks (nested: past the two absmax2 entries a
# row's scales otherwise take them from).
CASES = [(1, 37, 320, 32, 2), (3, 50, 256, 64, 3), (8, 21, 8192, 4096, 2), (5, 70, 384, 128, 2),
         (2, 9, 8256, 32, 2)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [False, True])
def test_fused_against_exact(arch, quant_type, nested):
    for i, (n, m, k, bs, cus) in enumerate(CASES):
        packed, st = _weights(m, k, i, bs, quant_type, nested)
        dt = (F16, BF16)[i % 2]
        rng = np.random.default_rng(100 + i)
        x = rng.standard_normal((n, k)).astype(dt)
        bias = rng.standard_normal(m).astype(dt) if i % 2 else None
        with hipskinny.on_device(_dev(arch, cus)):
            y = bnb.matmul_4bit(x, packed, st, bias)
            info = op.plan_info(_dev(arch, cus), dt, n, m, k)
        assert y.shape == (n, m) and y.dtype == dt
        assert info["kernel"].startswith(f"matmul_4bit_{TAG[np.dtype(dt)]}_n{n}_")
        assert_bound(y, x, packed, st, bias)
        from hipskinny.arch import ARCHS

        static = 16 * 4 + 256 * 4      # the codebook and the nested map
        assert info["staged_once"] == (n * k * 2 <= ARCHS[arch].lds_per_workgroup - static)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("n", [3, 16])
def test_nan_in_absmax_or_x_reaches_only_its_rows(arch, n):
    m, k, bs = 12, 256, 64
    packed, st = _weights(m, k, 5, bs, "nf4", False)
    x = np.random.default_rng(1).standard_normal((n, k)).astype(F16)
    absmax = np.array(st.absmax)
    absmax[(5 * k + 130) // bs] = np.nan        # a block of row 5
    absmax[(9 * k + 3) // bs] = np.inf          # a block of row 9
    bad = bnb.QuantState(absmax, st.shape, st.code, st.blocksize, st.quant_type, st.dtype)
    x[2, 7] = np.inf
    with hipskinny.on_device(_dev(arch, 2)):
        y = bnb.matmul_4bit(x, packed, bad).astype(np.float32)
    assert np.isnan(y[:, 5]).all() and not np.isfinite(y[:, 9]).any()
    rest = np.delete(np.delete(y, 2, axis=0), [5, 9], axis=1)
    assert not np.isfinite(y[2]).all() and np.isfinite(rest).all()


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_bitwise_reproducible_across_cu_counts_and_schedules(arch, keep_shards):
    # the lane-split kernel, and the split-K one with its shards reduced by the last to arrive
    for n, m, k in ((4, 300, 1024), (20, 130, 1024)):
        packed, st = _weights(m, k, 9, 64, "nf4", True)
        x = np.random.default_rng(2).standard_normal((n, k)).astype(BF16)
        outs = []
        for cus, calls in ((1, 2), (3, 1)):                     # across calls, then across CU counts
            dev = EmulatedDevice(arch, cus, seed=cus)           # seeded shuffled wave schedule
            with hipskinny.on_device(dev):
                outs += [bnb.matmul_4bit(x, packed, st).view(np.uint16) for _ in range(calls)]
        if n > op.MAX_N:
            assert op.plan_info(dev, BF16, n, m, k)["shards"] > 1
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])


def route_weights(packed, st, dt) -> np.ndarray:
    """The route's 16-bit weights: T(code[q] * scale) with the fp32 product rounded once, the
    nested scale fma(code2[q2], absmax2, offset) rounded once to fp32."""
    m, k = (int(d) for d in st.shape)
    if st.state2 is None:
        scale = np.asarray(st.absmax, np.float32)
    else:
        q = np.asarray(st.absmax).astype(np.int64)
        a2 = np.asarray(st.state2.absmax, np.float64)[np.arange(q.size) // 256]
        c2 = np.asarray(st.state2.code, np.float32).astype(np.float64)[q]
        scale = (c2 * a2 + float(np.asarray(st.offset, np.float32))).astype(np.float32)
    code = np.asarray(st.code, np.float32)[_codes(packed, m * k)]
    per = np.arange(m * k) // int(st.blocksize)
    return (code * scale[per]).astype(dt).reshape(m, k)


def assert_route_bound(y, x, w16, bias=None):
    """fp32 sums of exact 16-bit products (skinny_gemm's bound: K + 8 roundings of u relative to
    sum |x w|), bias, one rounding to the output type."""
    m, k = w16.shape
    x64, w64 = np.asarray(x).astype(np.float64).reshape(-1, k), w16.astype(np.float64)
    ref = x64 @ w64.T
    s = np.abs(x64) @ np.abs(w64).T
    if bias is not None:
        b = np.asarray(bias).astype(np.float64).reshape(-1, m)
        ref, s = ref + b, s + np.abs(b)
    dt = np.asarray(y).dtype
    mant, emin = (10, -14) if dt == F16 else (7, -126)
    err = (k + 8) * U * s
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref) + err, 2.0**emin))) - mant)
    yd = np.asarray(y).astype(np.float64).reshape(ref.shape)
    bad = ~(np.abs(yd - ref) <= err + 0.5 * ulp)
    assert not bad.any(), f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {yd[bad][0]} vs {ref[bad][0]}"


# (N, M, K, blocksize): K not a multiple of the blocksize (blocks straddle rows; K % 8 != 0
# too, so rows start mid-byte), at small N and at N > 8 (split-K); fused=False at a fusible
# shape; N beyond the fused kernels.
ROUTE_CASES = [(3, 20, 100, 64), (12, 10, 37, 32), (20, 24, 256, 64), (70, 9, 96, 32)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_dequantize_route(arch):
    """Shapes the fused kernels do not take: the device dequantize kernel into 16-bit weights,
    then skinny_gemm's kernels, within that route's bound."""
    dev = _dev(arch, 2)
    for i, (n, m, k, bs) in enumerate(ROUTE_CASES):
        nested, dt = i % 2 == 0, (F16, BF16)[i // 2 % 2]
        packed, st = _weights(m, k, 3 + i, bs, ("nf4", "fp4")[i % 2], nested)
        rng = np.random.default_rng(4 + i)
        x = rng.standard_normal((n, k)).astype(dt)
        bias = rng.standard_normal((n, m) if i % 2 else m).astype(dt) if i else None
        with hipskinny.on_device(dev):
            y = bnb.matmul_4bit(x, packed, st, bias, fused=False if i == 2 else None)
            kernels = [launch.kernel for launch in dev.launches][-2:]
        assert y.shape == (n, m) and y.dtype == dt
        assert kernels[0].startswith("dequantize_4bit_") and kernels[1].startswith("skinny_gemm_"), kernels
        assert_route_bound(y, x, route_weights(packed, st, dt), bias)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_dequantize_kernel_bitwise(arch):
    """The dequantize kernel's 16-bit weights in the route's pooled buffer, each of its loop's
    variants (nested or plain absmax; K a multiple of 8 or not), bit for bit: T(code[q] * scale)
    with the fp32 product rounded once; columns K..pitch zero."""
    dev = _dev(arch, 2)
    for i, (m, k, bs, nested, dt) in enumerate([(20, 512, 64, True, F16), (13, 320, 32, False, BF16),
                                                (9, 100, 32, True, BF16), (11, 68, 64, False, F16)]):
        packed, st = _weights(m, k, 40 + i, bs, "nf4", nested)
        with hipskinny.on_device(dev):
            bnb.matmul_4bit(np.zeros((3, k), dt), packed, st, fused=False)
        pitch = -(-k // 8) * 8
        got = np.empty((m, pitch), dt)
        dev.copy_to_host(got, scratch.pool(dev, 0).buffer(op.ROUTE_SLOT, got.nbytes), got.nbytes)
        np.testing.assert_array_equal(got[:, :k].view(np.uint16), route_weights(packed, st, dt).view(np.uint16))
        assert not got[:, k:].view(np.uint16).any()


# (N, M, K, blocksize, CUs): one token tile (8 shards of 128 columns), two (K = 544: the last
# group reaches past K), four (N = 64, a block spanning the row, 8 shards); M past 128.
SPLITK_CASES = [(16, 40, 1024, 64, 2), (33, 130, 544, 32, 3), (64, 20, 4096, 4096, 2), (9, 7, 256, 128, 1)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("nested", [False, True])
def test_fused_splitk_against_16bit_weights(arch, nested):
    """N = 9..64: the fused split-K kernel rounds each weight once to x's dtype (as the route
    and bitsandbytes' dequantize do) and sums on the matrix units in fp32: the route's bound."""
    _splitk_cases(arch, nested, SPLITK_CASES)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_small_n_on_the_splitk_kernel(arch):
    """N = 2..8 take the split-K kernel where `_linear.small_n_splitk` says (large calls on the CDNA
    parts; forced here on every arch, several shards): lanes without a token skip their partials,
    and the results keep the route's bound."""
    with override(_linear, "SMALL_N_SPLITK_WORK", "always"):
        _splitk_cases(arch, False, [(2, 40, 1024, 64, 2), (5, 130, 544, 32, 3), (8, 20, 512, 128, 1)])


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("slices", [1, 2, 4])
def test_every_slice_count(arch, slices, keep_shards, force_slices):
    """The split-K kernels with 1, 2 and 4 slices per unit where built (2 and 4 at one and two token
    tiles, 2 at four) at N of one, two and four tiles: several row blocks of 128 / slices with a
    tail, several shards of an odd number of groups (a slice without a group at the end)."""
    force_slices(slices)
    _splitk_cases(arch, slices == 2, [(12, 100, 1664, 64, 3), (40, 200, 1152, 128, 2), (24, 136, 1664, 64, 3)])


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("walk", [(1, 5), (2, 17), (1, 5, 15)], ids=lambda w: "-".join(map(str, w)))
def test_units_across_row_blocks(arch, walk, force_slices):
    """Units of the walk that end one row block and begin the next (``splitk.h``'s Walk; K = 1664 is
    13 groups a row block): 5 groups (a row block of three or four segments), 17 with two slices (a
    unit over two row blocks of 64), and 5 with row blocks padded to 15 (three equal shards each,
    units within row blocks); nested and plain scales, both dtypes, one and two token tiles."""
    force_slices(*walk)
    _splitk_cases(arch, walk[0] == 2, [(12, 300, 1664, 64, 3), (24, 200, 1664, 64, 2)])


DIRECT_ARCHS = ("gfx942", "gfx950")   # where matmul_4bit_splitk builds its _direct kernels


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("nested", [False, True])
def test_direct_x_kernel(arch, nested):
    """The _t4_s2_direct kernels (gfx942/gfx950, four token tiles, two slices: x read into registers
    by waves holding all 64 features of their unit, each taking every fourth group), forced on every
    four-tile call here (`splitk.DIRECT_TRIPS`): tokens past N, rows past M, a last group past K
    (K = 544), waves without a group (K = 256: two groups for four waves), several shards, both
    dtypes; the route's bound. Elsewhere no such kernel is built and the plan never names one."""
    cases = [(64, 130, 544, 32, 3), (40, 300, 4096, 64, 2), (49, 20, 256, 128, 1), (64, 200, 1664, 64, 3)]
    with override(splitk, "DIRECT_TRIPS", 0):
        _splitk_cases(arch, nested, cases)
        for n, m, k, _, cus in cases:
            info = op.plan_info(_dev(arch, cus), F16, n, m, k)
            assert info["direct"] == (arch in DIRECT_ARCHS), info
            if info["direct"]:
                assert info["slices"] == 2 and (info["shards"] > 1 or k < 1024)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_direct_x_kernel_reads_no_x_past_k(arch):
    """K = 544 leaves the last group's lanes past K: in a contiguous x their columns are the next
    row's first ones. An inf there (x[5, 3]) reaches token 5's outputs only -- token 4's lanes past
    K read zero (the _direct kernels' out-of-range offset), not inf times a zero weight."""
    n, m, k = 40, 130, 544
    packed, st = _weights(m, k, 6, 32, "nf4", False)
    x = np.random.default_rng(8).standard_normal((n, k)).astype(F16)
    x[5, 3] = np.inf
    with override(splitk, "DIRECT_TRIPS", 0), hipskinny.on_device(_dev(arch, 2)):
        y = bnb.matmul_4bit(x, packed, st).astype(np.float32)
        assert op.plan_info(_dev(arch, 2), F16, n, m, k)["direct"] == (arch in DIRECT_ARCHS)
    assert not np.isfinite(y[5]).all() and np.isfinite(np.delete(y, 5, axis=0)).all()


@pytest.mark.parametrize("arch", DIRECT_ARCHS)
def test_direct_x_kernel_is_reproducible(arch, keep_shards):
    """Bitwise the same across calls, CU counts and shuffled schedules (shards summed in order)."""
    n, m, k = 64, 130, 1664
    packed, st = _weights(m, k, 3, 64, "nf4", True)
    x = np.random.default_rng(5).standard_normal((n, k)).astype(F16)
    outs = []
    with override(splitk, "DIRECT_TRIPS", 0):
        for cus, calls in ((1, 2), (3, 1)):
            dev = EmulatedDevice(arch, cus, seed=cus)
            with hipskinny.on_device(dev):
                outs += [bnb.matmul_4bit(x, packed, st).view(np.uint16) for _ in range(calls)]
            assert dev.launches[-1].kernel == "matmul_4bit_splitk_f16_t4_s2_direct"
        assert op.plan_info(dev, F16, n, m, k)["shards"] > 1
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_direct_x_kernel_refuses_an_x_past_32_bit_offsets():
    """The _direct kernels' x offsets are 32-bit (one raw buffer over x's 16 * NT token rows): a row
    stride of 2**24 elements is refused with a message (checked before anything is launched)."""
    info = {"direct": True, "kernel": "matmul_4bit_splitk_f16_t4_s2_direct", "shards": 1, "token_tiles": 4}
    plan = type("Plan", (), {"info": info})()
    with pytest.raises(InputValueError, match=r"row stride 16777216 elements is too large for its 64 token rows"):
        splitk.splitk_launch(None, plan, (), {}, {"N": 40, "x_stride": 1 << 24}, "p", "c")


def _splitk_cases(arch, nested, cases):
    for i, (n, m, k, bs, cus) in enumerate(cases):
        dt = (F16, BF16)[(i + nested) % 2]
        packed, st = _weights(m, k, 20 + i, bs, ("nf4", "fp4")[i % 2], nested)
        rng = np.random.default_rng(30 + i)
        x = rng.standard_normal((n, k)).astype(dt)
        bias = (None, rng.standard_normal(m), rng.standard_normal((n, m)))[i % 3]
        bias = None if bias is None else bias.astype(dt)
        dev = _dev(arch, cus)
        with hipskinny.on_device(dev):
            y = bnb.matmul_4bit(x, packed, st, bias)
            info = op.plan_info(dev, dt, n, m, k)
        assert y.shape == (n, m) and y.dtype == dt
        nt = token_tiles(n)
        name = splitk.sliced(f"matmul_4bit_splitk_{TAG[np.dtype(dt)]}_t{nt}", nt, info["slices"])
        if info["direct"]:
            name += "_direct"
        assert dev.launches[-1].kernel == info["kernel"] == name
        assert_route_bound(y, x, route_weights(packed, st, dt), bias)


def test_bad_input_messages():
    packed, st = _weights(16, 256, 0, 64, "nf4", True)
    x = np.zeros((2, 256), F16)
    with hipskinny.on_device(_dev("gfx942", 2)):
        with pytest.raises(InputTypeError, match="x has dtype float32; supported: float16, bfloat16"):
            bnb.matmul_4bit(x.astype(np.float32), packed, st)
        with pytest.raises(InputValueError, match=r"x must be \[..., K\] with K=256"):
            bnb.matmul_4bit(np.zeros((2, 128), F16), packed, st)
        with pytest.raises(InputValueError, match=r"packed must hold \(M\*K\+1\)//2 = 2048 uint8 bytes"):
            bnb.matmul_4bit(x, packed[:100], st)
        short = bnb.QuantState(st.absmax[:10], st.shape, st.code, st.blocksize, st.quant_type, st.dtype, st.offset,
                               st.state2)
        with pytest.raises(InputValueError, match=r"absmax must be uint8 \[64\] \(nested, blocksize 64\)"):
            bnb.matmul_4bit(x, packed, short)
        with pytest.raises(InputValueError, match="bias must be float16"):
            bnb.matmul_4bit(x, packed, st, np.zeros(16, np.float32))
        with pytest.raises(InputValueError, match="N=129 tokens; supported: N = 1..128"):
            bnb.matmul_4bit(np.zeros((129, 256), F16), packed, st)
        with pytest.raises(InputValueError, match="fused=True, but the fused kernels take N = 1..64 tokens"):
            bnb.matmul_4bit(np.zeros((65, 256), F16), packed, st, fused=True)
