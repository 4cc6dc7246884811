"""The split-K skinny GEMM (N = 9..128, matrix units) of every shipped arch, on the emulator.

Tolerance (derived, not tuned): each matrix instruction adds its exact 16-bit products to
the fp32 accumulator with one rounding (the emulator's model; CDNA3 hardware groups and
truncates products differently but within the same per-term budget), shard partials
are added in fp32, then the bias: fewer than K + 1 roundings of u = 2**-24 in all, so the
bound of tests/gemv/test_gemv_emulated.py applies row by row:
|y - exact| <= (K + 1) * u * S + ulp_out(|exact| + (K + 1) * u * S), S = sum |x w| + |bias|.
"""

from __future__ import annotations

import functools
import json

import ml_dtypes
import numpy as np
import paths
import pytest
from test_skinny_gemm import _bits, _inputs, assert_bound

import hipskinny
from hipskinny import InputValueError, registry, scratch
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.launch import make_plan
from hipskinny.ops import _linear as lin
from hipskinny.ops import _splitk as spk
from hipskinny.ops import fp8_linear as fp8_op
from hipskinny.ops import matmul_4bit as matmul_4bit_op
from hipskinny.ops import skinny_gemm as op
from hipskinny.ops import w4a16_linear as w4a16_op

MANIFEST = paths.REPO / "hsaco" / "manifest.json"


@functools.cache
def _dev(arch: str, cus: int) -> EmulatedDevice:
    return EmulatedDevice(arch, cus)


