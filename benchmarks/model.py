"""The performance model: a roofline over what a launch did, per arch.

Decode kernels are memory-bound, so the floor is the minimum bytes (every weight,
activation and output byte once) over peak DRAM bandwidth. The roofs are

* memory: the bytes the launch reads from and writes to DRAM (benchmarks/cache.py: its requests
  through LRU models of the arch's L2s and MALL, cold per call) / peak DRAM bandwidth;
* VALU issue: VALU + transcendental wave-instructions / the GPU's single-issue rate;
* matrix: MFMA/WMMA FLOPs / the dense fp16/bf16 matrix rate (8-bit types at twice it);
* LDS: LDS bytes read and written / LDS bandwidth.

and a floor under all of them:

* latency: launch overhead plus the waves' dependent memory round trips times the memory
  latency, as far as the resident waves cannot overlap them (benchmarks/latency.py).

The predicted time is the largest of these (perfect overlap of the others). Assumptions,
stated again in the report: every byte that misses the modelled caches comes from DRAM at
its peak rate (no shortfall from imperfect streaming; the L1/L0 caches are not modelled);
the dispatcher deals workgroups round robin over the CUs; scalar, branch and wait instructions are free. Rates are
from benchmarks/hardware.py (clock, VALU, matrix and LDS rates) and `ArchInfo` (CU count, DRAM
bandwidth); latencies from benchmarks/latency.py.
Nothing here is timed on a GPU.

The VALU, matrix units and LDS are per CU, so a launch whose busiest CU holds more than the
average work takes longer on them than an even spread would: `busiest_cu_share` measures that from
a plan (`workgroup_work`: one split-K unit on one CU of 256 holds 256 times the average), and
`predict` charges the compute roofs on that CU (`cu_share`). The memory roof is chip-wide and left
as it is (a few busy CUs still keep the DRAM queues full if their loads in flight suffice: the
latency floor judges that).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hipskinny.arch import ArchInfo

from . import hardware

_MATRIX_SHAPE = re.compile(r"_(\d+)x(\d+)x(\d+)(?:_?(\d+)b)?")


def matrix_flops(mnemonic: str) -> int:
    """FLOPs of one MFMA/WMMA wave-instruction from its mnemonic (``v_mfma_f32_4x4x4_16b_f16``:
    16 blocks of 4x4x4; ``v_wmma_f32_16x16x16_f16``: one 16x16x16); 0 if it names no shape."""
    m = _MATRIX_SHAPE.search(mnemonic)
    if not m:
        return 0
    blocks = int(m.group(4) or 1)
    return 2 * int(m.group(1)) * int(m.group(2)) * int(m.group(3)) * blocks


def matrix_seconds(arch: ArchInfo, mnemonics: Mapping[str, float], cu_count: int) -> float:
    """Time the matrix units need for these matrix instructions (8-bit inputs at twice the rate)."""
    rate = hardware.matrix_flops_rate(arch, cu_count)
    if rate <= 0:
        return 0.0
    total = 0.0
    for name, count in mnemonics.items():
        if name.startswith(("v_mfma", "v_wmma", "v_smfmac", "v_swmmac")):
            fast = any(t in name for t in ("fp8", "bf8", "i8", "iu8", "iu4", "f8f6f4"))
            total += matrix_flops(name) * count / (2 if fast else 1)
    return total / rate


def arithmetic_floor_seconds(arch: ArchInfo, flops: float, cu_count: int, eight_bit: bool = False) -> float:
    """The least time ``flops`` multiply-add FLOPs take on the arch's arithmetic, whatever the kernel:
    the dense matrix rate (``eight_bit``: both operands 8-bit, twice it), plus the VALU's best (a
    packed or dot2 instruction: 4 FLOPs per lane and clock) where the matrix units are separate
    (MFMA). On RDNA the WMMA instructions run on the SIMDs' own ALUs, so the larger of the two
    (gfx11's dual-issued dot2 equals its WMMA rate). The bandwidth floor's counterpart: a decode
    kernel whose matrix work alone exceeds its bytes' time (4-bit weights at N = 64 on RDNA) is
    bound by this one."""
    matrix = hardware.matrix_flops_rate(arch, cu_count) * (2 if eight_bit else 1)
    valu = hardware.valu_issue_rate(arch, cu_count) * arch.wave_size * 4
    rate = matrix + valu if arch.matrix_unit == "mfma" else max(matrix, 2 * valu)   # RDNA: dual issue
    return flops / rate


@dataclass(frozen=True)
class Prediction:
    seconds_memory: float       # bytes moved / bandwidth
    seconds_floor: float        # minimum bytes / bandwidth
    seconds_valu: float
    seconds_matrix: float
    seconds_lds: float
    seconds_latency: float = 0.0

    @property
    def roofs(self) -> dict[str, float]:
        return {"memory": self.seconds_memory, "valu": self.seconds_valu, "matrix": self.seconds_matrix,
                "lds": self.seconds_lds, "latency": self.seconds_latency}

    @property
    def bound(self) -> str:
        """The roof that dominates."""
        return max(self.roofs.items(), key=lambda kv: kv[1])[0]

    @property
    def seconds(self) -> float:
        return max(self.roofs.values())

    @property
    def floor_ratio(self) -> float:
        """Predicted time over the pure-bandwidth floor."""
        return self.seconds / self.seconds_floor if self.seconds_floor > 0 else float("inf")


def predict(arch: ArchInfo, cu_count: int, *, bytes_moved: float, bytes_min: float, valu: float,
            mnemonics: Mapping[str, float], lds_bytes: float, latency_seconds: float = 0.0,
            cu_share: float = 1.0) -> Prediction:
    """The roofs of a launch; ``cu_share``: the busiest CU's work over the average CU's
    (`busiest_cu_share`), which the VALU, matrix and LDS roofs are charged at."""
    bw = arch.peak_bandwidth_gbs * 1e9
    return Prediction(bytes_moved / bw, bytes_min / bw, cu_share * valu / hardware.valu_issue_rate(arch, cu_count),
                      cu_share * matrix_seconds(arch, mnemonics, cu_count),
                      cu_share * lds_bytes / hardware.lds_bandwidth(arch, cu_count), latency_seconds)


def workgroup_work(plan: Mapping[str, Any], m: int, waves: int) -> list[int] | None:
    """Equal pieces of work (split-K units, lane-split row tiles, gemv row groups) each workgroup of
    a plan's persistent grid runs, from its ``plan_info`` entries (the kernels' loops: unit u on
    workgroup u mod grid; lane-split workgroup b taking ``waves`` consecutive tiles of ``ytile`` rows
    from b * waves on, striding grid * waves; gemv one group of rows each). None for a plan of
    another shape."""
    grid = int(plan.get("grid") or 0)
    if grid <= 0:
        return None
    if "units" in plan:
        units = int(plan["units"])
        return [units // grid + (b < units % grid) for b in range(grid)]
    if "ytile" in plan:
        tiles, stride = -(-m // int(plan["ytile"])), grid * waves
        return [sum(min(waves, tiles - first) for first in range(b * waves, tiles, stride)) for b in range(grid)]
    if "rows_per_group" in plan:
        return [1] * grid
    return None


def busiest_cu_share(work: Sequence[int], cus: int) -> float:
    """The busiest CU's work over the average CU's (>= 1) when workgroup i of ``work`` runs on CU
    i mod ``cus`` (the dispatcher's round robin; equal pieces of work: an assumption)."""
    total = sum(work)
    if total <= 0:
        return 1.0
    per_cu = [0] * cus
    for i, w in enumerate(work):
        per_cu[i % cus] += w
    return max(per_cu) * cus / total
