"""The small-N skinny GEMM code objects of every shipped arch, on the emulator, against exact
math; and the input checks the op applies to every N.

Tolerance (derived, not tuned; the same model as tests/gemv/test_gemv_emulated.py, whose helper
is reused row by row). Output y[n, m] is an fp32 sum of the K exact 16-bit products
x[n, k] * w[m, k] in a fixed order, plus the bias: <= K + 1 roundings of u = 2**-24, so
|s - exact| <= (K + 1) * u * S with S = sum_k |x[n, k] w[m, k]| + |bias|, then one rounding
to the output type (<= one output ulp more). Shapes are small except a few targeted ones:
the emulator runs ~50-100k wave-instructions per second.
"""

from __future__ import annotations

import functools
import json

import ml_dtypes
import numpy as np
import paths
import pytest
from test_gemv_emulated import assert_within_accumulation_bound

import hipskinny
from hipskinny import HipSkinnyError, InputTypeError, InputValueError, registry
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.launch import make_plan
from hipskinny.ops import _linear as lin
from hipskinny.ops import _skinny as sk
from hipskinny.ops import skinny_gemm as op


def built_tiles(n: int) -> list[int]:
    """The YTILEs kernels/skinny_gemm.hip builds for N, largest first (its N * YTILE <= 16 budget)."""
    return [y for y in (4, 2, 1) if n * y <= 16]

DTYPES = [np.float16, ml_dtypes.bfloat16]
MANIFEST = paths.REPO / "hsaco" / "manifest.json"


def assert_bound(y, x, w, bias=None):
    """The accumulation bound for every token row (bias [M], [1, M] or [N, M])."""
    n, m = y.shape
    b = None if bias is None else np.broadcast_to(np.asarray(bias).reshape(-1, m), (n, m))
    for i in range(n):
        assert_within_accumulation_bound(y[i], x[i], w, None if b is None else b[i])


def _inputs(dtype, n, m, k, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)).astype(dtype)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(dtype)
    return x, w


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    """One emulated device per (arch, CU count) for the whole module: loading a code object's
    listing costs seconds, running these small shapes much less."""
    return EmulatedDevice(arch, cus)


def _bits(a):
    return np.asarray(a).view(np.uint16)


def _streamed_k(arch: str) -> int:
    """A K whose N = 8 rows of x just exceed the arch's LDS, so x is streamed in K-chunks."""
    return ARCHS[arch].lds_per_workgroup // 16 + 104


