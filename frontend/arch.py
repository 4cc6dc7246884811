"""Per-architecture facts: the one place the Python side keeps them.

`parse_gcn_arch_name` turns HIP's ``gcnArchName`` (``"gfx942:sramecc+:xnack-"``)
into a name plus feature flags; `arch_info` returns the `ArchInfo` of a shipped
arch or raises `UnsupportedArchError` naming the shipped ones.
Numbers come from ``shared/reference/archs.md`` and ``code_objects.md``; the
hardware-rate fields (bandwidth, clock, matrix and LDS rates) describe one flagship
product per arch and carry their sources in `HW_SOURCES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UnsupportedArchError


@dataclass(frozen=True)
class ArchInfo:
    name: str                      # "gfx942"
    family: str                    # "CDNA3", "RDNA3", ...
    products: str                  # what users know it as
    wave_size: int                 # 64 on gfx9, 32 (HIP default) on gfx11/12
    lds_per_workgroup: int         # bytes a single workgroup may allocate
    fp8_format: str | None         # "fnuz" (gfx942), "ocp" (gfx950, gfx12) or None
    matrix_unit: str               # "mfma" or "wmma"
    dot_insts: frozenset[str]      # dot-product instructions the kernels may rely on
    max_waves_per_simd: int        # compiler occupancy cap
    vgprs_per_simd_lane: int       # register file per lane (unified arch+acc on gfx9)
    vgpr_granule: int              # allocation granule in wave-size mode
    simds_per_cu: int              # SIMDs a CU (gfx9) or half-WGP (gfx1x) schedules on
    default_cu_count: int          # multiProcessorCount of the flagship product
    peak_bandwidth_gbs: float      # DRAM bandwidth of the flagship product, GB/s
    isa_version: int               # __oclc_ISA_version value for the build
    elf_mach: int                  # EF_AMDGPU_MACH in the code object's e_flags
    features: tuple[str, ...] = field(default=())  # target features seen in gcnArchName
    # Flagship-product rates for the performance model (benchmarks/); sources in HW_SOURCES.
    product: str = ""              # the product default_cu_count / bandwidth / clock describe
    clock_ghz: float = 0.0         # peak engine clock
    valu_lanes_per_cu: int = 64    # 4 x SIMD16 (CDNA) or 2 x SIMD32 (RDNA)
    matrix_flops_per_clk_cu: int = 0   # dense fp16/bf16 MFMA/WMMA FLOPs per clock per CU
    lds_bytes_per_clk_cu: int = 128    # LDS bandwidth per CU
    # a vector load served by the L2, the MALL / Infinity Cache, DRAM: ns (pointer chasing; where a
    # range was published, its low end)
    load_latency_ns: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def occupancy_terms(self, vgprs: int, sgprs: int, lds_bytes: int, waves_per_workgroup: int) -> dict[str, int]:
        """Each limit on waves per SIMD (code_objects.md §5): the cap, VGPR, SGPR (gfx9 only) and
        LDS terms. `occupancy` is their minimum without the SGPR term, which only bites above
        100 SGPRs on gfx9 (the manifest's occupancy uses `occupancy`)."""
        terms = {"cap": self.max_waves_per_simd,
                 "vgpr": self.occupancy(vgprs, 0, waves_per_workgroup)}
        if self.name.startswith("gfx9"):
            terms["sgpr"] = min(self.max_waves_per_simd, 8 if sgprs <= 100 else 7)
        if lds_bytes > 0:
            terms["lds"] = self.occupancy(1, lds_bytes, waves_per_workgroup)
        return terms

    def valu_issue_rate(self, cu_count: int | None = None) -> float:
        """VALU wave-instructions per second the GPU issues, single issue (no VOPD/dual or
        packed-math credit): 64 lanes per CU per clock, one wave-instruction covers wave_size."""
        cus = cu_count or self.default_cu_count
        return cus * self.valu_lanes_per_cu / self.wave_size * self.clock_ghz * 1e9

    def matrix_flops_rate(self, cu_count: int | None = None) -> float:
        """Dense fp16/bf16 matrix FLOPs per second (8-bit types run at twice this)."""
        return (cu_count or self.default_cu_count) * self.matrix_flops_per_clk_cu * self.clock_ghz * 1e9

    def lds_bandwidth(self, cu_count: int | None = None) -> float:
        """LDS bytes per second over all CUs."""
        return (cu_count or self.default_cu_count) * self.lds_bytes_per_clk_cu * self.clock_ghz * 1e9

    def balance_point(self, cu_count: int | None = None) -> float:
        """VALU wave-instructions the SIMDs issue while one byte arrives at peak DRAM bandwidth."""
        return self.valu_issue_rate(cu_count) / (self.peak_bandwidth_gbs * 1e9)

    def occupancy(self, vgprs: int, lds_bytes: int, waves_per_workgroup: int) -> int:
        """Waves per SIMD the register and LDS budgets allow (LLVM's model)."""
        granule = self.vgpr_granule
        vgpr_alloc = max(granule, -(-max(vgprs, 1) // granule) * granule)
        waves = min(self.max_waves_per_simd, self.vgprs_per_simd_lane // vgpr_alloc)
        if lds_bytes > 0:
            # LDS is pooled per CU (gfx9) or per WGP (gfx1x, twice the per-workgroup max).
            pool = self.lds_per_workgroup if self.name.startswith("gfx9") else 2 * self.lds_per_workgroup
            groups = pool // lds_bytes
            simds = self.simds_per_cu if self.name.startswith("gfx9") else 2 * self.simds_per_cu
            waves = min(waves, groups * waves_per_workgroup // simds)
        return waves


_DOT_GFX942 = frozenset({"dot2_f32_f16", "dot2c_f32_f16"})
_DOT_GFX950 = frozenset({"dot2_f32_f16", "dot2c_f32_f16", "dot2_f32_bf16", "dot2c_f32_bf16"})
_DOT_GFX11 = frozenset({"dot2_f32_f16", "dot2acc_f32_f16", "dot2_f32_bf16"})
_DOT_GFX12 = frozenset({"dot2_f32_f16", "dot2_f32_bf16", "dot4_f32_fp8"})

# Positional fields through elf_mach, then the flagship product's rates (HW_SOURCES).
ARCHS: dict[str, ArchInfo] = {
    a.name: a
    for a in (
        ArchInfo("gfx942", "CDNA3", "Instinct MI300X / MI300A / MI325X", 64, 64 * 1024, "fnuz", "mfma",
                 _DOT_GFX942, 8, 512, 8, 4, 304, 5300.0, 9402, 0x04C,
                 product="MI300X", clock_ghz=2.1, matrix_flops_per_clk_cu=2048,
                 load_latency_ns=(137.0, 218.0, 417.0)),
        ArchInfo("gfx950", "CDNA4", "Instinct MI350X / MI355X", 64, 160 * 1024, "ocp", "mfma",
                 _DOT_GFX950, 8, 512, 8, 4, 256, 8000.0, 9500, 0x04F,
                 product="MI355X", clock_ghz=2.4, matrix_flops_per_clk_cu=4096,
                 load_latency_ns=(137.0, 218.0, 417.0)),
        ArchInfo("gfx1100", "RDNA3", "Radeon RX 7900 XTX / PRO W7900", 32, 64 * 1024, None, "wmma",
                 _DOT_GFX11, 16, 1536, 24, 2, 96, 960.0, 11000, 0x041,
                 product="RX 7900 XTX", clock_ghz=2.5, matrix_flops_per_clk_cu=512,
                 load_latency_ns=(100.0, 150.3, 234.6)),
        ArchInfo("gfx1151", "RDNA3.5", "Ryzen AI Max (Radeon 8060S)", 32, 64 * 1024, None, "wmma",
                 _DOT_GFX11, 16, 1536, 24, 2, 40, 256.0, 11501, 0x04A,
                 product="Radeon 8060S", clock_ghz=2.9, matrix_flops_per_clk_cu=512,
                 load_latency_ns=(100.0, 174.0, 344.2)),
        ArchInfo("gfx1201", "RDNA4", "Radeon RX 9070 XT / AI PRO R9700", 32, 64 * 1024, "ocp", "wmma",
                 _DOT_GFX12, 16, 1536, 24, 2, 64, 640.0, 12001, 0x04E,
                 product="RX 9070 XT", clock_ghz=2.97, matrix_flops_per_clk_cu=1024,
                 load_latency_ns=(100.0, 150.3, 234.6)),
    )
}

# Where each hardware number comes from (tags as in shared/reference/archs.md §0).
HW_SOURCES: dict[str, dict[str, str]] = {
    "gfx942": {"cu_count": "S1 (MI300X 304 CUs)", "bandwidth": "S2 (5.3 TB/s)",
               "clock": "derived from S2: 163.4 TF = 304 CU x 256 FLOP/clk x f",
               "simds": "S4, S12 (4 x SIMD16 per CU)", "matrix": "S2 (2048 fp16 FLOP/clk/CU)",
               "lds": "64 KiB per CU (S1); 128 B/clk/CU is the CDNA3 white-paper figure, not in archs.md",
               "latency": "L2 287.5 and DRAM 876 (p50) cycles at 2.1 GHz, vector pointer chase on an MI300X VF: "
                          "caps-tum/mt4g sample_results; Infinity Cache 218 ns: Chips and Cheese, \"Testing AMD's "
                          "Giant MI300X\""},
    "gfx950": {"cu_count": "S1 (MI355X 256 CUs)", "bandwidth": "P1 (8.0 TB/s)", "clock": "P1 (MI355X 2400 MHz)",
               "simds": "S4 (4 x SIMD16 per CU)", "matrix": "P2, derived (4096 fp16 FLOP/clk/CU)",
               "lds": "160 KiB per CU (S1, S3); 128 B/clk/CU: the LDS bandwidth peak of ROCm/rocprofiler-compute's "
                      "gfx950 speed-of-light config (max sclk x CUs x 128 bytes; a third-party report of CDNA4 "
                      "doubling LDS read bandwidth is not reflected there)",
               "latency": "assumed equal to gfx942 (no published MI355X latency)"},
    "gfx1100": {"cu_count": "S1 (RX 7900 XTX 96 CUs)", "bandwidth": "P5 (960 GB/s)",
                "clock": "P5 (2500 MHz boost)", "simds": "S4 (2 x SIMD32 per CU)",
                "matrix": "S11 (WMMA 512 fp16 FLOP/clk/CU)",
                "lds": "128 KiB per WGP (S1); 128 B/clk/CU assumed (RDNA white papers, not in archs.md)",
                "latency": "Infinity Cache 150.3 ns and VRAM 234.6 ns (vector path, 1 GB): Chips and Cheese, "
                           "\"Latency Testing is Hard (RDNA 3 Power Saving)\"; L2 100 ns assumed (not published "
                           "in ns)"},
    "gfx1151": {"cu_count": "S1 (8060S 40 CUs)", "bandwidth": "P7 (256 GB/s peak; ~212 GB/s measured, P8)",
                "clock": "P7, P8 (2900 MHz)", "simds": "S4 (2 x SIMD32 per CU)",
                "matrix": "S11, S10 (WMMA 512 fp16 FLOP/clk/CU)", "lds": "as gfx1100",
                "latency": "Infinity Cache 174-207 ns and DRAM 344-353 ns read from the charts of Chips and Cheese, "
                           "\"Strix Halo's Memory Subsystem\" (second hand); L2 100 ns assumed"},
    "gfx1201": {"cu_count": "S1 (RX 9070 XT 64 CUs)", "bandwidth": "P9 (640 GB/s)",
                "clock": "P9 (2970 MHz boost)", "simds": "S4 (2 x SIMD32 per CU)",
                "matrix": "S11 (WMMA 1024 fp16 FLOP/clk/CU)", "lds": "as gfx1100",
                "latency": "assumed equal to gfx1100 (none published for RDNA4)"},
}

SHIPPED_ARCHS: tuple[str, ...] = tuple(ARCHS)


def parse_gcn_arch_name(gcn_arch_name: str | bytes) -> tuple[str, tuple[str, ...]]:
    """Split ``"gfx942:sramecc+:xnack-"`` into ``("gfx942", ("sramecc+", "xnack-"))``."""
    if isinstance(gcn_arch_name, bytes):  # hip-python before 10.x returned bytes
        gcn_arch_name = gcn_arch_name.split(b"\0", 1)[0].decode("ascii", "replace")
    text = gcn_arch_name.strip().split("\0", 1)[0]
    if not text:
        raise UnsupportedArchError("the device reported an empty gcnArchName; " + _shipped_sentence())
    name, *features = text.split(":")
    return name.strip().lower(), tuple(f.strip() for f in features if f.strip())


def arch_info(gcn_arch_name: str | bytes) -> ArchInfo:
    """The `ArchInfo` for a ``gcnArchName`` (features kept), or `UnsupportedArchError`."""
    name, features = parse_gcn_arch_name(gcn_arch_name)
    info = ARCHS.get(name)
    if info is None:
        raise UnsupportedArchError(f"GPU architecture {name!r} is not supported; " + _shipped_sentence())
    if features:
        from dataclasses import replace

        info = replace(info, features=features)
    return info


def _shipped_sentence() -> str:
    return "hipskinny ships code objects for " + ", ".join(SHIPPED_ARCHS) + "."
