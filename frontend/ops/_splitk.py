"""The split-K kernels' planner (``kernels/include/hipskinny/splitk.h``), shared by the linear ops for
N = 9..128 (and the quantized ops' N = 2..8 on CDNA, `_linear.small_n_splitk`): token tiles, the walk's
work units, shards, slices, the `_direct` variant, scratch, and the plan of a call (`splitk_plan`) and
its bound launch (`bind_plan`). The rules and the measurements behind the constants: docs/linear.md.
Arch facts only, never the device's CU count: results must not depend on it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import registry
from ..arch import ArchInfo
from ..devices.base import Device
from ..errors import InputValueError
from ..launch import Launch, LaunchPlan, make_launch, make_plan
from ._linear import groups_per_cu

SPLITK_ROWS = 128                   # output features per split-K work unit
SPLITK_GROUP = 128                  # K columns per split-K instruction group (shard granule)
SPLITK_LDS = 32 * 1024              # x staged per pass: 16 * NT tokens x 1024 / NT columns
TOKEN_TILES = (1, 2, 4, 8)          # split-K variants: NT 16-token tiles
MAX_SPLITK_GROUPS_PER_CU = 4
# Work units wanted: the flagship's bandwidth x DRAM latency over this many bytes per unit.
SPLITK_UNIT_BYTES = 8192
# Shard partials at one token tile: at most this share of the call's unavoidable bytes.
PARTIAL_SHARE = 0.09
# The kernels' compute time over the bandwidth floor at 1 and 4 token tiles, by kernel stem and arch
# (medians of the report's rows; `python -m benchmarks.choices --compute-table`). Absent: memory only.
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
# A unit's compute beyond its groups' (prologue, partials, reduction), in groups.
SPLITK_UNIT_OVERHEAD = 1.0
# Slices per unit (`_s<S>` variants) and the compute each extra slice adds, as a share.
SPLITK_SLICES = (1, 2, 4)
SPLITK_SLICE_COST = 0.1
# Units cross a row block's end only where the call's bytes take this many DRAM round trips.
SPLITK_CROSSING_TRIPS = 12
# The `_direct` variant replaces a one-slice plan from this many DRAM round trips of bytes.
DIRECT_TRIPS = 16


def token_tiles(n: int) -> int:
    """16-token tiles of the split-K variant that covers N tokens."""
    for nt in TOKEN_TILES:
        if 16 * nt >= n:
            return nt
    raise InputValueError(f"skinny_gemm: N={n} is above the split-K kernel's {16 * TOKEN_TILES[-1]} tokens")


def splitk_units(info: ArchInfo) -> float:
    """Split-K work units wanted on `info`'s flagship GPU (see SPLITK_UNIT_BYTES)."""
    return info.peak_bandwidth_gbs * info.load_latency_ns[2] / SPLITK_UNIT_BYTES    # GB/s x ns = bytes


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
        return make_launch(device, plan, pointers, **ptrs, partials=None, counters=None, **values), ()
    slots = ((partials, info["partial_bytes"]), (counters, info["counter_bytes"]))
    return make_launch(device, plan, (*pointers, partials, counters), **ptrs, partials=partials,
                           counters=counters, **values), slots


def linear_launch(device: Device, plan: LaunchPlan, pointers: tuple[str, ...], ptrs: dict[str, str],
                values: dict[str, Any], n: int, partials: str, counters: str
                ) -> tuple[Launch, tuple[tuple[str, int], ...]]:
    """The launch of a lane-split plan (``values`` and its kc) or of a split-K one (``values``, N and
    its walk: unit and row block lengths; scratch slots as `splitk_launch`), with the scratch slots it needs."""
    info = plan.info
    if "unit_len" not in info:
        return make_launch(device, plan, pointers, **ptrs, **values, kc=info["k_chunk"]), ()
    walk_args = {"unit_len": info["unit_len"], "block_len": info["block_len"]}
    return splitk_launch(device, plan, pointers, ptrs, {"N": n, **values, **walk_args},
                         partials, counters)
