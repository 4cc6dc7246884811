"""What the performance report knows about each op family beyond its public API, registered here
explicitly (not in the op modules): its report variants (other modes of one op, reported as
``"op:variant"``), the op it is compared with, the notes under its table in RESULTS.md, how to make
its operands from the report's 16-bit x and w, the least bytes a call must move, and a variant's plan.
An op with no entry (gemv, skinny_gemm) takes x and w as they are and is charged every operand once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from hipskinny import fp8
from hipskinny.devices.base import Device
from hipskinny.errors import InputValueError
from hipskinny.formats import bnb, w4a16
from hipskinny.ops import fp8_linear as f8
from hipskinny.ops import skinny_gemm as sg


@dataclass(frozen=True)
class Family:
    variants: tuple[str, ...] = ()
    baseline: str | None = None                  # the op whose predicted times this one's are set against
    notes: str = ""
    operands: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]] | None = None   # (x, w, *, variant, arch)
    min_bytes: Callable[..., tuple[float, float]] | None = None        # (n, m, k, itemsize, *, variant)
    plan_info: Callable[..., dict[str, Any]] | None = None             # (device, dtype, n, m, k, *, variant)


# ---------------------------------------------------------------------------------------------
# fp8_linear

# The performance report measures W8A16 with OCP weights per channel, and these variants: W8A8
# per channel x per token, and W8A8 with 128x128 block x per-token-group scales, both in the
# arch's W8A8 flavour (on the FP8 instructions where the arch has them).
FP8_NOTES = """
**Targets (large layers, N <= 4) and where they stand.** Predicted time <= 0.55 x fp16
`skinny_gemm`: met by W8A8 on every arch (median 0.50, "Against the baseline op") and by W8A16
on gfx11/gfx12 (medians 0.50-0.52); W8A16 on gfx942/gfx950 has medians 0.52 (N = 1) and
0.58-0.59 (N = 4), worst 0.67-0.68. Traffic ratio <= 1.05: met at N = 1 on gfx11/gfx12 (but
gfx1100 o_proj/down_proj, 1.08), by W8A8 on gfx1201 up to one layer at 1.065, and on the widest
layer (gate_up_proj) nearly everywhere; missed where few rows share a workgroup's staged
activations: each of the 2 workgroups per CU reads all of x once (an L2 hit on hardware, which the
requested-bytes ratio counts), so the excess is about 2 x CUs x N x K x (2 bytes, 1 for W8A8) / (M x K):
o_proj at N = 4 reaches 2.09 (gfx942) and 1.78 (gfx950) for W8A16, 1.56 / 1.42 for W8A8, 1.30
on gfx1100 and 1.11 on gfx1201. VALU per weight byte below the balance in the widened
paths: met on gfx942 (0.109 < 0.120) and gfx11/gfx12 (<= 0.18 against 0.50-0.91); missed on
gfx950 (0.105 against 0.077: 3 of 12 large-layer rows VALU-bound). The W8A16 main loop on
gfx942/gfx950 spends 54 VALU instructions per 16 weight bytes at N = 1 (listing: 215 per 4-row
iteration; 8 byte-pair widenings of 4 instructions, the NaN check, 8 dot products) and 77 at
N = 4; W8A8 on the FP8 instructions spends 11 per 4 rows x 16 bytes (address arithmetic; 8 MFMA).