# (dtype, N, M, K, CUs): tail K (13), K = 8, K = 1000, M not a multiple of any tile, M larger
# than CUs x groups x waves (so waves loop over tiles), two CU counts across the cases.
CASES = [
    (np.float16, 1, 300, 136, 3),
    (np.float16, 2, 5, 8, 2),
    (ml_dtypes.bfloat16, 3, 37, 13, 3),
    (np.float16, 5, 70, 1000, 2),
    (ml_dtypes.bfloat16, 4, 203, 24, 2),
    (np.float16, 8, 45, 40, 3),
]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[1]}m{c[2]}k{c[3]}cu{c[4]}")
def test_matches_exact_math(arch, case):
    dtype, n, m, k, cus = case
    x, w = _inputs(dtype, n, m, k, seed=n * 7919 + m * 31 + k)
    with hipskinny.on_device(_dev(arch, cus)):
        y = hipskinny.skinny_gemm(x, w)
    assert y.shape == (n, m) and y.dtype == np.dtype(dtype)
    assert_bound(y, x, w)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_streamed_x_and_many_tiles(arch):
    """N = 8 with K past the LDS capacity (x streamed through LDS in K-chunks), bf16 and fp16
    agree with exact math; the plan says it streamed."""
    k = _streamed_k(arch)
    dev = _dev(arch, 2)
    with hipskinny.on_device(dev):
        for dtype, m in ((ml_dtypes.bfloat16, 6), (np.float16, 3)):
            x, w = _inputs(dtype, 8, m, k, seed=m)
            y = hipskinny.skinny_gemm(x, w)
            assert_bound(y, x, w)
            info = op.plan_info(dev, dtype, 8, m, k)
            assert not info["staged_once"] and info["k_chunk"] < k
            assert info["lds_bytes"] <= ARCHS[arch].lds_per_workgroup


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_bias_forms_and_3d_x(arch):
    n, m, k = 3, 21, 72
    x, w = _inputs(ml_dtypes.bfloat16, n, m, k, seed=5)
    rng = np.random.default_rng(6)
    b_row = rng.standard_normal(m).astype(ml_dtypes.bfloat16)
    b_tok = rng.standard_normal((n, m)).astype(ml_dtypes.bfloat16)
    with hipskinny.on_device(_dev(arch, 2)):
        y1 = hipskinny.skinny_gemm(x, w, b_row)
        assert_bound(y1, x, w, b_row)
        np.testing.assert_array_equal(_bits(hipskinny.skinny_gemm(x, w, b_row.reshape(1, m))), _bits(y1))
        y3 = hipskinny.skinny_gemm(x, w, b_tok)
        assert_bound(y3, x, w, b_tok)
        # Leading dims flatten like F.linear and come back on the output.
        x3 = np.concatenate([x, x[:1]]).reshape(2, 2, k)
        y4 = hipskinny.skinny_gemm(x3, w, b_row)
        assert y4.shape == (2, 2, m)
        np.testing.assert_array_equal(_bits(y4.reshape(4, m)[:3]), _bits(y1))
        # One token as [K], and out=.
        y5 = hipskinny.skinny_gemm(x[1], w)
        assert y5.shape == (m,)
        out = np.empty((n, m), ml_dtypes.bfloat16)
        assert hipskinny.skinny_gemm(x, w, b_tok, out=out) is out
        np.testing.assert_array_equal(_bits(out), _bits(y3))


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_nan_in_x_row_0_stays_in_y_row_0(arch):
    x, w = _inputs(np.float16, 2, 40, 256, seed=3)
    x[0, 17] = np.nan
    with hipskinny.on_device(_dev(arch, 2)):
        y = hipskinny.skinny_gemm(x, w)
    assert np.isnan(y[0]).all() and not np.isnan(y[1]).any()


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_zero_x_gives_exact_zero_or_bias(arch):
    _, w = _inputs(np.float16, 4, 33, 300, seed=4)
    x = np.zeros((4, 300), np.float16)
    b = np.random.default_rng(4).standard_normal((4, 33)).astype(np.float16)
    with hipskinny.on_device(_dev(arch, 2)):
        assert not hipskinny.skinny_gemm(x, w).any()
        np.testing.assert_array_equal(hipskinny.skinny_gemm(x, w, b), b)
        np.testing.assert_array_equal(hipskinny.skinny_gemm(x, w, b[2]), np.broadcast_to(b[2], (4, 33)))


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_deterministic_across_calls_schedules_and_cu_counts(arch):
    """Bitwise equal: repeated calls, two shuffle seeds, and CU counts that pick different
    grids and tile sizes (a lane's chunks and the reduction tree depend on the wave size only)."""
    x, w = _inputs(ml_dtypes.bfloat16, 5, 64, 700, seed=9)
    results, configs = [], set()
    for cus, seed in ((1, None), (3, None), (1, 1), (3, 2)):
        dev = _dev(arch, cus) if seed is None else EmulatedDevice(arch, cus, seed=seed)
        with hipskinny.on_device(dev):
            results += [hipskinny.skinny_gemm(x, w) for _ in range(3 if seed is None else 1)]
            info = op.plan_info(dev, ml_dtypes.bfloat16, 5, 64, 700)
            configs.add((info["ytile"], info["grid"]))
    assert len(configs) > 1, "the CU counts should lead to different launch configs"
    for r in results[1:]:
        np.testing.assert_array_equal(_bits(r), _bits(results[0]))


