"""The skeleton every linear-like op shares (skinny_gemm, fp8_linear, matmul_4bit, w4a16_linear): the
plan of the lane-split kernels for small N, the plan and launch of the split-K kernels (``splitk.h``)
for larger N, and the test for torch's own fallback on a ROCm GPU. Each op module keeps its format
checks, its kernel choice and its reference.

The configuration rules (K-chunk, workgroups per CU, YTILE, grid; token tiles, units, shards, slices,
direct x, scratch) are written out in docs/linear.md; the comments here name them. Results never
depend on the CU count, the tile or the grid: ``deterministic=True`` holds across calls, schedules and
CU counts.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import operands, registry, tensors
from ..arch import ArchInfo
from ..devices.base import Device
from ..errors import HipSkinnyError, InputValueError
from ..launch import LaunchPlan, make_plan, threads
from ..operands import Launch, Operands
from ..tensors import TensorView

MAX_N = 8                           # small-N kernel
SPLITK_MAX_N = 128                  # split-K kernel, N = MAX_N + 1 .. SPLITK_MAX_N
SPLITK_ROWS = 128                   # output features per split-K work unit
SPLITK_GROUP = 128                  # K columns per split-K instruction group (shard granule)
SPLITK_LDS = 32 * 1024              # x staged per pass: 16 * NT tokens x 1024 / NT columns
TOKEN_TILES = (1, 2, 4, 8)          # split-K variants: NT 16-token tiles
MAX_SPLITK_GROUPS_PER_CU = 4
# Split-K work units wanted: enough weight loads in flight to cover DRAM's latency at the flagship's
# bandwidth (Little's law: bandwidth x latency bytes), counting SPLITK_UNIT_BYTES per unit. From the arch
# facts only, so it is the same on every GPU of an arch (results do not depend on the CU count):
# about gfx942 270 units (0.9 per CU), gfx950 407 (1.6), gfx1100 28, gfx1151 11, gfx1201 18 (0.3). Swept by
# benchmarks.choices against the former 2 units per CU on every arch: the RDNA parts' weight stream
# no longer waits behind fp32 partials it does not need (Qwen3 o_proj fp8 N = 64 on gfx1151: 43.19 ->
# 35.87 µs predicted), the router (one row block) still splits.
SPLITK_UNIT_BYTES = 8192
# Shard partials, at most this share of a call's unavoidable bytes (weights, x, y) at one token tile: every
# shard's fp32 tile is written once and read back from cache, and the cache model charges the written
# lines as DRAM writes (dirty when the launch ends). Without the cap a small layer split 16 ways moved up
# to twice its bytes (4-bit Qwen3 router N = 16: dram_ratio 1.96). 9%: the report's DRAM-ratio target at
# N <= 16 is 1.10, and the rest of a launch's excess (x's lines, counters, rounding) stays under 1%;
# measured at N = 16 (matmul_4bit, fp8_linear, skinny_gemm, six layers, five archs): caps 0.05 / 0.08 /
# 0.10 gave DRAM ratios up to 1.050 / 1.078 / 1.099 and 24 / 16 / 12 rows compute-bound above 1.15x on
# the busiest CU (small layers held to few units), predicted totals 3134 / 3059 / 3022 us.
PARTIAL_SHARE = 0.09
# Lane-split workgroups per CU, at most: benchmarks.choices predicts 4 at least as fast as 2 on every
# row it sweeps, up to 30% faster where a wave's chain of round trips bounds the time (fp8_linear
# Llama qkv N = 4 on gfx950: 6.19 -> 4.33 us); registers and LDS cap it below that for many kernels.
MAX_GROUPS_PER_CU = 4
# N = 2..MAX_N of the quantized ops on the CDNA parts: their VALU is slow next to their DRAM bandwidth,
# and the quantized lane-split kernels spend VALU per weight *and token* (widen, then a dot per token),
# so at a few tokens they run VALU- or latency-bound; the split-K kernels widen each weight once for a
# 16-token matrix tile. Their shard reduction costs a few round trips that only a large call amortizes:
# split-K from this much work N x M x K (multiply-adds) on, per arch; absent, never (the RDNA parts'
# lane-split kernels stay memory-bound at N <= 8). From `python -m benchmarks.choices --n 2 4 8`
# (qkv/o/down/router of Llama-3-8B and Qwen3-30B-A3B; the three ops and fp8 W8A8): the rule's choice is
# within 1.4% of the per-row best in total (Llama-3 down_proj N = 4, w4a16 on gfx950: 8.73 -> 5.47 µs).
SMALL_N_SPLITK_WORK: dict[str, float] = {"gfx942": 8e7, "gfx950": 1e8}
SMALL_N_SPLITK_OPS = ("fp8_linear", "matmul_4bit", "w4a16_linear")
# The split-K kernels' VALU, matrix and LDS time over the bandwidth floor when their work is spread
# evenly over the flagship's CUs, at one and at four 16-token tiles (linear in between and beyond), by
# kernel (its name without the token tiles, bf16 as f16, fnuz as ocp) and arch: the medians of the
# report's split-K rows (RESULTS.json at e59e079, the routers left out; `python -m benchmarks.choices
# --compute-table` prints them). A unit's compute runs on one CU, so a call of few units leaves the
# others idle: `splitk_split` weighs that against the shards' partials. Absent: memory only.
SPLITK_COMPUTE: dict[str, dict[str, tuple[float, float]]] = {
    "fp8_linear_splitk_f16_ocp": {"gfx942": (0.44, 0.51), "gfx950": (0.68, 0.80), "gfx1100": (0.37, 0.95),
                                  "gfx1151": (0.20, 0.53), "gfx1201": (0.19, 0.40)},
    "fp8_linear_splitk_f16_ocp_block": {"gfx1100": (0.41, 0.96), "gfx1151": (0.23, 0.53)},
    "fp8_linear_splitk_fp8_ocp": {"gfx942": (0.10, 0.25), "gfx950": (0.15, 0.31), "gfx1201": (0.05, 0.20)},
    "fp8_linear_splitk_fp8_ocp_block": {"gfx942": (0.11, 0.27), "gfx950": (0.17, 0.44), "gfx1201": (0.06, 0.20)},
    "matmul_4bit_splitk_f16": {"gfx942": (0.84, 1.05), "gfx950": (1.11, 1.65), "gfx1100": (0.69, 1.74),
                               "gfx1151": (0.38, 0.96), "gfx1201": (0.47, 0.73)},
    "skinny_gemm_splitk_f16": {"gfx942": (0.11, 0.25), "gfx950": (0.18, 0.26), "gfx1100": (0.12, 0.49),
                               "gfx1151": (0.07, 0.27), "gfx1201": (0.05, 0.20)},
    "w4a16_linear_splitk_f16": {"gfx942": (0.64, 0.91), "gfx950": (1.00, 1.12), "gfx1100": (0.51, 1.75),
                                "gfx1151": (0.28, 0.96), "gfx1201": (0.27, 0.73)},
}
# A unit's compute beyond its groups' (prologue, partials, reduction), in groups of its shard: about one,
# from `python -m benchmarks.profile matmul_4bit gfx950 4 4096 14336` (a prologue of ~170 VALU against
# ~180 per group); an assumption for the other kernels. Short shards pay it more often.
SPLITK_UNIT_OVERHEAD = 1.0
# Slices per split-K unit (``splitk.h``): the kernels' variants ``_s<S>`` split a unit's 128 features
# into 128 / S, each row group's S waves taking every S-th group of the shard and summing in LDS, so a
# small layer has S times the units without fp32 partials. x is staged for 1 / S of the weights it was;
# SPLITK_SLICE_COST: the compute added per extra slice, as a share of the kernel's (SPLITK_COMPUTE). The
# VALU per weight at 4 slices against 1, same shards (`benchmarks.choices.measure`, Qwen3-30B-A3B qkv
# 5120 x 2048 and o_proj 2048 x 4096 at N = 16): +22% matmul_4bit gfx942, +30% fp8_linear gfx950, +47%
# w4a16_linear gfx942 (o_proj); at 2 slices, N = 64 on gfx1100, +10% (its matrix roof unchanged).
SPLITK_SLICES = (1, 2, 4)
SPLITK_SLICE_COST = 0.1
# Units that cross a row block's end (the unpadded walk, `walk`) only where the call's unavoidable bytes
# take at least SPLITK_CROSSING_TRIPS DRAM round trips (`ArchInfo.load_latency_ns`) on the flagship: a
# crossing unit runs a second reduction (publish, count, read back: three dependent round trips) in
# its workgroup's chain, which other waves hide only when the call is throughput-bound. 12: the
# longest chains the report measures for the one-token-tile split-K kernels at N <= 16 are 7-15 round
# trips (RESULTS.json, `round_trips`), so below that the call is latency-bound. (Measured at 5458b9a,
# crossing units wherever the estimate preferred them: 37 report rows >1% slower, all latency-bound,
# e.g. FP8 4096 x 4096 at N = 16 on gfx942, 3.43 -> 4.5 us, 1.6-3.2 us of bytes.)
SPLITK_CROSSING_TRIPS = 12
# The two-slice ``_direct`` variant of a four-token-tile kernel (matmul_4bit_splitk on gfx9: x read into
# registers by waves that each hold all 64 features of their unit, not staged in LDS): its LDS traffic is
# the codebook lookups only, and each wave walks a quarter of a shard's groups. `splitk_plan` takes it for
# every two-slice plan -- measured (`python -m benchmarks.report --op matmul_4bit`, N = 64, every
# gfx942/gfx950 row whose plan has two slices) 5-22% faster, none slower (Llama-3 qkv on gfx942 4.84 ->
# 3.77 us) -- and in place of a one-slice plan (the same units' length: twice the units of half the
# rows) where the call's unavoidable bytes take at least DIRECT_TRIPS DRAM round trips on the flagship:
# Llama-3 lm_head on gfx950 50.35 -> 37.05 us, gate_up 11.43 -> 10.99 (memory-bound); below that the
# one-slice staged kernel stays (Llama-3 down_proj on gfx950, 9 round trips: 6.18 us, 6.40 direct).
DIRECT_TRIPS = 16


def k_chunk(n: int, k: int, lds_bytes: int, wave_size: int, chunk: int = 8, op: str = "skinny_gemm",
            elem_bytes: int = 2) -> int:
    """Columns of x staged in LDS per pass (see the module docstring); ``chunk``: the columns a
    lane takes at a time (fp8_linear: 16); ``elem_bytes``: bytes per staged element."""
    k_pad = -(-k // chunk) * chunk
    fit = lds_bytes // (elem_bytes * n)
    if k_pad <= fit:
        return k_pad
    step = chunk * wave_size
    if fit < step:
        raise InputValueError(f"{op}: {n} rows of x do not fit {lds_bytes} bytes of LDS")
    return fit // step * step


def groups_per_cu(info: Any, meta: Any, lds: int, most: int) -> int:
    """Workgroups per CU that the kernel's registers and LDS allow: at least 1, at most `most`."""
    waves = threads(meta) // info.wave_size
    per_simd = info.occupancy(meta.vgpr_count, meta.group_segment_fixed_size + lds, waves)
    return max(1, min(most, per_simd * info.simds_per_cu // waves))


def lane_split_grid(tiles: tuple[int, ...], m: int, cu_count: int, groups: int, waves: int) -> tuple[int, int]:
    """(YTILE, grid) of the small-N lane-split kernels: persistent, the ``waves`` of each workgroup
    striding over the tiles; ``tiles``: the YTILEs built for N (`built_ytiles`)."""
    yt = ytile(tiles, m, cu_count * groups * waves)
    count = -(-m // yt)
    return yt, max(1, min(cu_count * groups, -(-count // waves)))


def built_ytiles(module: Any, prefix: str) -> tuple[int, ...]:
    """The YTILEs of the lane-split kernels ``{prefix}_y<YTILE>`` in ``module`` (a loaded code object),
    largest first. The kernel sources decide which exist (a tile's N x YTILE accumulators must fit
    the register budget); the planner only reads them."""
    pattern = re.compile(re.escape(prefix) + r"_y(\d+)")
    found = sorted((int(m.group(1)) for k in module.code.kernels if (m := pattern.fullmatch(k.name))), reverse=True)
    if not found:
        raise HipSkinnyError(f"no lane-split kernel {prefix}_y<YTILE> in the {module.family} code object")
    return tuple(found)


def lane_split_plan(device: Device, family: str, prefix: str, n: int, m: int, k: int, *, chunk: int = 8,
                    op: str = "skinny_gemm", elem: int = 2, reserved: int = 0, sums: bool = False) -> LaunchPlan:
    """The plan of a small-N lane-split kernel ``{prefix}_y{YTILE}`` of code-object ``family`` by
    this module's rules, for kernels that stage N x kc values of ``elem`` bytes of x after their
    static LDS, then ``reserved`` bytes (fp8_linear's block scales); ``sums``: plus one fp32 per
    token and 32-column chunk (N * kc / 8 bytes; w4a16 bf16). ``chunk``: the K columns a lane takes
    at a time. Not cached: the caller's plan cache holds it."""
    info = device.arch
    module = registry.load(device, family)
    # Occupancy depends on the kernel's registers: judge it on the largest tile built for N.
    tiles = built_ytiles(module, prefix)
    _, meta_max = module.kernel(f"{prefix}_y{tiles[0]}")
    free = info.lds_per_workgroup - meta_max.group_segment_fixed_size - reserved
    kc = k_chunk(n, k, free * 16 // 17 if sums else free, info.wave_size, chunk, op, elem)
    lds = n * kc * elem + (n * kc // 8 if sums else 0) + reserved
    groups = groups_per_cu(info, meta_max, lds, MAX_GROUPS_PER_CU)
    yt, grid = lane_split_grid(tiles, m, device.properties.cu_count, groups, threads(meta_max) // info.wave_size)
    fn, meta = module.kernel(f"{prefix}_y{yt}")
    return make_plan(fn, meta, (grid, 1, 1), shared_mem=lds,
                     info={"kernel": f"{prefix}_y{yt}", "ytile": yt, "k_chunk": kc, "lds_bytes": lds,
                           "groups_per_cu": groups, "grid": grid, "staged_once": kc >= k})


def ytile(tiles: tuple[int, ...], m: int, wave_slots: int) -> int:
    """Rows per wave tile: the largest of ``tiles`` (those built for N, largest first) whose tile count
    still gives every wave slot a tile; the smallest when none does."""
    for y in tiles:
        if -(-m // y) >= wave_slots:
            return y
    return tiles[-1]


def token_tiles(n: int) -> int:
    """16-token tiles of the split-K variant that covers N tokens."""
    for nt in TOKEN_TILES:
        if 16 * nt >= n:
            return nt
    raise InputValueError(f"skinny_gemm: N={n} is above the split-K kernel's {16 * TOKEN_TILES[-1]} tokens")


def splitk_units(info: ArchInfo) -> float:
    """Split-K work units wanted on `info`'s flagship GPU (see SPLITK_UNIT_BYTES)."""
    return info.peak_bandwidth_gbs * info.load_latency_ns[2] / SPLITK_UNIT_BYTES    # GB/s x ns = bytes


def small_n_splitk(op: str, arch: str, n: int, m: int, k: int) -> bool:
    """Whether ``op``'s call of N = 2..MAX_N tokens takes the split-K kernel on ``arch``
    (SMALL_N_SPLITK_WORK): a rule of the call's shape and the arch, never of the CU count."""
    work = SMALL_N_SPLITK_WORK.get(arch)
    return op in SMALL_N_SPLITK_OPS and work is not None and 2 <= n <= MAX_N and n * m * k >= work


def partial_rows(info: ArchInfo, n: int, nt: int) -> int:
    """Token rows of a work unit's fp32 tile that the kernel publishes (``splitk.h``'s finish_shards):
    with one token tile a lane whose first result row is past N publishes nothing, and a lane's rows
    span `ArchInfo.acc_row_span` -- on gfx9 rows come in fours per lane (4 * ceil(N / 4)), on gfx12
    in eights (8 at N <= 8), gfx11's lanes interleave rows 2r + lane / 16 (all 16)."""
    if nt > 1:
        return 16 * nt
    span = info.acc_row_span
    return span * -(-n // span)


def unavoidable_bytes(n: int, m: int, k: int, weight_bits: int, x_bytes: int) -> float:
    """A call's bytes that any kernel moves: weights at ``weight_bits`` per element, x at ``x_bytes``,
    the 16-bit output."""
    return m * k * weight_bits / 8 + n * k * x_bytes + 2 * n * m


def shard_partial_bytes(info: ArchInfo, n: int, nt: int, m: int, rows: int = SPLITK_ROWS) -> int:
    """The fp32 partial bytes one shard of every row block (``rows`` features) publishes (`partial_rows`
    token rows)."""
    return -(-m // rows) * rows * partial_rows(info, n, nt) * 4


def partial_shards(info: ArchInfo, n: int, nt: int, m: int, k: int, weight_bits: int, x_bytes: int) -> int:
    """The most shards whose fp32 partials stay within PARTIAL_SHARE of the call's unavoidable bytes
    (`unavoidable_bytes`); at least 1."""
    per_shard = shard_partial_bytes(info, n, nt, m)
    return max(1, int(PARTIAL_SHARE * unavoidable_bytes(n, m, k, weight_bits, x_bytes) // per_shard))


def kernel_stem(kernel: str) -> str:
    """A split-K kernel's name as SPLITK_COMPUTE keys it: without token tiles, slices and the atomic
    variant, bf16 as f16, fnuz as ocp (their compute is the same)."""
    return (re.sub(r"_t\d+(_s\d+)?", "", kernel).replace("_atomic", "").replace("_direct", "").replace("bf16", "f16")
            .replace("fnuz", "ocp"))


def sliced(kernel: str, nt: int, slices: int) -> str:
    """The name of split-K kernel ``kernel`` (at ``nt`` token tiles) with ``slices`` slices per unit:
    ``_t<nt>`` becomes ``_t<nt>_s<slices>`` (one slice: the name as it is)."""
    return kernel if slices == 1 else re.sub(rf"_t{nt}(?=_|$)", f"_t{nt}_s{slices}", kernel, count=1)


def built_slices(module: Any, kernel: str, nt: int) -> tuple[int, ...]:
    """The slice counts ``module`` (a loaded code object) builds for split-K kernel ``kernel``: 1 and
    each S whose `sliced` name it has, or that name's ``_direct`` variant (the kernel sources decide;
    the planner only reads them)."""
    names = {k.name for k in module.code.kernels}
    return tuple(s for s in SPLITK_SLICES
                 if s == 1 or sliced(kernel, nt, s) in names or f"{sliced(kernel, nt, s)}_direct" in names)


def compute_ratio(kernel: str, arch: str, nt: int) -> float:
    """A split-K kernel's compute time over its bandwidth floor at ``nt`` token tiles, evenly spread
    (SPLITK_COMPUTE; ``kernel``: a kernel name, token tiles and variant suffixes allowed; a block-scaled
    kernel not measured: its per-tensor twin's); 0 unknown."""
    stem = kernel_stem(kernel)
    one, four = (SPLITK_COMPUTE.get(stem, {}).get(arch) or SPLITK_COMPUTE.get(stem.replace("_block", ""), {}).get(arch)
                 or (0.0, 0.0))
    return max(0.0, one + (four - one) * (nt - 1) / 3)


def padded(groups: int, unit_groups: int) -> int:
    """A row block's stride in the walk when its units stay within it: its groups rounded up to whole
    units (the former equal shards of a row block)."""
    return -(-groups // unit_groups) * unit_groups


def walk(blocks: int, groups: int, unit_groups: int, stride: int | None = None) -> tuple[int, int, int, int]:
    """``splitk.h``'s Walk of ``blocks`` row blocks of ``groups`` 128-column groups each, ``stride``
    groups apart (default ``groups``: unpadded; `padded`: units within row blocks), cut into units of
    ``unit_groups`` consecutive groups (unpadded, a unit may end one row block and begin the next):
    (units, segments in all -- a unit's part of one row block --, segments of the row blocks that are
    split, each publishing an fp32 partial tile, the most segments of one row block)."""
    stride = groups if stride is None else stride
    at = np.arange(blocks, dtype=np.int64) * stride
    count = (at + groups - 1) // unit_groups - at // unit_groups + 1
    units = -(-((blocks - 1) * stride + groups) // unit_groups)
    return (units, int(count.sum()), int(count[count > 1].sum()), int(count.max()))


def splitk_split(info: ArchInfo, nt: int, m: int, k: int, *, n: int, weight_bits: int | None, x_bytes: int,
                 compute: float = 0.0, slices: tuple[int, ...] = (1,)) -> tuple[int, int, int]:
    """(slices, unit groups, block stride) for a split-K call (see the module docstring), ``slices`` the
    counts built (row blocks of 128 / S features for S slices), a unit ``unit groups`` consecutive
    128-column groups of the row blocks' walk, a row block ``block stride`` groups of it (`walk`).
    Candidates: a row block's groups cut into equal shards, units within row blocks (`padded`; at one
    slice, at least the shards that give `splitk_units` units; at most one per 128 columns, at least
    128 * nt columns each), and the lengths that deal the unpadded walk evenly to the flagship's CUs,
    r units each (where units cross row blocks only if the call's bytes take SPLITK_CROSSING_TRIPS
    round trips); at one token tile the split row blocks' partials within their cap. The estimate --
    the larger of the bytes (the partials included, slowed by too few units in flight) and ``compute``
    (`compute_ratio`, plus a segment's own SPLITK_UNIT_OVERHEAD and SPLITK_SLICE_COST per extra slice)
    on the busiest of the flagship's CUs -- picks: the one-slice plan first, then more slices at no
    longer units than it (two slices: at most twice as long) and no more units on the flagship's
    busiest CU than it (or one). Of the candidates within 1% of the best estimate: the fewest slices,
    then the fewest partials,
    then the longest units, equal shards first."""
    groups = -(-k // SPLITK_GROUP)
    little = splitk_units(info)
    cus = info.default_cu_count
    most = max(1, min(groups, k // (SPLITK_GROUP * nt)))
    shortest = -(-groups // most)
    cap = None
    if weight_bits is not None and nt == 1:      # (more token tiles: shorter pipelines)
        cap = PARTIAL_SHARE * unavoidable_bytes(n, m, k, weight_bits, x_bytes)
        most = min(most, partial_shards(info, n, nt, m, k, weight_bits, x_bytes))
    unavoidable = unavoidable_bytes(n, m, k, weight_bits or 16, x_bytes)
    crossing = unavoidable / (info.peak_bandwidth_gbs * 1e9) >= SPLITK_CROSSING_TRIPS * info.load_latency_ns[2] * 1e-9

    @functools.cache
    def facts(sl: int, length: int, stride: int) -> tuple[int, int, int, int]:
        rows = SPLITK_ROWS // sl
        blocks = -(-m // rows)
        units, segments, split, _ = walk(blocks, groups, length, stride)
        return blocks, units, segments, split * rows * partial_rows(info, n, nt) * 4

    def estimate(sl: int, length: int, stride: int) -> float:
        blocks, units, segments, partials = facts(sl, length, stride)
        memory = (1 + partials / unavoidable) * max(1.0, little / units)
        # The busiest CU's groups, a segment's own work (set-up and reduction) as SPLITK_UNIT_OVERHEAD
        # groups, over the average CU's when every row block is one segment.
        busiest = -(-units // cus) * (length + SPLITK_UNIT_OVERHEAD * segments / units)
        cost = compute * (1 + SPLITK_SLICE_COST * (sl - 1)) * busiest * cus / (blocks * (groups + SPLITK_UNIT_OVERHEAD))
        return max(memory, cost)

    def best_of(candidates: list[tuple[int, int, int]]) -> tuple[int, int, int]:
        best = min(estimate(*c) for c in candidates)
        return next(c for c in candidates if estimate(*c) <= 1.01 * best)

    def walks(sl: int, least: int) -> list[tuple[int, int]]:
        """(unit groups, block stride): equal shards from ``least`` shards of a row block on, and the
        even deals of the unpadded walk to the CUs (r units each, as many as the shards give at most),
        allowed ones: the fewest partials first, then the longest units, equal shards first."""
        blocks = -(-m // (SPLITK_ROWS // sl))
        cut = {(x, padded(groups, x)) for x in {-(-groups // s) for s in range(least, most + 1)}}
        rounds = max(-(-blocks * -(-groups // c) // cus) for c in range(least, most + 1))
        even = {(x, groups) for x in {-(-blocks * groups // (cus * r)) for r in range(1, rounds + 1)}
                if crossing or x % groups == 0 or groups % x == 0}
        ok = [w for w in cut | even if w[0] >= shortest
              and (cap is None or w[0] >= groups or facts(sl, *w)[3] <= cap)]
        return sorted(ok, key=lambda w: (facts(sl, *w)[3], -w[0], w[1] == groups and groups % w[0] != 0)) \
            or [(groups, groups)]

    one = best_of([(1, *w) for w in walks(1, max(1, min(math.ceil(little / -(-m // SPLITK_ROWS)), most)))])
    # More slices at no longer units than the one-slice plan (a wave's chain of groups, length / slices,
    # never grows), or two slices at up to twice its length (the same units with half the partials,
    # each wave's chain of groups unchanged, a unit's x passes at most doubled: measured on the 109
    # report rows where it changed the plan, 49 >5% faster, 4 slower, at most 10%: matmul_4bit Llama-3
    # qkv N = 4 on gfx942, 3.30 -> 3.63 us; four slices at fewer shards lost up to 18%, FP8 W8A8
    # block-scaled 4096 x 4096 N = 16). And no more units on the flagship's busiest CU than the one-slice
    # plan puts there (or one): queued behind each other, a CU's units each pay their own x passes and
    # reduction, which the estimate does not see (measured: FP8 W8A8 block-scaled Llama-3 qkv N = 16 on
    # gfx942, 240 units -> 960 with 4 slices, 5.17 -> 6.87 us, latency-bound). (Up to the CUs, as
    # before, kept the 4-bit Llama-3 gate_up at N = 16 on gfx950 at one slice, 448 units of 16 groups
    # on 256 CUs, VALU-bound at 1.22x on its busiest CU, where two slices give 512 units of 28 groups,
    # two on every CU, at half the partials: measured on the 22 report rows the rule changed, 20
    # faster -- that one 9.36 -> 8.67 us, FP8 gate_up N = 64 17.06 -> 15.22 us, 4-bit qkv N = 64
    # 4.72 -> 3.47 us -- and 2 slower, the 4-bit Llama-3 qkv at N = 4 on gfx950, 384 -> 480 units,
    # latency-bound: matmul_4bit 3.34 -> 3.45 us, w4a16_linear 2.93 -> 3.06 us.)
    queued = max(1, -(-facts(*one)[1] // cus))
    return best_of([one] + [(sl, *w) for sl in sorted(slices) if sl > 1 for w in walks(sl, 1)
                            if (w[0] <= one[1] or (sl == 2 and w[0] <= 2 * one[1]))
                            and -(-facts(sl, *w)[1] // cus) <= queued])


def splitk_shards(info: ArchInfo, nt: int, m: int, k: int, *, n: int, weight_bits: int | None, x_bytes: int,
                  compute: float = 0.0) -> int:
    """The most shards (segments) of a row block in the plan of the one-slice kernels (`splitk_split`
    with slices 1): 1, no row block split."""
    _, length, stride = splitk_split(info, nt, m, k, n=n, weight_bits=weight_bits, x_bytes=x_bytes, compute=compute)
    return walk(-(-m // SPLITK_ROWS), -(-k // SPLITK_GROUP), length, stride)[3]


def unit_len(info: ArchInfo, nt: int, m: int, k: int, *, n: int | None = None, weight_bits: int | None = None,
             x_bytes: int = 2, compute: float = 0.0) -> int:
    """K columns per split-K unit of the one-slice kernels for N tokens (default 16 * nt) of x at
    ``x_bytes`` per element (see the module docstring and `splitk_split`); a multiple of 128.
    ``weight_bits`` (the weights' bits per element) caps the partials at one token tile
    (`partial_shards`); None: no cap (and 16-bit weights in the estimate)."""
    n = 16 * nt if n is None else n
    return SPLITK_GROUP * splitk_split(info, nt, m, k, n=n, weight_bits=weight_bits, x_bytes=x_bytes,
                                       compute=compute)[1]


def direct_x(info: ArchInfo, n: int, m: int, k: int, *, weight_bits: int | None, x_bytes: int) -> bool:
    """Whether a split-K call takes its kernel's ``_direct`` variant where one is built (DIRECT_TRIPS: the
    call's unavoidable bytes take that many DRAM round trips on `info`'s flagship)."""
    seconds = unavoidable_bytes(n, m, k, weight_bits or 16, x_bytes) / (info.peak_bandwidth_gbs * 1e9)
    return seconds >= DIRECT_TRIPS * info.load_latency_ns[2] * 1e-9


def splitk_plan(device: Device, family: str, kernel_name: Callable[[int, bool], str], n: int, m: int, k: int, *,
                lds: int = SPLITK_LDS, atomic: bool = False, weight_bits: int | None = None,
                x_bytes: int = 2) -> LaunchPlan:
    """The split-K configuration every split-K family shares (this module's, fp8_linear's and the
    4-bit ones'): token tiles for N, slices (those the code object builds, `built_slices`) and shards
    from the arch's flagship CU count (never the device's: the same bits on every GPU), a persistent
    grid of this device's CUs x the workgroups per CU the kernel's registers and ``lds`` allow.
    ``kernel_name(token_tiles, atomic)`` names the one-slice kernel in ``family``; ``atomic`` asks for
    the atomic variant when there is more than one shard; ``weight_bits`` and ``x_bytes`` (the
    operands' sizes) cap the shards' partials (PARTIAL_SHARE); None: no cap."""
    info = device.arch
    nt = token_tiles(n)
    module = registry.load(device, family)
    base = kernel_name(nt, False)
    slices, length, stride = splitk_split(info, nt, m, k, n=n, weight_bits=weight_bits, x_bytes=x_bytes,
                                          compute=compute_ratio(base, info.name, nt),
                                          slices=built_slices(module, base, nt))
    # the two-slice _direct variant (deterministic) where built: for a two-slice plan, and for a one-slice
    # plan of a long call (the same units' length, twice the units)
    direct_name = f"{sliced(base, nt, 2)}_direct"
    direct = (not atomic and direct_name in {kn.name for kn in module.code.kernels}
              and (slices == 2 or (slices == 1 and direct_x(info, n, m, k, weight_bits=weight_bits,
                                                            x_bytes=x_bytes))))
    if direct:
        slices = 2
    rows = SPLITK_ROWS // slices
    blocks = -(-m // rows)
    units, _, _, shards = walk(blocks, -(-k // SPLITK_GROUP), length, stride)
    use_atomic = atomic and shards > 1
    name = direct_name if direct else sliced(kernel_name(nt, use_atomic), nt, slices)
    fn, meta = module.kernel(name)
    groups = groups_per_cu(info, meta, lds, MAX_SPLITK_GROUPS_PER_CU)
    grid = max(1, min(units, device.properties.cu_count * groups))
    unit_floats = rows * 16 * nt
    # a slot per segment, u + block < units + blocks (splitk.h's Walk; that bound, not the exact
    # units + blocks - 1, so that the scratch scales with M like the rest of the plan), or one per row
    # block (atomic)
    partial_bytes = 0 if shards == 1 else 4 * unit_floats * (blocks if use_atomic else units + blocks)
    return make_plan(fn, meta, (grid, 1, 1), shared_mem=lds,
                     info={"kernel": name, "token_tiles": nt, "slices": slices, "unit_len": SPLITK_GROUP * length,
                           "block_len": SPLITK_GROUP * stride, "shards": shards, "units": units,
                           "groups_per_cu": groups, "grid": grid, "direct": direct,
                           "lds_bytes": lds, "partial_bytes": partial_bytes,
                           "counter_bytes": 4 * blocks if shards > 1 else 0})


def splitk_launch(device: Device, plan: LaunchPlan, pointers: tuple[str, ...], ptrs: dict[str, str],
                  values: dict[str, Any], partials: str, counters: str
                  ) -> tuple[Launch, tuple[tuple[str, int], ...]]:
    """The launch of a split-K kernel (``splitk.h``: its ``partials`` and ``counters`` pointers after
    the call's, then the values) and the scratch slots it needs: none when one shard covers K (null
    pointers), else the slots named ``partials`` and ``counters``, sized by the plan, after ``pointers``."""
    info = plan.info
    if info.get("direct") and 32 * info["token_tiles"] * values["x_stride"] >= 2**31:
        # (the _direct kernels address x's rows -- their token tiles' 16 * NT, those past N too --
        # through one raw buffer: 32-bit byte offsets)
        raise InputValueError(f"{info['kernel']}: x's row stride {values['x_stride']} elements is too large for "
                              f"its {16 * info['token_tiles']} token rows' 32-bit offsets (below 2**31 bytes); use a "
                              "contiguous x")
    if info["shards"] == 1:
        return operands.launch(device, plan, pointers, **ptrs, partials=None, counters=None, **values), ()
    slots = ((partials, info["partial_bytes"]), (counters, info["counter_bytes"]))
    return operands.launch(device, plan, (*pointers, partials, counters), **ptrs, partials=partials,
                           counters=counters, **values), slots


def plan_launch(device: Device, plan: LaunchPlan, pointers: tuple[str, ...], ptrs: dict[str, str],
                values: dict[str, Any], n: int, partials: str, counters: str
                ) -> tuple[Launch, tuple[tuple[str, int], ...]]:
    """The launch of a lane-split plan (``values`` and its kc) or of a split-K one (``values``, N and
    its walk: unit and row block lengths; scratch slots as `splitk_launch`), with the scratch slots it needs."""
    info = plan.info
    if "unit_len" not in info:
        return operands.launch(device, plan, pointers, **ptrs, **values, kc=info["k_chunk"]), ()
    walk_args = {"unit_len": info["unit_len"], "block_len": info["block_len"]}
    return splitk_launch(device, plan, pointers, ptrs, {"N": n, **values, **walk_args},
                         partials, counters)


def on_rocm_torch(ops: Operands) -> bool:
    """Whether the call's operands are torch tensors on a ROCm GPU (where the torch routes apply)."""
    xv = ops["x"]
    return xv is not None and xv.kind == "torch" and not ops.on_host and xv.device_type == tensors.DL_ROCM


def outside(ops: Operands, op: str, why: str, fallback: Callable[[], Any], supported: str) -> Any:
    """A call outside the kernels' range: torch tensors on a ROCm GPU take ``fallback()`` (logged at
    debug level); anything else is an error naming what is ``supported``."""
    if on_rocm_torch(ops):
        logging.getLogger(f"{__package__}.{op}").debug("%s: %s is outside the kernels' range; falling back to "
                                                       "torch.nn.functional.linear", op, why)
        return fallback()
    raise InputValueError(f"{op}: {why}; supported: {supported}")


# ----------------------------------------------------------------------------------------------
# Checks and the reference's last step, shared by every linear op


def tokens(op: str, xv: TensorView, m: int, k: int, weight: str = "the weight") -> int:
    """N, the rows of x ``[..., K]`` (leading dims flattened), for a weight ``[M, K]``."""
    if len(xv.shape) < 1 or xv.shape[-1] != k:
        raise InputValueError(f"{op}: x must be [..., K] with K={k} ({weight} is [M={m}, K={k}]); "
                              f"got shape {xv.shape}")
    return int(np.prod(xv.shape[:-1], dtype=np.int64))


def check_bias(op: str, bv: TensorView | None, n: int, m: int, dtype: np.dtype | None = None) -> None:
    """A bias ``[M]``, ``[1, M]`` or ``[N, M]`` (in ``dtype`` when given)."""
    if bv is not None and ((dtype is not None and bv.dtype != dtype) or bv.shape not in ((m,), (1, m), (n, m))):
        raise InputValueError(f"{op}: bias must be {'' if dtype is None else f'{dtype} '}[M], [1, M] or [N, M] "
                              f"with N={n}, M={m}; got {bv.dtype} {bv.shape}")


def bias_rows(bv: TensorView | None) -> int:
    """Rows of a bias: 0 (none), 1 (one row for every token) or N."""
    return 0 if bv is None else (bv.shape[0] if len(bv.shape) == 2 else 1)


def linear_reference(x: Any, w: np.ndarray, bias: Any = None) -> np.ndarray:
    """``x @ w.T + bias`` in float64, before any rounding (``w``: the exact weight ``[M, K]``; shape
    ``[..., M]``)."""
    xa = np.asarray(x)
    m, k = w.shape
    y = xa.reshape(-1, k).astype(np.float64) @ w.T
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64).reshape(-1, m)
    return y.reshape(*xa.shape[:-1], m)