# (dtype, N, M, K, CUs): every token-tile variant; M below one 128-row block, not a
# multiple of it, and with more work units than workgroups (the grid loops); K split into
# several shards, K with a tail group (not a multiple of 128), K not a multiple of 8
# (host inputs are padded), K > 8192; two CU counts.
CASES = [
    (np.float16, 9, 40, 264, 2),
    (ml_dtypes.bfloat16, 16, 130, 1000, 3),
    (np.float16, 20, 50, 131, 2),
    (ml_dtypes.bfloat16, 33, 300, 776, 2),
    (np.float16, 64, 70, 520, 3),
    (ml_dtypes.bfloat16, 128, 150, 264, 2),
    (np.float16, 12, 20, 8200, 3),
]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[1]}m{c[2]}k{c[3]}cu{c[4]}")
def test_matches_exact_math(arch, case, keep_shards):
    dtype, n, m, k, cus = case
    x, w = _inputs(dtype, n, m, k, seed=n * 7919 + m * 31 + k)
    dev = _dev(arch, cus)
    with hipskinny.on_device(dev):
        y = hipskinny.skinny_gemm(x, w)
    assert y.shape == (n, m) and y.dtype == np.dtype(dtype)
    assert_bound(y, x, w)
    info = op.plan_info(dev, dtype, n, m, -(-k // 8) * 8)
    assert info["kernel"].startswith("skinny_gemm_splitk_") and 16 * info["token_tiles"] >= n
    if k > 8192:
        assert info["shards"] > 1 and info["units"] > info["grid"]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_capped_long_shards_match_exact_math(arch, force_slices):
    """The planner's own one-slice shards at N = 12, M = 8, K = 8200 (the partial cap: 3 or 4 shards of
    17-22 groups -- gfx9 publishes 12 token rows, RDNA 16 --, three x passes each, a tail group): the
    groups loaded ahead across passes, the last ones re-reading the shard's last group (spk.h
    pipelined), the tail's columns past K zero."""
    n, m, k = 12, 8, 8200
    x, w = _inputs(np.float16, n, m, k, seed=11)
    force_slices(1)
    dev = _dev(arch, 3)
    with hipskinny.on_device(dev):
        y = hipskinny.skinny_gemm(x, w)
    info = op.plan_info(dev, np.float16, n, m, k)
    assert info["shards"] in (3, 4) and info["unit_len"] >= 17 * 128 and k % 128
    assert_bound(y, x, w)


def test_shards_and_partials_cover_the_cases():
    """The cases above exercise one shard and several, and partial scratch sized by shape: a slot per
    segment of the walk (`_splitk.walk`: fewer than units + row blocks)."""
    dev = _dev("gfx942", 2)
    infos = [op.plan_info(dev, c[0], c[1], c[2], -(-c[3] // 8) * 8) for c in CASES]
    assert {i["shards"] == 1 for i in infos} == {True, False}
    for info, (_, _n, m, k, _) in zip(infos, CASES, strict=True):
        rows = spk.SPLITK_ROWS // info["slices"]            # a row block's features
        blocks, groups = -(-m // rows), -(-(-(-k // 8) * 8) // 128)
        unit_bytes = rows * 16 * info["token_tiles"] * 4
        length, stride = info["unit_len"] // 128, info["block_len"] // 128
        assert stride == groups or stride == spk.padded(groups, length)   # the strides spk.h's Walk takes
        units, _, _, shards = spk.walk(blocks, groups, length, stride)
        assert (info["units"], info["shards"]) == (units, shards)
        assert info["partial_bytes"] == (0 if shards == 1 else (units + blocks) * unit_bytes)


# Units of the walk (`_splitk.walk`) at M = 300 (three row blocks of 128, two tiles of the last idle)
# and K = 1000 (8 groups, the last 104 columns): 3 groups (units cross every row block's end, a row
# block of three or four segments), 5, 8 (a row block each, no partials), 11 (a unit ends in the next
# row block), 16 (two whole row blocks, no partials); two slices (six row blocks of 64) at 3 and 11;
# padded row blocks (units within them, equal shards: stride 9 for 3 groups, 10 for 5).
WALKS = [(1, 3, 8), (1, 5, 8), (1, 8, 8), (1, 11, 8), (1, 16, 8), (2, 3, 8), (2, 11, 8), (1, 3, 9), (1, 5, 10),
         (2, 3, 9)]


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("walk", WALKS, ids=lambda w: f"s{w[0]}l{w[1]}b{w[2]}")
def test_walk_matches_exact_math_on_any_grid(arch, walk, force_slices):
    """Every unit length's segments and shard sums (``spk.h``'s Walk) against exact math, bitwise the
    same on 1 and 3 CUs (grids of 1 and 3 workgroups: the same segments, summed in the same order),
    and the atomic variant within the same bound."""
    slices, length, stride = walk
    n, m, k = 16, 300, 1000
    x, w = _inputs(np.float16, n, m, k, seed=length * 10 + slices + stride)
    force_slices(slices, length, stride)
    ys = []
    for cus in (1, 3):
        with hipskinny.on_device(_dev(arch, cus)):
            ys.append(hipskinny.skinny_gemm(x, w))
            info = op.plan_info(_dev(arch, cus), np.float16, n, m, k)
            assert (info["slices"], info["unit_len"], info["block_len"]) == (slices, 128 * length, 128 * stride)
            assert info["grid"] == min(info["units"], cus * info["groups_per_cu"])
            atomic = hipskinny.skinny_gemm(x, w, deterministic=False)
    assert_bound(ys[0], x, w)
    np.testing.assert_array_equal(_bits(ys[1]), _bits(ys[0]))
    assert_bound(atomic, x, w)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_bias_forms_3d_x_and_out(arch):
    n, m, k = 24, 37, 392
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
        y4 = hipskinny.skinny_gemm(x.reshape(4, 6, k), w, b_row)        # flattened like F.linear
        assert y4.shape == (4, 6, m)
        np.testing.assert_array_equal(_bits(y4.reshape(n, m)), _bits(y1))
        out = np.empty((n, m), ml_dtypes.bfloat16)
        assert hipskinny.skinny_gemm(x, w, b_tok, out=out) is out
        np.testing.assert_array_equal(_bits(out), _bits(y3))


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_nan_in_x_row_0_stays_in_y_row_0(arch, keep_shards):
    x, w = _inputs(np.float16, 17, 40, 640, seed=3)
    x[0, 517] = np.nan
    with hipskinny.on_device(_dev(arch, 2)):
        y = hipskinny.skinny_gemm(x, w)
        assert op.plan_info(_dev(arch, 2), np.float16, 17, 40, 640)["shards"] > 1
    assert np.isnan(y[0]).all() and not np.isnan(y[1:]).any()


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_zero_x_gives_exact_zero_or_bias(arch):
    _, w = _inputs(np.float16, 4, 33, 304, seed=4)
    x = np.zeros((10, 304), np.float16)
    b = np.random.default_rng(4).standard_normal((10, 33)).astype(np.float16)
    with hipskinny.on_device(_dev(arch, 2)):
        assert not hipskinny.skinny_gemm(x, w).any()
        np.testing.assert_array_equal(hipskinny.skinny_gemm(x, w, b), b)
        np.testing.assert_array_equal(hipskinny.skinny_gemm(x, w, b[2]), np.broadcast_to(b[2], (10, 33)))
        assert not hipskinny.skinny_gemm(x, w, deterministic=False).any()


def _pool_bytes(dev, name):
    pool = scratch.pool(dev, 0)
    size = pool.capacity(name)
    data = np.empty(size, np.uint8)
    dev.copy_to_host(data, pool.buffer(name, size), size)
    return data


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_deterministic_across_calls_schedules_and_cu_counts(arch, keep_shards):
    """Bitwise equal: 3 calls (fresh scratch, then reused twice), two shuffle seeds, two CU counts
    (different grids); the shard boundaries come from the arch, not the device. The counters are
    zero after every call (self-cleaning); deterministic=False is within the bound and leaves its atomic
    slices zero too."""
    n, m, k = 20, 300, 1024
    x, w = _inputs(np.float16, n, m, k, seed=9)
    results, grids = [], set()
    for cus, seed, calls in ((1, None, 3), (5, None, 1), (1, 1, 1), (5, 2, 1)):
        dev = _dev(arch, cus) if seed is None else EmulatedDevice(arch, cus, seed=seed)
        with hipskinny.on_device(dev):
            results += [hipskinny.skinny_gemm(x, w) for _ in range(calls)]
            info = op.plan_info(dev, np.float16, n, m, k)
            grids.add(info["grid"])
            assert info["shards"] > 1
            assert not _pool_bytes(dev, "skinny_gemm.counters").any()
    assert len(grids) > 1, "the CU counts should lead to different grids"
    for r in results[1:]:
        np.testing.assert_array_equal(_bits(r), _bits(results[0]))
    assert_bound(results[0], x, w)

    dev = EmulatedDevice(arch, 3, seed=7)
    with hipskinny.on_device(dev):
        fast = hipskinny.skinny_gemm(x, w, deterministic=False)
        assert op.plan_info(dev, np.float16, n, m, k, deterministic=False)["kernel"].endswith("_atomic")
        assert not _pool_bytes(dev, "skinny_gemm.counters").any()
        assert not _pool_bytes(dev, "skinny_gemm.atomic_slices").any()
        again = hipskinny.skinny_gemm(x, w, deterministic=False)   # clean scratch: same bound again
        hipskinny.skinny_gemm(x, w)                          # leaves its partials as written ...
        after = hipskinny.skinny_gemm(x, w, deterministic=False)   # ... which the atomic slices are not
    assert_bound(fast, x, w)
    assert_bound(again, x, w)
    assert_bound(after, x, w)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
@pytest.mark.parametrize("n", [5, 9])
def test_padded_strides_exact_buffers_and_every_variant(arch, n):
    """Device-side launches with explicit strides: x and W rows padded with NaN (never read),
    buffers allocated to the byte (the emulator faults on any access past them), a per-token
    bias with padded rows, M below one block; one shard and several; every token-tile and slice
    variant; those that cover N with the same slices give the same bits (padded tokens only add zero
    columns; a slice's groups and their order do not depend on the token tiles). N = 5 and 9 leave
    lanes of the one-tile kernels without a token (they skip their partials: the atomic slice
    must still come back clean)."""
    dev = _dev(arch, 2)
    m, k, xs, ws, bs = 19, 1032, 1040, 1096, 24
    x, w = _inputs(np.float16, n, m, k, seed=11)
    bias = np.random.default_rng(12).standard_normal((n, m)).astype(np.float16)
    xp = np.full((n, xs), np.nan, np.float16)
    xp[:, :k] = x
    wp = np.full((m, ws), np.nan, np.float16)
    wp[:, :k] = w
    bp = np.full((n, bs), np.nan, np.float16)
    bp[:, :m] = bias
    x_bytes, w_bytes, b_bytes = ((n - 1) * xs + k) * 2, ((m - 1) * ws + k) * 2, ((n - 1) * bs + m) * 2
    x_d, w_d, b_d, y_d = dev.alloc(x_bytes), dev.alloc(w_bytes), dev.alloc(b_bytes), dev.alloc(n * m * 2)
    dev.copy_to_device(x_d, xp.reshape(-1)[: x_bytes // 2], x_bytes)
    dev.copy_to_device(w_d, wp.reshape(-1)[: w_bytes // 2], w_bytes)
    dev.copy_to_device(b_d, bp.reshape(-1)[: b_bytes // 2], b_bytes)
    module = registry.load(dev, op.SPLITK_FAMILY)
    for length, grid, atomic in ((1152, 1, False), (128, 3, False), (256, 2, True)):
        shards, first = -(-k // length), {}
        for nt, slices in ((t, sl) for t in spk.TOKEN_TILES
                           for sl in spk.built_slices(module, f"skinny_gemm_splitk_f16_t{t}", t)):
            part_bytes = 4 * spk.SPLITK_ROWS // slices * 16 * nt * (1 if atomic else shards)
            part_d, cnt_d = dev.alloc(part_bytes), dev.alloc(4)
            dev.memset(part_d, 0, part_bytes)
            dev.memset(cnt_d, 0, 4)
            dev.memset(y_d, 0xFF, n * m * 2)      # an unwritten output would stay NaN
            name = spk.sliced(f"skinny_gemm_splitk_f16_t{nt}{'_atomic' if atomic else ''}", nt, slices)
            fn, meta = module.kernel(name)
            plan = make_plan(fn, meta, (grid, 1, 1), shared_mem=spk.SPLITK_LDS)
            dev.dispatch(plan.function, plan.grid, plan.block,
                       plan.kernarg((x_d, w_d, b_d, y_d, part_d, cnt_d, n, m, k, xs, ws, bs, length, shards * length)),
                       plan.shared_mem)
            y = np.empty((n, m), np.float16)
            dev.copy_to_host(y, y_d, y.nbytes)
            assert_bound(y, x, w, bias)
            left = np.empty(part_bytes // 4 + 1, np.uint32)
            dev.copy_to_host(left[:1], cnt_d, 4)
            assert left[0] == 0, (nt, length)                       # counter reset
            if atomic:
                dev.copy_to_host(left[1:], part_d, part_bytes)
                assert not left.any(), (nt, length)                 # atomic slice cleaned
            elif slices not in first:
                first[slices] = y
            else:   # the k order inside a shard (and slice) does not depend on NT
                np.testing.assert_array_equal(_bits(y), _bits(first[slices]))
            dev.free(part_d)
            dev.free(cnt_d)
    for ptr in (x_d, w_d, b_d, y_d):
        dev.free(ptr)


def test_code_objects_have_no_spills_no_scratch_and_fit_lds():
    manifest = json.loads(MANIFEST.read_text())
    # every token tile with one slice, and S = 2 and 4 slices at 1 and 2 tiles, 2 at 4 (spk.h's Layout)
    variants = [f"t{nt}" for nt in spk.TOKEN_TILES] + ["t1_s2", "t1_s4", "t2_s2", "t2_s4", "t4_s2"]
    expected = {f"skinny_gemm_splitk_{t}_{v}{a}" for t in ("f16", "bf16") for v in variants for a in ("", "_atomic")}
    for arch in SHIPPED_ARCHS:
        entry = manifest["code_objects"][f"{arch}/skinny_gemm_splitk"]
        kernels = {k["name"]: k for k in entry["kernels"]}
        assert set(kernels) == expected, arch
        info = ARCHS[arch]
        for name, k in kernels.items():
            assert k["vgpr_spill_count"] == 0 and k["sgpr_spill_count"] == 0, (arch, name)
            assert k["private_segment_fixed_size"] == 0, (arch, name)
            assert k["group_segment_fixed_size"] + spk.SPLITK_LDS <= info.lds_per_workgroup, (arch, name)
            assert k["wavefront_size"] == info.wave_size and k["max_flat_workgroup_size"] == 256  # kThreads
            # Recorded occupancy is the arch's rule applied to the recorded VGPRs; at least two
            # waves per SIMD (a workgroup per CU with room to hide latency).
            assert k["occupancy"] == info.occupancy(k["vgpr_count"], 0, k["max_flat_workgroup_size"] // info.wave_size)
            assert k["occupancy"] >= 2, (arch, name)


def test_config_rules():
    assert [spk.token_tiles(n) for n in (9, 16, 17, 32, 33, 64, 65, 128)] == [1, 1, 2, 2, 4, 4, 8, 8]
    with pytest.raises(InputValueError):
        spk.token_tiles(129)
    # Shards give the flagship bandwidth x DRAM latency / SPLITK_UNIT_BYTES units of 128 rows (gfx942:
    # 270, gfx1151: 11), at least 128 * NT columns each.
    mi300, strix, navi31 = ARCHS["gfx942"], ARCHS["gfx1151"], ARCHS["gfx1100"]
    assert (round(spk.splitk_units(mi300)), round(spk.splitk_units(strix))) == (270, 11)
    assert spk.unit_len(mi300, 8, 4096, 4096) == 1024                  # 32 blocks want 9, NT=8 caps at 4 shards
    assert spk.unit_len(mi300, 1, 4096, 4096) == 384                   # 9 wanted: 342 units of 3 groups
    assert spk.unit_len(mi300, 4, 128256, 4096) == 4096                # lm_head: 1002 blocks, no split
    assert spk.unit_len(mi300, 1, 20, 8200) == 256                     # one block: <= 64 shards -> 33 of 256
    assert spk.unit_len(navi31, 2, 28672, 4096) == 4096                # 224 blocks already give 28 units
    assert spk.unit_len(strix, 1, 2048, 4096) == 4096                  # 16 blocks: no split on the APU
    assert spk.unit_len(strix, 1, 128, 2048) == 128                    # the router: one block, 8 shards leave 8 of 11
                                                                       # units: 16 of one group each
    # the walk: units may cross row blocks; a row block's segments and the units' count
    assert spk.walk(3, 8, 3) == (8, 10, 10, 4) and spk.walk(3, 8, 8) == (3, 3, 0, 1)
    assert spk.walk(3, 8, 11) == (3, 5, 4, 2) and spk.walk(3, 8, 16) == (2, 3, 0, 1)
    # padded to whole units (`padded`): units within row blocks, the former equal shards
    assert spk.padded(8, 3) == 9 and spk.walk(3, 8, 3, 9) == (9, 9, 9, 3) and spk.walk(3, 8, 5, 10) == (6, 6, 6, 2)
    for info, nt, m, k in ((mi300, 8, 4096, 14336), (ARCHS["gfx1201"], 1, 6144, 4096),
                           (ARCHS["gfx950"], 4, 4096, 1000)):
        length = spk.unit_len(info, nt, m, k)
        assert length % spk.SPLITK_GROUP == 0 and (length >= 128 * nt or length >= k)


def test_partial_cap():
    """Every split-K op keeps its shards' fp32 partials within PARTIAL_SHARE of the call's unavoidable
    bytes at one token tile (`_splitk.partial_shards`), counting the token rows the kernels publish;
    more token tiles keep the uncapped shards (their kernels load one group ahead or none)."""
    assert [spk.partial_rows(ARCHS["gfx942"], n, 1) for n in (2, 5, 8, 16)] == [4, 8, 8, 16]
    assert [spk.partial_rows(ARCHS["gfx1201"], n, 1) for n in (4, 8, 9)] == [8, 8, 16]
    assert spk.partial_rows(ARCHS["gfx1100"], 4, 1) == 16 and spk.partial_rows(ARCHS["gfx942"], 20, 2) == 32
    # Qwen3-30B-A3B router (128 x 2048) and o_proj (2048 x 4096), Llama-3 qkv (6144 x 4096) at N = 16
    # split 6-16 ways before the cap; Llama-3 down_proj (4096 x 14336) still splits.
    ops = ((w4a16_op.plan_info, 4), (matmul_4bit_op.plan_info, 4), (fp8_op.plan_info, 8),
           (hipskinny.ops.skinny_gemm.plan_info, 16))
    for arch in SHIPPED_ARCHS:
        dev = EmulatedDevice(arch, 1)
        for n, m, k in ((16, 128, 2048), (16, 2048, 4096), (16, 6144, 4096), (12, 4096, 14336), (40, 4096, 14336)):
            for plan_info, bits in ops:
                info = plan_info(dev, np.float16, n, m, k)
                unavoidable = m * k * bits / 8 + 2 * n * k + 2 * n * m
                rows, unit = spk.partial_rows(ARCHS[arch], n, info["token_tiles"]), 128 // info["slices"]
                split = spk.walk(-(-m // unit), -(-k // 128), info["unit_len"] // 128, info["block_len"] // 128)[2]
                written = split * unit * rows * 4
                with pytest.MonkeyPatch.context() as mp:
                    mp.setattr(spk, "PARTIAL_SHARE", 1e9)
                    _, uncapped, _ = spk.splitk_split(ARCHS[arch], info["token_tiles"], m, k, n=n, weight_bits=bits,
                                                   x_bytes=2, slices=(info["slices"],),
                                                   compute=spk.compute_ratio(info["kernel"], arch, info["token_tiles"]))
                if info["token_tiles"] > 1:
                    assert info["unit_len"] == 128 * uncapped
                    continue
                assert written <= spk.PARTIAL_SHARE * unavoidable, (arch, n, m, k, info)
        # (the 4-bit router: 2 shards' 8 KiB partials within 9% of its 197 KiB)
        assert matmul_4bit_op.plan_info(dev, np.float16, 16, 128, 2048)["shards"] == 2
    assert fp8_op.plan_info(EmulatedDevice("gfx942", 1), np.float16, 16, 4096, 14336)["shards"] > 1


def test_small_n_splitk_rule():
    """The quantized ops' kernel at N = 2..8 (`_linear.small_n_splitk`): split-K for calls of large
    N x M x K on the CDNA parts only, never at N = 1 or for skinny_gemm; the plans follow it
    (Llama-3 down_proj N = 4 on the matrix units, Qwen3 o_proj N = 4 lane-split)."""
    rule = lin.small_n_splitk
    assert rule("w4a16_linear", "gfx942", 4, 4096, 14336) and rule("fp8_linear", "gfx950", 2, 4096, 14336)
    assert rule("matmul_4bit", "gfx942", 8, 4096, 4096) and not rule("matmul_4bit", "gfx942", 4, 4096, 4096)
    assert not rule("w4a16_linear", "gfx942", 1, 4096, 14336) and not rule("w4a16_linear", "gfx942", 9, 4096, 14336)
    assert not rule("skinny_gemm", "gfx942", 8, 4096, 14336)
    assert not any(rule("w4a16_linear", arch, 8, 4096, 14336) for arch in ("gfx1100", "gfx1151", "gfx1201"))
    for arch in SHIPPED_ARCHS:
        dev = EmulatedDevice(arch, 1)
        for plan_info in (w4a16_op.plan_info, matmul_4bit_op.plan_info, fp8_op.plan_info):
            big, small = plan_info(dev, np.float16, 4, 4096, 14336), plan_info(dev, np.float16, 4, 2048, 4096)
            assert ("unit_len" in big) == (arch in lin.SMALL_N_SPLITK_WORK) and "unit_len" not in small


def test_n_above_128_names_the_supported_ranges():
    x, w = np.ones((129, 16), np.float16), np.ones((8, 16), np.float16)
    with pytest.raises(InputValueError, match=r"N=129 .*N = 1\.\.128"):
        hipskinny.skinny_gemm(x, w)
    with pytest.raises(InputValueError, match=r"N=130"):
        hipskinny.skinny_gemm(np.ones((2, 65, 16), np.float16), w)


def test_every_splitk_kernel_has_its_compute():
    """Every split-K kernel of every shipped code object has a measured compute ratio
    (`_splitk.SPLITK_COMPUTE`, directly or through its per-tensor twin): none is planned as free."""
    for arch in SHIPPED_ARCHS:
        dev = EmulatedDevice(arch, 1)
        for family in ("skinny_gemm_splitk", "fp8_linear_splitk", "matmul_4bit_splitk", "w4a16_linear_splitk"):
            for kernel in registry.load(dev, family).code.kernels:
                assert spk.compute_ratio(kernel.name, arch, 1) > 0, (arch, kernel.name)
                assert spk.compute_ratio(kernel.name, arch, 4) >= spk.compute_ratio(kernel.name, arch, 1)


def test_shards_weigh_compute_on_the_busiest_cu():
    """A call of few row blocks gets the shards that spread its compute over the CUs when its kernel's
    compute rivals its bytes (`_splitk.splitk_shards`), not where the bytes dominate or the partials
    would cost more than the CUs give back."""
    navi31, strix = ARCHS["gfx1100"], ARCHS["gfx1151"]
    down = dict(n=64, weight_bits=4, x_bytes=2)         # Llama-3 down_proj, 4-bit, N = 64: 32 row blocks
    assert spk.splitk_shards(navi31, 4, 4096, 14336, **down) == 1                   # memory only: 32 units >= 28
    four_bit = spk.compute_ratio("matmul_4bit_splitk_f16_t4", "gfx1100", 4)
    assert four_bit > 1                                                            # matrix-bound on the XTX
    # 96 units of 38 groups on 96 CUs, three equal shards per row block (units within row blocks: 96
    # segments, where the unpadded walk's 95 units would run 125)
    assert spk.splitk_split(navi31, 4, 4096, 14336, compute=four_bit, **down) == (1, 38, 114)
    assert spk.walk(32, 112, 38, 114) == (96, 96, 96, 3) and spk.walk(32, 112, 38) == (95, 125, 125, 4)
    fp16 = spk.compute_ratio("skinny_gemm_splitk_f16_t1", "gfx1151", 1)
    assert fp16 < 0.1 and spk.splitk_shards(strix, 1, 4096, 14336, n=16, weight_bits=16, x_bytes=2,
                                            compute=fp16) == 1                   # bytes dominate on the APU
    # an lm_head already gives every CU its units: no shards, whatever the compute
    assert spk.splitk_shards(navi31, 1, 128256, 4096, n=16, weight_bits=4, x_bytes=2,
                             compute=spk.compute_ratio("w4a16_linear_splitk_f16_t1", "gfx1100", 1)) == 1


def test_slices_give_small_layers_their_cus():
    """Slices (`_splitk.splitk_split`): a layer of few row blocks whose partials are capped takes units
    of 128 / S features instead of staying on few CUs; a layer that fills the CUs keeps one slice; the
    names and the variants a code object builds (`sliced`, `built_slices`)."""
    mi300, navi31 = ARCHS["gfx942"], ARCHS["gfx1100"]
    qkv = dict(n=16, weight_bits=4, x_bytes=2, compute=spk.compute_ratio("matmul_4bit_splitk_f16_t1", "gfx942", 1))
    # 4-bit Qwen3-30B-A3B qkv at N = 16: 40 row blocks, one shard (16 groups) under the cap; 4 slices:
    # 160 units
    assert spk.splitk_split(mi300, 1, 5120, 2048, slices=(1,), **qkv) == (1, 16, 16)
    assert spk.splitk_split(mi300, 1, 5120, 2048, slices=(1, 4), **qkv) == (4, 16, 16)
    # lm_head: 1187 row blocks, units of two whole ones (594 of them: as even on 304 CUs as 1187)
    assert spk.splitk_split(mi300, 1, 151936, 2048, slices=(1, 4), **qkv) == (1, 32, 16)
    # the router on the XTX at N = 64 (one row block, matrix-bound): two slices of its four shards
    router = dict(n=64, weight_bits=16, x_bytes=2, compute=spk.compute_ratio("skinny_gemm_splitk_f16_t4", "gfx1100", 4))
    assert spk.splitk_split(navi31, 4, 128, 2048, slices=(1, 2), **router) == (2, 4, 16)
    # 4-bit Llama-3 qkv at N = 16 (48 row blocks, two shards under the cap): 4 slices would queue 384
    # units on 304 CUs; 2 slices give 192
    assert spk.splitk_split(mi300, 1, 6144, 4096, slices=(1, 2, 4), **qkv) == (2, 16, 32)
    # FP8 Llama-3 o_proj at N = 64: two slices take the place of half the shards (256 units either
    # way, half the partials)
    fp8 = spk.compute_ratio("fp8_linear_splitk_f16_ocp_t4", "gfx942", 4)
    o_proj = dict(n=64, weight_bits=8, x_bytes=2, compute=fp8)
    assert spk.splitk_split(mi300, 4, 4096, 4096, slices=(1,), **o_proj) == (1, 4, 32)
    assert spk.splitk_split(mi300, 4, 4096, 4096, slices=(1, 2), **o_proj) == (2, 8, 32)
    # 4-bit Llama-3 gate_up at N = 4 on gfx950 (224 row blocks on 256 CUs): 512 units of 14 groups, two
    # per CU, not 448 of 16 (192 CUs with two, 64 with one)
    gate_up = dict(n=4, weight_bits=4, x_bytes=2, compute=spk.compute_ratio("matmul_4bit_splitk_f16_t1", "gfx950", 1))
    assert spk.splitk_split(ARCHS["gfx950"], 1, 28672, 4096, slices=(1, 2, 4), **gate_up) == (1, 14, 32)
    # ... and at N = 16, where the partials' cap holds the one-slice plan to 448 units of 16 groups
    # (192 CUs with two): two slices, 512 units of 28 groups (two on every CU, no more than the
    # one-slice plan's busiest), at half the partials
    gate_up16 = dict(gate_up, n=16)
    assert spk.splitk_split(ARCHS["gfx950"], 1, 28672, 4096, slices=(1,), **gate_up16) == (1, 16, 32)
    assert spk.splitk_split(ARCHS["gfx950"], 1, 28672, 4096, slices=(1, 2, 4), **gate_up16) == (2, 28, 32)
    assert spk.sliced("skinny_gemm_splitk_f16_t1_atomic", 1, 4) == "skinny_gemm_splitk_f16_t1_s4_atomic"
    assert spk.sliced("fp8_linear_splitk_f16_ocp_block_t4", 4, 2) == "fp8_linear_splitk_f16_ocp_block_t4_s2"
    assert spk.sliced("w4a16_linear_splitk_bf16_t2", 2, 1) == "w4a16_linear_splitk_bf16_t2"
    for arch in SHIPPED_ARCHS:
        dev = EmulatedDevice(arch, 1)
        module = registry.load(dev, "matmul_4bit_splitk")
        assert [spk.built_slices(module, f"matmul_4bit_splitk_f16_t{nt}", nt) for nt in (1, 2, 4)] == [
            (1, 2, 4), (1, 2, 4), (1, 2)]
        assert [spk.built_slices(module, f"matmul_4bit_splitk_bf16_t{nt}", nt) for nt in (2, 4)] == [(1, 2, 4), (1, 2)]
        assert spk.built_slices(registry.load(dev, "fp8_linear_splitk"), "fp8_linear_splitk_f16_ocp_t8", 8) == (1,)


def test_short_units_pay_their_segments_own_work(monkeypatch):
    """A segment's set-up and reduction (`_splitk.SPLITK_UNIT_OVERHEAD` groups) weigh against shorter
    units: 4-bit Llama-3 o_proj at N = 4 on gfx950 keeps 8 shards of 4 groups (256 units on 256 CUs),
    not 11 of 3 (352 units), which give each CU fewer groups but run a third more segments."""
    mi355 = ARCHS["gfx950"]
    call = dict(n=4, weight_bits=4, x_bytes=2, compute=spk.compute_ratio("matmul_4bit_splitk_f16_t1", "gfx950", 1))
    assert spk.splitk_split(mi355, 1, 4096, 4096, **call) == (1, 4, 32)
    monkeypatch.setattr(spk, "SPLITK_UNIT_OVERHEAD", 0.0)
    assert spk.splitk_split(mi355, 1, 4096, 4096, **call) == (1, 3, 33)
