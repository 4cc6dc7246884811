"""The flagship products' rates the performance model uses, and where every hardware number comes from.

`hipskinny.arch.ArchInfo` keeps what the package needs (wave size, LDS, registers, the flagship's CU
count, DRAM bandwidth and load latency, which the planner reads); this module adds per arch what only
the model (model.py, report.py, latency.py) needs: the product those figures describe, its clock, its
VALU, matrix and LDS rates, and the sources of all of them (tags as in shared/reference/archs.md §0).
The rates take an `ArchInfo` (a scaled-down one from `dynamic.ScaledDevice` too) and a CU count
(default: the flagship's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hipskinny.arch import ArchInfo


@dataclass(frozen=True)
class Hardware:
    product: str                   # the product default_cu_count / bandwidth / clock describe
    clock_ghz: float               # peak engine clock
    matrix_flops_per_clk_cu: int   # dense fp16/bf16 MFMA/WMMA FLOPs per clock per CU
    valu_lanes_per_cu: int = 64    # 4 x SIMD16 (CDNA) or 2 x SIMD32 (RDNA)
    lds_bytes_per_clk_cu: int = 128    # LDS bandwidth per CU
    sources: dict[str, str] = field(default_factory=dict)   # what -> where the number comes from


HARDWARE: dict[str, Hardware] = {
    "gfx942": Hardware(
        "MI300X", 2.1, 2048, sources={
            "cu_count": "S1 (MI300X 304 CUs)", "bandwidth": "S2 (5.3 TB/s)",
            "clock": "derived from S2: 163.4 TF = 304 CU x 256 FLOP/clk x f",
            "simds": "S4, S12 (4 x SIMD16 per CU)", "matrix": "S2 (2048 fp16 FLOP/clk/CU)",
            "lds": "64 KiB per CU (S1); 128 B/clk/CU is the CDNA3 white-paper figure, not in archs.md",
            "latency": "L2 287.5 and DRAM 876 (p50) cycles at 2.1 GHz, vector pointer chase on an MI300X VF: "
                       "caps-tum/mt4g sample_results; Infinity Cache 218 ns: Chips and Cheese, \"Testing AMD's "
                       "Giant MI300X\""}),
    "gfx950": Hardware(
        "MI355X", 2.4, 4096, sources={
            "cu_count": "S1 (MI355X 256 CUs)", "bandwidth": "P1 (8.0 TB/s)", "clock": "P1 (MI355X 2400 MHz)",
            "simds": "S4 (4 x SIMD16 per CU)", "matrix": "P2, derived (4096 fp16 FLOP/clk/CU)",
            "lds": "160 KiB per CU (S1, S3); 128 B/clk/CU: the LDS bandwidth peak of ROCm/rocprofiler-compute's "
                   "gfx950 speed-of-light config (max sclk x CUs x 128 bytes; a third-party report of CDNA4 "
                   "doubling LDS read bandwidth is not reflected there)",
            "latency": "assumed equal to gfx942 (no published MI355X latency)"}),
    "gfx1100": Hardware(
        "RX 7900 XTX", 2.5, 512, sources={
            "cu_count": "S1 (RX 7900 XTX 96 CUs)", "bandwidth": "P5 (960 GB/s)",
            "clock": "P5 (2500 MHz boost)", "simds": "S4 (2 x SIMD32 per CU)",
            "matrix": "S11 (WMMA 512 fp16 FLOP/clk/CU)",
            "lds": "128 KiB per WGP (S1); 128 B/clk/CU assumed (RDNA white papers, not in archs.md)",
            "latency": "Infinity Cache 150.3 ns and VRAM 234.6 ns (vector path, 1 GB): Chips and Cheese, "
                       "\"Latency Testing is Hard (RDNA 3 Power Saving)\"; L2 100 ns assumed (not published "
                       "in ns)"}),
    "gfx1151": Hardware(
        "Radeon 8060S", 2.9, 512, sources={
            "cu_count": "S1 (8060S 40 CUs)", "bandwidth": "P7 (256 GB/s peak; ~212 GB/s measured, P8)",
            "clock": "P7, P8 (2900 MHz)", "simds": "S4 (2 x SIMD32 per CU)",
            "matrix": "S11, S10 (WMMA 512 fp16 FLOP/clk/CU)", "lds": "as gfx1100",
            "latency": "Infinity Cache 174-207 ns and DRAM 344-353 ns read from the charts of Chips and Cheese, "
                       "\"Strix Halo's Memory Subsystem\" (second hand); L2 100 ns assumed"}),
    "gfx1201": Hardware(
        "RX 9070 XT", 2.97, 1024, sources={
            "cu_count": "S1 (RX 9070 XT 64 CUs)", "bandwidth": "P9 (640 GB/s)",
            "clock": "P9 (2970 MHz boost)", "simds": "S4 (2 x SIMD32 per CU)",
            "matrix": "S11 (WMMA 1024 fp16 FLOP/clk/CU)", "lds": "as gfx1100",
            "latency": "assumed equal to gfx1100 (none published for RDNA4)"}),
}


def valu_issue_rate(info: ArchInfo, cu_count: int | None = None) -> float:
    """VALU wave-instructions per second the GPU issues, single issue (no VOPD/dual or
    packed-math credit): 64 lanes per CU per clock, one wave-instruction covers wave_size."""
    hw = HARDWARE[info.name]
    cus = cu_count or info.default_cu_count
    return cus * hw.valu_lanes_per_cu / info.wave_size * hw.clock_ghz * 1e9


def matrix_flops_rate(info: ArchInfo, cu_count: int | None = None) -> float:
    """Dense fp16/bf16 matrix FLOPs per second (8-bit types run at twice this)."""
    hw = HARDWARE[info.name]
    return (cu_count or info.default_cu_count) * hw.matrix_flops_per_clk_cu * hw.clock_ghz * 1e9


def lds_bandwidth(info: ArchInfo, cu_count: int | None = None) -> float:
    """LDS bytes per second over all CUs."""
    hw = HARDWARE[info.name]
    return (cu_count or info.default_cu_count) * hw.lds_bytes_per_clk_cu * hw.clock_ghz * 1e9


def balance_point(info: ArchInfo, cu_count: int | None = None) -> float:
    """VALU wave-instructions the SIMDs issue while one byte arrives at peak DRAM bandwidth."""
    return valu_issue_rate(info, cu_count) / (info.peak_bandwidth_gbs * 1e9)


def occupancy_terms(info: ArchInfo, vgprs: int, sgprs: int, lds_bytes: int, waves_per_workgroup: int) -> dict[str, int]:
    """Each limit on waves per SIMD (code_objects.md §5): the cap, VGPR, SGPR (where
    `ArchInfo.sgpr_limited_occupancy`) and LDS terms. `ArchInfo.occupancy` is their minimum without
    the SGPR term, which only bites above 100 SGPRs on gfx9 (the manifest's occupancy uses it)."""
    terms = {"cap": info.max_waves_per_simd,
             "vgpr": info.occupancy(vgprs, 0, waves_per_workgroup)}
    if info.sgpr_limited_occupancy:
        terms["sgpr"] = min(info.max_waves_per_simd, 8 if sgprs <= 100 else 7)
    if lds_bytes > 0:
        terms["lds"] = info.occupancy(1, lds_bytes, waves_per_workgroup)
    return terms