def _launch_variant(dev, name, x_d, w_d, b_d, y_d, m, k, xs, ws, bs, kc, n, grid):
    fn, meta = registry.load(dev, op.FAMILY).kernel(name)
    plan = make_plan(fn, meta, (grid, 1, 1), shared_mem=n * kc * 2)
    dev.memset(y_d, 0xFF, n * m * 2)     # an unwritten output would stay NaN (0xFFFF)
    dev.dispatch(plan.function, plan.grid, plan.block, plan.kernarg((x_d, w_d, b_d, y_d, m, k, xs, ws, bs, kc)),
               plan.shared_mem)
    y = np.empty((n, m), np.float16)
    dev.copy_to_host(y, y_d, y.nbytes)
    return y


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_every_tile_variant_padded_strides_and_streaming(arch):
    """Device-side launches with explicit strides: x and W rows padded with NaN (never read),
    buffers allocated to the byte (the emulator faults on any access past them), a per-token
    bias with padded rows, M below one tile and not a multiple of it, K with a tail, x staged
    once and streamed in small K-chunks. Every variant gives the same bits."""
    dev = _dev(arch, 2)
    wave = ARCHS[arch].wave_size
    n, k, xs, ws, bs = 3, 1100 - 5, 1112, 1160, 40
    x, w_full = _inputs(np.float16, n, 13, k, seed=11)
    bias = np.random.default_rng(12).standard_normal((n, 13)).astype(np.float16)
    for m in (3, 13):
        w = w_full[:m]
        xp = np.full((n, xs), np.nan, np.float16)
        xp[:, :k] = x
        wp = np.full((m, ws), np.nan, np.float16)
        wp[:, :k] = w
        bp = np.full((n, bs), np.nan, np.float16)
        bp[:, :m] = bias[:, :m]
        # Exact sizes: the last row of x and W ends at column K (no padding after it).
        x_bytes, w_bytes, b_bytes = ((n - 1) * xs + k) * 2, ((m - 1) * ws + k) * 2, ((n - 1) * bs + m) * 2
        x_d, w_d, b_d, y_d = dev.alloc(x_bytes), dev.alloc(w_bytes), dev.alloc(b_bytes), dev.alloc(n * m * 2)
        dev.copy_to_device(x_d, xp.reshape(-1)[: x_bytes // 2], x_bytes)
        dev.copy_to_device(w_d, wp.reshape(-1)[: w_bytes // 2], w_bytes)
        dev.copy_to_device(b_d, bp.reshape(-1)[: b_bytes // 2], b_bytes)
        first = None
        for yt in built_tiles(n):
            for kc, grid in ((-(-k // 8) * 8, 1), (8 * wave, 2)):   # staged once; streamed, 3+ passes
                y = _launch_variant(dev, f"skinny_gemm_f16_n{n}_y{yt}", x_d, w_d, b_d, y_d, m, k,
                                    xs, ws, bs, kc, n, grid)
                assert_bound(y, x, w, bias[:, :m])
                if first is None:
                    first = y
                np.testing.assert_array_equal(_bits(y), _bits(first))
        for ptr in (x_d, w_d, b_d, y_d):
            dev.free(ptr)


def test_code_objects_have_no_spills_no_scratch_and_fit_lds():
    manifest = json.loads(MANIFEST.read_text())
    expected = {f"skinny_gemm_{t}_n{n}_y{y}" for t in ("f16", "bf16") for n in range(1, lin.MAX_N + 1)
                for y in built_tiles(n)}
    for arch in SHIPPED_ARCHS:
        entry = manifest["code_objects"][f"{arch}/skinny_gemm"]
        kernels = {k["name"]: k for k in entry["kernels"]}
        assert set(kernels) == expected, arch
        info = ARCHS[arch]
        for name, k in kernels.items():
            assert k["vgpr_spill_count"] == 0 and k["sgpr_spill_count"] == 0, (arch, name)
            assert k["private_segment_fixed_size"] == 0, (arch, name)
            assert k["group_segment_fixed_size"] <= info.lds_per_workgroup, (arch, name)
            assert k["wavefront_size"] == info.wave_size and k["max_flat_workgroup_size"] == 256  # kThreads
            # The header's budget: <= 96 VGPRs (full occupancy) on gfx11/12; >= 2 waves per
            # SIMD (two workgroups per CU, the op's cap) on gfx9.
            if info.wave_size == 32:
                assert k["vgpr_count"] <= 96 and k["occupancy"] == info.max_waves_per_simd, (arch, name)
            else:
                assert k["occupancy"] >= 2, (arch, name)


def test_config_rules():
    # Staged once while N * K_pad * 2 fits; otherwise the most columns that fit, in whole
    # 8 * wave steps.
    assert lin.k_chunk(8, 4096, 65536, 64) == 4096
    assert lin.k_chunk(8, 4200, 65536, 64) == 4096
    assert lin.k_chunk(8, 4200, 65536, 32) == 4096
    assert lin.k_chunk(3, 13, 65536, 32) == 16
    assert lin.k_chunk(8, 10344, 160 * 1024, 64) == 10240
    assert lin.k_chunk(1, 40000, 65536, 64) == 32768
    # YTILE: largest built tile that still gives every wave slot a tile.
    assert lin.ytile((4, 2, 1), 4096, 1000) == 4
    assert lin.ytile((4, 2, 1), 4096, 2000) == 2
    assert lin.ytile((4, 2, 1), 4096, 5000) == 1
    assert lin.ytile((2, 1), 4096, 10) == 2
    assert lin.ytile((4, 2, 1), 5, 64) == 1


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_planner_reads_the_tiles_the_build_made(arch):
    """The planner takes the YTILEs from the code object (the kernel sources decide them): for every
    N, the tiles of the sources' rule, largest first."""
    module = registry.load(EmulatedDevice(arch, 2), "skinny_gemm")
    for n in range(1, lin.MAX_N + 1):
        assert lin.built_ytiles(module, f"skinny_gemm_bf16_n{n}") == tuple(built_tiles(n)), n
    with pytest.raises(HipSkinnyError, match="no lane-split kernel"):
        lin.built_ytiles(module, "skinny_gemm_bf16_n9")


def test_plan_cache_reuses_plans():
    dev = _dev("gfx1201", 2)
    x, w = _inputs(np.float16, 2, 9, 16)
    with hipskinny.on_device(dev):
        hipskinny.skinny_gemm(x, w)
        misses = sk._plans.misses
        hipskinny.skinny_gemm(x, w)
    assert sk._plans.misses == misses


# ---------------------------------------------------------------------------------------
# bad input (rejected before any device work)

def _ok(n=2, m=8, k=16, dtype=np.float16):
    return np.ones((n, k), dtype), np.ones((m, k), dtype)


@pytest.mark.parametrize("bad_dtype", [np.float32, np.int8])
def test_wrong_dtype(bad_dtype):
    x, w = _ok()
    with pytest.raises(InputTypeError, match="supported: float16, bfloat16"):
        hipskinny.skinny_gemm(x.astype(bad_dtype), w.astype(bad_dtype))


def test_mixed_dtypes():
    x, w = _ok()
    with pytest.raises(InputTypeError, match="share one dtype"):
        hipskinny.skinny_gemm(x, w.astype(ml_dtypes.bfloat16))
    with pytest.raises(InputTypeError, match="share one dtype"):
        hipskinny.skinny_gemm(x, w, np.zeros(8, ml_dtypes.bfloat16))


def test_k_mismatch_and_w_rank():
    x, w = _ok()
    with pytest.raises(InputValueError, match=r"with K=16 \(w is \[M=8, K=16\]\); got shape \(2, 24\)"):
        hipskinny.skinny_gemm(np.ones((2, 24), np.float16), w)
    with pytest.raises(InputValueError, match="2-D"):
        hipskinny.skinny_gemm(x, np.ones((1, 8, 16), np.float16))
    with pytest.raises(InputValueError, match=r"x must be \[..., K\] .*got shape \(\)"):
        hipskinny.skinny_gemm(np.ones((), np.float16), w)


@pytest.mark.parametrize("bshape", [(7,), (3, 8), (8, 1)])
def test_bias_shape(bshape):
    x, w = _ok()
    with pytest.raises(InputValueError, match=r"\[M\], \[1, M\] or \[N, M\]"):
        hipskinny.skinny_gemm(x, w, np.zeros(bshape, np.float16))


def test_bad_out():
    x, w = _ok()
    with pytest.raises(InputValueError, match="out must be"):
        hipskinny.skinny_gemm(x, w, out=np.empty((2, 9), np.float16))
    with pytest.raises(InputValueError, match="out must be"):
        hipskinny.skinny_gemm(x, w, out=np.empty((2, 8), np.float32))


def test_reference_semantics():
    x = np.array([[1, 2], [3, 4]], np.float16)
    w = np.array([[1, 0], [0, 1], [1, 1]], np.float16)
    b = np.array([[0, 0, 1], [1, 0, 0]], np.float16)
    np.testing.assert_array_equal(op.skinny_gemm_reference(x, w, b), [[1, 2, 4], [4, 4, 7]])
    assert op.skinny_gemm_reference(x.reshape(1, 2, 2), w).shape == (1, 2, 3)