**Latency at N = 17..64 (RESULTS: the FP8 ops at 2e8453f, skinny_gemm and the dequantize routes at
0bf4188).** The split-K kernels at two and four token tiles waited for each group's weights before
multiplying it: at N = 64 on CDNA most FP8 rows were latency-bound (Llama-3 down_proj on gfx942: a
chain of 47 round trips for a wave's 12 groups). They now load the next group while multiplying this
one (`splitk.h` `pipelined`, two buffers; eight tiles still wait per group, as block mode would
spill): 38 rows >5% faster, none slower (W8A8 Llama-3 down_proj N = 64 on gfx950 12.47 -> 9.53 us;
W8A16 qkv on gfx942 9.03 -> 7.06 us), for 1-18 more VGPRs on gfx9 (up to 40 on RDNA) and on some
kernels one wave per SIMD less (still at least the workgroups per CU their 32 KiB of LDS allows on
gfx942). The fp16 `skinny_gemm_splitk` does the same on gfx942 / gfx950: 19 rows of skinny_gemm and
the dequantize routes >5% faster (Llama-3 o_proj N = 64 on gfx950 7.70 -> 5.79 us). On gfx11 / gfx12
it was tried and taken back: no row faster, the routers at N = 64 2-3% slower (latency-bound; the
second group's 26-70 VGPRs cost them occupancy).
"""


def _fp8_operands(x: np.ndarray, w: np.ndarray, *, variant: str | None = None,
                  arch: str | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The report's operands for x [N, K] and w [M, K] of its 16-bit dtype (and of its variants)."""
    if variant is None:
        w8, w_scale = fp8.quantize(w, granularity="channel", flavor="ocp")
        return (x, w8, w_scale), {}
    flavor = f8.NATIVE_W8A8[arch or ""][0]
    gw, gx = ("block", "group") if variant == "w8a8_block" else ("channel", "token")
    w8, w_scale = fp8.quantize(w.astype(np.float32), granularity=gw, flavor=flavor)
    x8, x_scale = fp8.quantize(x.astype(np.float32), granularity=gx, flavor=flavor)
    return (x8, w8, w_scale), {"x_scale": x_scale}


def _fp8_min_bytes(n: int, m: int, k: int, itemsize: int, *, variant: str | None = None) -> tuple[float, float]:
    """(least bytes a launch moves, weight bytes): FP8 weights and their fp32 scales, x (16-bit, or
    FP8 with its fp32 scales) and the 16-bit y."""
    if variant is None:
        return m * k + 4 * m + itemsize * (n * k + n * m), m * k
    groups = -(-k // 128)
    scales = 4 * (-(-m // 128) * groups + n * groups) if variant == "w8a8_block" else 4 * (m + n)
    return m * k + n * k + scales + 2 * n * m, m * k


def _fp8_plan_info(device: Device, dtype: Any, n: int, m: int, k: int, *, variant: str) -> dict[str, Any]:
    """`plan_info` of a report variant's call (dtype: the report's 16-bit dtype, unused by W8A8)."""
    flavor = f8.NATIVE_W8A8[device.arch.name][0]
    x_dtype = ml_dtypes.float8_e4m3fnuz if flavor == "fnuz" else ml_dtypes.float8_e4m3fn
    return f8.plan_info(device, x_dtype, n, m, k, w_flavor=flavor, block=variant == "w8a8_block", x_scaled=True)


# ---------------------------------------------------------------------------------------------
# matmul_4bit

# The performance report measures NF4 with nested absmax at bitsandbytes' default blocksize 64
# (FP4 runs the same instructions: the codebook is data) against fp16 skinny_gemm; the variant
# "dequantize" is the route (dequantize kernel + skinny_gemm, both launches counted) at the N
# where the crossover is decided (benchmarks/shapes.py).
M4_NOTES = """
Rows: NF4 with nested absmax at blocksize 64 (bitsandbytes' defaults). FP4 and plain absmax run
the same kernels: the codebook is data in LDS (the same instructions for either table); plain
absmax skips the nested decode but reads 4 bytes per block instead of 1 (12% more than the codes
at blocksize 64, counted in its minimum too).

**Crossover.** The route (`matmul_4bit:dequantize`: dequantize kernel + `skinny_gemm`, both
launches counted, predicted as one -- a lower bound of its time) is predicted 1.6-8.7x slower
than the fused kernels at N = 16 and 64 on every arch and shape (large layers: 2.1-8.7x at N =
16, 2.4-8.3x at N = 64): it writes and reads back 16-bit weights (its DRAM bytes: median 8.6x the
fused kernel's at N = 16, 7.9x at N = 64, large layers). So the fused kernels serve N =
1..64 on every arch, the route only above (and K not a multiple of the blocksize).

**Targets (large layers) and where they stand.** Predicted time <= 0.3 x fp16 `skinny_gemm`
("Against the baseline op"): met on gfx11/gfx12 at N = 1 and 4 (medians 0.26) and on CDNA at N = 4
(gfx942 0.26, gfx950 0.30); **missed** on CDNA at N = 1 (gfx942 0.32, gfx950 0.34); at N = 16 and
64 (the split-K kernel, no target set) 0.26-0.48. Traffic ratio <= 1.05 at N <= 4 (codes, absmax
bytes and the codebooks count in the minimum): **missed**, medians 1.03-1.13 on gfx11/gfx12 and
1.40-1.44 on gfx942/gfx950: every workgroup stages x (N x K x 2 bytes) and the requested-bytes
ratio counts those re-reads, L2 hits on hardware (the DRAM ratio of these rows is 1.00-1.09);
against half-byte weights that share is four times fp16's. VALU per weight byte below the balance
point: met on gfx11/gfx12 at N <= 4 (medians 0.18-0.38 against 0.50-0.91) and on gfx942 at N = 1
(0.090, max 0.119, against 0.120); **missed** on gfx950 (N = 1 0.092, the split-K kernel at N = 4
0.093, against 0.077), where the two VALU-bound N = 1 rows (Llama's gate_up_proj, Qwen's lm_head)
stand 1.02 and 1.09x their floor. Main loop at N = 1 (gfx942 listing, YTILE 4, nested absmax): 292 VALU per 4
rows x 16 weight bytes = 73 per row: two shifts per dword and one SDWA `and` per lookup to turn the
nibbles into codebook offsets (`hipskinny/codebook.h`), 4 packed fp32 FMAs per dword, x widened once
for the 4 rows, the scale per chunk (the row's two absmax2 entries selected, one FMA). The split-K
kernel (N = 9..64, and N = 2..8 of large layers on CDNA) widens each weight in registers: about 100
(fp16) / 150 (bf16) VALU per 16 weight bytes per row on gfx942, 85 on gfx950, 180 / 230 on gfx11
(the half exchange for WMMA), shared by all N tokens.

**gfx950 at N = 64 is LDS-bound (1.65-1.72x the floor).** A codebook lookup reads 4 LDS bytes per
nibble (8 per weight byte, whatever the table's layout: a byte-pair table reads 8 bytes per byte),
and each wave reads all of x for its 32 rows (4N / 32 = 8 LDS bytes per weight byte at N = 64).
gfx950's LDS moves 9.8 bytes per DRAM byte (78.6 TB/s against 8 TB/s), so the lookups alone take
0.82x the memory time and x as much again; within 1.15x would need x shared by 80+ rows per wave
(the split-K tile holds 32; 64 would give about 1.2x). The 16-bit routes avoid the lookups but move
4.5 bytes per weight.

**gfx950 Llama down_proj at N = 4 is VALU-bound at 1.24x** (`python -m benchmarks.profile matmul_4bit
gfx950 4 4096 14336`). The split-K kernel's decode is 144 VALU
per group and wave (8 lookups' offsets, 4 packed multiplies and 4 packed conversions per dword of 8
weights), about 35 more per group in the loop (loads' addresses, scales, x addresses), and the plan
(16 shards of 7 groups: 512 units, two on every CU) adds each unit's prologue, about 170 VALU, 12%
of the total. The model now charges the busiest CU (`busiest_cu_share`): the 13 shards of 416 units
it had gave 160 CUs two units and 96 one (5.83 us, share 1.23); the planner's estimate
(`_splitk.splitk_split`) takes 16 (4.72 us, share 1.0), and fewer, longer shards (224 units:
7 shards) would leave 32 CUs idle.

**A pair table for the codebook was tried and left out.** One entry per packed byte ({code[hi],
code[lo]}, 2 KiB) takes a byte's two weights in one 8-byte lookup and one address operation: VALU
per weight and lane 3.17 -> 2.43 in the split-K kernel on gfx950, which the model turned into 14
fewer compute-bound rows. But 256 entries of 8 bytes cover each LDS bank pair 16 times, so lanes of
one access reading different bytes collide (NF4's 16 values are equally likely by design: about 3
lanes per bank pair among 16), while the 16-entry table sits in 16 distinct banks and never
conflicts. The model counts LDS bytes, not bank conflicts, so it could not weigh that; the 4-bit
rows on gfx950 that are LDS-bound already would have been the ones to lose.

**Where the busiest CU binds (RESULTS at da569d1, matmul_4bit and w4a16_linear re-run at
cba7052 / f04af6c).** 18 rows are bound by VALU, LDS or matrix above 1.15x their floor with the
compute roofs charged on the busiest CU (28 at ca2b10a, 58 at 605b878). Slices (`_t<NT>_s<S>`,
`hipskinny/splitk.h`: a unit of 128 / S features, its S waves per row group taking every S-th group
and summing in LDS) are now built with two slices at one and two token tiles as well, and the
planner (`_splitk.splitk_split`) may take two slices in place of half the one-slice plan's shards
(the same units, half the partials, each wave's chain of groups unchanged). Gone since ca2b10a:
the Llama-3-sized 4-bit qkv at N = 16 on CDNA (96 units -> 192 at two slices; gfx942 6.78 -> 3.95
us, latency-bound) and gfx1100's Qwen3 qkv / o_proj at N = 16 (40-48 units -> 80-96; 9.85 -> 5.92
us, memory-bound). Still sliced only up to the flagship's CUs: a rule that let sliced units queue
(several per CU) made 8 rows up to 33% slower (each unit pays its own x passes and reduction, which
the planner's estimate does not see); four slices at fewer shards than the one-slice plan lost up
to 18% on latency-bound rows (FP8 W8A8 block-scaled 4096 x 4096 N = 16), so only two slices may
replace shards, and even that costs up to 12% on a few latency-bound rows at one token tile on
CDNA (w4a16 Llama-3 qkv N = 4 on gfx942: 6 shards -> two slices of 3, 2.90 -> 3.24 us). Left: the
gfx950 4-bit rows above (VALU at N <= 16, 1.2-1.3x with busiest-CU shares 1.0-1.14, Llama
down_proj at N = 16 1.86x with 320 units on 256 CUs; LDS at N = 64), the gate_up layers on gfx942
(448 units, busiest CU 1.36x the average: no split evens 224 row blocks on 304 CUs under the
partials' cap; VALU 1.17x at N = 16, LDS 1.48x / w4a16's matrix 1.28x at N = 64), w4a16's Llama
down_proj at N = 16 on gfx950 (VALU 1.61x, the same 320 units), and the Qwen3 qkv at N = 64 on
gfx1100 and Llama o_proj on gfx1151 for both 4-bit formats (matrix 1.19-1.2x: 80 / 32 units on
96 / 40 CUs).

**Units as runs of one walk (RESULTS at 8cd6e4b).** The split-K kernels now take a unit as a run
of the row blocks' 128-column groups (`hipskinny/splitk.h` `Walk`): padded row blocks give the
equal shards as before; unpadded, a unit may end one row block and begin the next, so the planner
(`_splitk.splitk_split`) can deal the walk evenly to the flagship's CUs -- where the call's bytes take
at least `_splitk.SPLITK_CROSSING_TRIPS` DRAM round trips, since a crossing unit chains a second
reduction. Rows bound by VALU, LDS or matrix above 1.15x their floor 18 -> 12; 27 rows >5% faster
(both 4-bit formats' Llama down_proj at N = 16 on gfx950 7.20 -> 4.57 us: 256 units of 28 groups
with two slices; gate_up at N = 64 on gfx942 18.06 -> 15.23 us; gate_up at N = 4 on gfx950 9.92 ->
9.03 us: 512 units of 14 groups, two per CU), 16 slower by 1-12%: FP8 Llama down_proj at N = 64 on
gfx942, latency-bound, 13.38 -> 15.04 us (units of 24 groups crossing 112-group row blocks: the
second reduction in a chain the bytes do not hide; the crossing rule counts the one-tile kernels'
chains, shorter than these four-tile ones'), w4a16 Qwen3 lm_head at N = 64 on gfx950 23.43 -> 26.10
us (500 crossing units: the partials' bytes outweigh the busiest-CU gain the planner's median compute
ratio promised), and 1-2% on same-plan latency-bound rows (the walk's few more instructions).
Still above 1.15x: the gfx950 4-bit rows at N = 64 (LDS 1.69-1.75x: the codebook lookups and the x
operand reads, 18.5 LDS bytes per weight byte, which no split changes), gfx950 at N <= 16 (VALU
1.15-1.3x; gate_up at N = 16 keeps 448 units under the partials' cap), and gfx942's gate_up and
down_proj at N = 64 (LDS 1.23-1.25x).

**Four tiles per wave at N = 33..64 on gfx9 (matmul_4bit re-run at 22ca7dc).** The one-slice
four-tile kernel's waves own 64 features each (`hipskinny/splitk4.h` `kWaveTiles`: two row groups of
two slices per unit), so each x operand read from LDS feeds twice the weights: LDS bytes per weight
byte 16.8 -> 13.9 (Llama gate_up, gfx950), 230 VGPRs, occupancy 3 -> 2; its finisher keeps two
shards' partial tiles per round trip (a 128-VGPR merge buffer: with 64 VGPRs, one per trip, the
8-shard Llama qkv at N = 64 on gfx950 went 5.11 -> 5.46 us). gfx950's N = 64 rows 1.69-1.75x ->
1.39-1.41x (Llama gate_up 13.83 -> 11.43 us, lm_head 63.16 -> 50.35 us), qkv 5.11 -> 4.72 us
(latency), down_proj 6.96 -> 6.18 us (now memory-bound: its 16 shards' partials), gfx942's lm_head
rows 3-7% faster (memory-bound). What is left is the
codebook: 8 of the 13.9 bytes are its lookups, and VALU is 1.16-1.22x the floor on its own (about
2.9 VALU per weight and lane: an offset, half a packed multiply and half a packed conversion per
weight, then the loads' and x's addresses), so no layout of x brings these rows within 1.15x.
`SPLITK_COMPUTE` keeps the four-tile medians of the two-tile-per-wave kernel (gfx950 1.65, not the
1.46 this run measures): with 1.46 the planner takes fewer units, which its estimate, having no
latency term, cannot see costing the latency-bound rows (Llama o_proj at N = 64 on gfx950 4.61 ->
5.35 us, down_proj 6.52 -> 7.67 us). gfx942's gate_up and down_proj at N = 64 keep the two-slice
kernel (64-feature units, two tiles per wave; 1.23-1.25x, LDS): with four tiles per wave a unit
is 128 features, and 224 row blocks on 304 CUs then either leave CUs idle (224 units: matrix
1.28x) or split rows into shards whose fp32 partials take the memory roof to 1.23x (299 units);
two slices of four-tile waves would need x for four groups in LDS at once, 64 KiB at N = 64.

**Raw buffer loads on gfx9 (matmul_4bit re-run at d940713).** Outside the decode, the split-K
kernel spent about 30 VALU per group and wave on loads and scales and about 40 per x pass: 64-bit
per-lane addresses (a global load takes a scalar base and a 32-bit offset only when the offset is
computed in its own block, and the compiler hoists a loop-invariant one), the per-lane clamp at
K's end, and x's rows tested and zero-filled lane by lane. On gfx942/gfx950 a group inside K now
loads through raw buffers (`hs::buffer`): the lane's row and its part of the group are a VGPR
offset set once per segment, the group's first column and block an SGPR offset. x is staged a row
per round as a buffer of the pass's columns (none past N), so rows past N and columns past the
pass read zero with no test, and a round's LDS slot is one xor with a uniform value. A group
reaching past K keeps the clamped global loads. VALU per weight and lane on gfx950 (`python -m
benchmarks.profile matmul_4bit gfx950 N M K`): Llama down_proj N = 4 3.18 -> 2.89, gate_up N = 4
3.02 -> 2.79 and N = 16 2.94 -> 2.75, down_proj N = 16 3.06 -> 2.76, Qwen3 lm_head N = 4 2.91 ->
2.70. Rows bound by VALU, LDS or matrix above 1.15x their floor 11 -> 6; 10 rows 1-9% faster, none
slower (Llama down_proj N = 4 on gfx950 4.75 -> 4.32 us). Left at N <= 16: gate_up at N = 16 on
gfx950, 1.21x (VALU, 448 units, the busiest CU 1.14x the average). Its 512-unit plan of 14 groups
is memory-bound at 1.094x (8.43 us), but its partials are 9.65% of the call's bytes, over the 9%
cap. A cap of 0.097 lets it through and moves 25 rows at N <= 16 (DRAM ratio at most 1.098, 23 of
them up to 16% faster), but makes w4a16 Llama qkv at N = 8 on gfx950 15% slower and FP8 Llama qkv
at N = 16 5% slower, both 240 -> 288 units. The first is the rule that takes at least the shards
giving `splitk_units` units: clamped to the cap's count it leaves the estimate one candidate;
letting the estimate weigh every count the cap allows keeps its 240 units (and changes no plan at
0.09). The second is the estimate's own choice: its latency factor prefers 288 units, whose
busiest CU then runs two units of 6 groups, VALU-bound at 4.35 us, 1.36x its floor (the median
compute ratio and one group of overhead per unit understate a 6-group unit's work). A looser cap
would so trade this row for a new compute-bound one; it stays at 0.09 until the planner has a
latency and per-unit overhead model. w4a16_linear keeps the per-lane staging: next to its
act-order gather path the buffer rounds cost its sliced kernels 2-4 spilled SGPRs.

**Per-lane scaled codebooks were tried and left out.** A lane's table of the 16 entries already
multiplied by its scale and rounded to T (one lane per LDS bank, so never a conflict) would make a
weight one 16-bit lookup with no multiply or conversion. But the pair of lookups must land in the
two halves of one register: `ds_read_u16_d16_hi` keeps the other half only where LLVM assumes D16
loads preserve unused bits, which it does not for gfx942/gfx950 (SRAM ECC "any"), so each pair
costs a `v_perm` and the table's build per piece (16 products and 8 packed conversions) on top:
3.11 VALU per weight against 2.94 at the time. (For gfx1100 LLVM does form the D16 loads.)

**x read into registers at N = 33..64 on gfx9 (`_t4_s2_direct`).** Per 1000 weights the one-slice
four-tile kernel moved 4195 LDS bytes of codebook lookups, 2197 of x operand reads and 1197 of x
staging (Llama gate_up, gfx950): no layout of x in LDS brought that within 1.15x of the floor.
The `_direct` kernel drops x from LDS: every wave of a 64-feature unit (two slices) holds all its
features and takes every fourth group, and reads its x straight from memory into registers -- a
group's 16 KiB a group ahead, each step's refilled once its matrix instructions have read it
(`hipskinny/splitk4.h` `XDirect`). Its bytes from cache are what staging read (16 * NT / 64 per
weight), its LDS traffic the lookups and the slices' sum. It replaces the staged two-slice kernel
on gfx942/gfx950 (faster on every row that took it: the latency-bound qkv / o_proj / routers at N =
64 13-22%, each wave walking a quarter of a shard's groups), and the planner takes it in place of a
one-slice plan where the call's bytes take `_splitk.DIRECT_TRIPS` (16) DRAM round trips (the same
units' length, twice the units): Llama lm_head on gfx950 50.35 -> 37.05 us (VALU 1.03x), gate_up
11.43 -> 10.99 us and Qwen3 lm_head 31.28 -> 26.11 us (memory-bound: their shards' partials); on
gfx942 gate_up 15.23 -> 13.16 us and down_proj 7.57 -> 7.22 us (memory-bound). Below 16 round
trips the one-slice staged kernel stays (Llama down_proj on gfx950: 6.18 us, 6.40 direct,
latency). A one-slice `_direct` kernel (128 features per wave) was built and left out: its 128
fp32 accumulators per lane need the AGPRs, one wave per SIMD, and LLVM moves values between the
register files in the loop (VALU per weight and lane 3.33 against 3.0; `-mllvm
-amdgpu-mfma-vgpr-form=0` and an AGPR inline-asm operand, which selects the accumulating form,
did no better); it was slower than two slices at the same units' length on every row, and 36-49%
slower than staging on the latency-bound one-slice rows.

**gfx950 Llama gate_up at N = 16: two slices past the CU count.** The partials' cap held its
one-slice plan to 448 units of 16 groups (224 row blocks x 2 shards) on 256 CUs: 192 CUs ran two
units, 64 one, VALU 1.22x the floor on the busiest CU (9.36 us). The planner's sliced plans stopped
at the CU count; they may now have more units as long as the busiest CU runs no more than the
one-slice plan's (`_splitk.splitk_split`): here two slices, 512 units of 28 groups of 64-feature
row blocks, two on every CU, at half the partials per unit (8.67 us, LDS 1.12x, DRAM ratio 1.06).
Of the 22 report rows of the five ops the rule changed, 20 are faster and 2 slower: the
latency-bound 4-bit Llama qkv at N = 4 on gfx950 (384 -> 480 units: matmul_4bit 3.34 -> 3.45 us,
w4a16_linear 2.93 -> 3.06 us), where more units queue more segments per CU. The full run (at
2855837) adds four more latency-bound rows on gfx950 it made slower: FP8 W8A8 block-scaled Llama
down_proj at N = 64 10.30 -> 11.36 us (416 one-slice units -> 448 two-slice ones; the plain W8A16
kernel's same change is 10.09 -> 8.89 us), W8A8 down_proj N = 64 9.53 -> 9.87 us, and the
dequantize routes' o_proj GEMM at N = 64 (+3-4%). The planner's estimate has no latency term and
charges every unit one group of overhead, which understates a block-scaled unit's; that model is
what would tell these apart.
"""


def _m4_k(k: int) -> None:
    if k % 64:
        raise InputValueError(f"matmul_4bit: the report measures K a multiple of the blocksize (64); got K={k}")


def _m4_operands(x: np.ndarray, w: np.ndarray, *, variant: str | None = None,
                 arch: str | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    _m4_k(w.shape[1])
    packed, state = bnb.quantize_4bit(w.astype(np.float32), blocksize=64, quant_type="nf4", compress_statistics=True)
    return (x, packed, state), ({"fused": False} if variant == "dequantize" else {})


def _m4_min_bytes(n: int, m: int, k: int, itemsize: int, *, variant: str | None = None) -> tuple[float, float]:
    """(least bytes a call moves, weight bytes): packed codes, uint8 absmax per 64, fp32 absmax2
    per 256 blocks, the codebooks, x and y -- for the route too (its floor is the same problem's;
    the 16-bit weights it writes and reads back are its overhead)."""
    blocks = -(-m * k // 64)
    return m * k / 2 + blocks + 4 * -(-blocks // 256) + 4 * (16 + 256 + 1) + itemsize * (n * k + n * m), m * k / 2


def _m4_plan_info(device: Device, dtype: Any, n: int, m: int, k: int, *, variant: str) -> dict[str, Any]:
    """The route's plan: skinny_gemm's on the ``[M, pitch]`` weights (its kernel names the row)."""
    _m4_k(k)
    return sg.plan_info(device, dtype, n, m, -(-k // 8) * 8)


# ---------------------------------------------------------------------------------------------
# w4a16_linear

# The performance report measures symmetric GPTQ-style weights with group size 128 (the common
# checkpoint; per-group scales in x's dtype) against fp16 skinny_gemm; the variant "dequantize" is
# the route (dequantize kernel + skinny_gemm, both launches counted) at the N where the crossover
# is decided (benchmarks/shapes.py).
W4_NOTES = """
**Crossover.** The route (`w4a16_linear:dequantize`: dequantize kernel + `skinny_gemm`, both
launches counted) moves 6.3-8.9x the DRAM bytes of the fused split-K kernel at N = 16 and 2.6-8.3x
at N = 64 on every arch and shape (large layers: medians 8.6x and 7.9x) and is predicted 1.8-8.7x
slower, memory-bound nearly everywhere: it writes and reads back 16-bit weights. So the fused kernels serve N = 1..64
on every arch, the route only above (and where no fused kernel applies). The fused split-K
kernel's traffic ratio: 1.12-1.87 at N = 16, 1.05-2.93 at N = 64 (x re-staged per shard and the
shard partials, counted as requested; at N = 16 the partials stay within 5% of the call's bytes,
`_splitk.PARTIAL_SHARE`, and a shard's last loads ahead re-read its last group, cache hits).

**Targets (large layers) and where they stand.** Predicted time against fp16 `skinny_gemm`
("Against the baseline op"): median 0.26 at N = 1 and 0.28 at N = 4 on gfx11/gfx12, 0.29 and
0.43 on gfx942/gfx950 (the floor is 0.25 plus the scales). Traffic ratio <= 1.05 at N <= 4: met
for the lm_heads, gate_up and most qkv projections on gfx11/gfx12 (medians 1.02-1.04 at N = 1,
1.09-1.14 at N = 4; 19 of 36 large-layer rows at or under 1.05), missed on gfx942/gfx950 (medians
1.14-1.21 at N = 1, 1.35-1.73 at N = 4) and for the small-M layers everywhere (o_proj, the router:
up to 1.40 at N = 1): every workgroup stages x (N x K x 2 bytes), and the model charges those
re-reads, which are L2 hits on hardware, in the requested-bytes ratio; against 4-bit weights that is four times
the share it is for fp16, and CDNA's 256 CUs stage it 4-6 times as often as RDNA's 40-96. (Each
scale group is loaded once per lane quad for G >= 128; loaded per lane, the scales alone added
about 0.09 to every ratio.) VALU per weight byte against the balance point: met on gfx11/gfx12 at
every N (0.15 at N = 1, 0.26 at N = 4 against 0.50-0.91); CDNA: gfx942 met at N = 1 (0.085 <
0.120), gfx950 just over at N = 1 (0.084 against 0.077: the quad hand-off costs a few VALU per
chunk), both **missed** at N = 4 (0.15 against 0.120 and 0.077): the magic-number dequant is shared
by the N tokens but each token adds 16 dot2 per 16 weight bytes, and CDNA's balance leaves about 2
wave-instructions per 16 bytes per lane. On gfx9 at N >= 4 the hand-off costs more time than its
bytes save (predicted +3-6%); turning it off there is a follow-up. Main loop, VALU per 16 weight
bytes per row (from the listings, N = 1): fp16 about 70 (YTILE 4) on gfx942 and gfx1151; bf16 90
on gfx942 (nibbles converted to fp32 directly: gfx942 has no bf16 dot), 66 on gfx950 and gfx1151.
The fp16 floor of the recipe is 53 (16 mask-and-OR, 4 shifts, 16 packed finishing ops, 16 dot2,
one scale).

**gfx1151 Llama lm_head at N = 64.** The previous run had this row at DRAM ratio 1.83 (2055 us):
its t4 kernel fits two workgroups per CU, and on the one-CU sample's caches (1/40 of the chip's)
the weight streams evicted x (512 KiB) between the units a workgroup runs in turn. That was the
sample, not the chip, whose 32 MiB MALL holds x beside all 80 workgroups' streams: the cache model
now gives a sample room for x and leaves x's own traffic unscaled (benchmarks/cache.py), and the
row is at 1.00 (1136 us), memory-bound, with two workgroups per CU.
"""


def _w4_operands(x: np.ndarray, w: np.ndarray, *, variant: str | None = None,
                 arch: str | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """x and the report's 16-bit weights rounded to symmetric int4 (per 128 columns: scale = max |w|
    / 7, codes round(w / scale) + 8 clipped to 0..15), prepared; the variant with ``fused=False``."""
    m, k = w.shape
    g = 128 if k % 128 == 0 else 32
    _w4_k(k)
    wg = w.astype(np.float32).reshape(m, k // g, g)
    scale = np.maximum(np.abs(wg).max(axis=2) / 7, 2.0**-14).astype(x.dtype)
    codes = np.clip(np.rint(wg / scale.astype(np.float32)[..., None]) + 8, 0, 15).astype(np.int64).reshape(m, k)
    ckpt = w4a16.pack_checkpoint(codes, None, scale.astype(np.float16), fmt="gptq", group_size=g)
    return (x, w4a16.prepare(**ckpt, fmt="gptq", group_size=g, dtype=x.dtype)), \
        ({"fused": False} if variant == "dequantize" else {})


def _w4_min_bytes(n: int, m: int, k: int, itemsize: int, *, variant: str | None = None) -> tuple[float, float]:
    """(least bytes a call moves, weight bytes): the packed codes, one 16-bit scale per 128 columns,
    x and y -- for the route too (its floor is the same problem's; the 16-bit weights it writes
    and reads back are its overhead)."""
    return m * k / 2 + itemsize * (m * -(-k // 128) + n * k + n * m), m * k / 2


def _w4_plan_info(device: Device, dtype: Any, n: int, m: int, k: int, *, variant: str) -> dict[str, Any]:
    """The route's plan: skinny_gemm's on the ``[M, K]`` 16-bit weights (its kernel names the row)."""
    _w4_k(k)
    return sg.plan_info(device, dtype, n, m, k)


def _w4_k(k: int) -> None:
    if k % 32:
        raise InputValueError(f"w4a16_linear: the report measures K a multiple of 32; got K={k}")


FAMILIES: dict[str, Family] = {
    "fp8_linear": Family(variants=("w8a8", "w8a8_block"), baseline="skinny_gemm", notes=FP8_NOTES,
                         operands=_fp8_operands, min_bytes=_fp8_min_bytes, plan_info=_fp8_plan_info),
    "matmul_4bit": Family(variants=("dequantize",), baseline="skinny_gemm", notes=M4_NOTES,
                          operands=_m4_operands, min_bytes=_m4_min_bytes, plan_info=_m4_plan_info),
    "w4a16_linear": Family(variants=("dequantize",), baseline="skinny_gemm", notes=W4_NOTES,
                           operands=_w4_operands, min_bytes=_w4_min_bytes, plan_info=_w4_plan_info),
}


def family(op: str) -> Family:
    """The registered entry of ``op`` ("name" or "name:variant"), else the plain one."""
    return FAMILIES.get(op.partition(":")[0], Family())
