"""Per-architecture facts: the one place the Python side keeps them.

`parse_gcn_arch_name` turns HIP's ``gcnArchName`` (``"gfx942:sramecc+:xnack-"``)
into a name plus feature flags; `arch_info` returns the `ArchInfo` of a shipped
arch or raises `UnsupportedArchError` naming the shipped ones.
Numbers come from ``shared/reference/archs.md`` and ``code_objects.md``. Code outside
this module reads an arch's facts by name (`ArchInfo.generation`, `lds_pool_bytes`,
`fp8_format`, ...), never by testing the arch's name. The flagship product's figures the
planner uses (CU count, DRAM bandwidth and latency) are here; the rates only the
performance model uses (clock, VALU, matrix and LDS rates) and the sources of all of
them live in ``benchmarks/hardware.py``.
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
    fp8_format: str | None         # flavour of the FP8 instructions: "fnuz" (gfx942), "ocp" (gfx950, gfx12), None
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
    lds_pool_bytes: int            # LDS the resident workgroups of one pool share (occupancy's LDS term)
    lds_pooled_per: str            # "cu" (gfx9) or "wgp" (gfx1x: a workgroup processor, two CUs)
    sgpr_limited_occupancy: bool   # SGPRs limit waves per SIMD (gfx9: 7 above 100); gfx10+ never
    acc_row_span: int              # rows of a 16x16 fp32 matrix result one lane holds, first to last:
    #                                4 (MFMA), 8 (gfx12 WMMA), 16 (gfx11 WMMA: rows 2r + lane / 16)
    # a vector load served by the L2, the MALL / Infinity Cache, DRAM on the flagship product: ns
    # (pointer chasing; where a range was published, its low end; sources in benchmarks/hardware.py)
    load_latency_ns: tuple[float, float, float]
    features: tuple[str, ...] = field(default=())  # target features seen in gcnArchName

    @property
    def generation(self) -> int:
        """The ISA's major version, ``isa_version // 1000``: 9 (gfx942, gfx950), 11 (gfx1100,
        gfx1151), 12 (gfx1201). For what the instruction set itself does (counters, encodings)."""
        return self.isa_version // 1000

    @property
    def simds_per_lds_pool(self) -> int:
        """SIMDs whose waves share one LDS pool: a CU's, or a WGP's (two CUs)."""
        return self.simds_per_cu * (2 if self.lds_pooled_per == "wgp" else 1)

    def occupancy(self, vgprs: int, lds_bytes: int, waves_per_workgroup: int) -> int:
        """Waves per SIMD the register and LDS budgets allow (LLVM's model, code_objects.md §5;
        without the SGPR term, which only bites above 100 SGPRs, see `sgpr_limited_occupancy`)."""
        granule = self.vgpr_granule
        vgpr_alloc = max(granule, -(-max(vgprs, 1) // granule) * granule)
        waves = min(self.max_waves_per_simd, self.vgprs_per_simd_lane // vgpr_alloc)
        if lds_bytes > 0:
            groups = self.lds_pool_bytes // lds_bytes
            waves = min(waves, groups * waves_per_workgroup // self.simds_per_lds_pool)
        return waves


_DOT_GFX942 = frozenset({"dot2_f32_f16", "dot2c_f32_f16"})
_DOT_GFX950 = frozenset({"dot2_f32_f16", "dot2c_f32_f16", "dot2_f32_bf16", "dot2c_f32_bf16"})
_DOT_GFX11 = frozenset({"dot2_f32_f16", "dot2acc_f32_f16", "dot2_f32_bf16"})
_DOT_GFX12 = frozenset({"dot2_f32_f16", "dot2_f32_bf16", "dot4_f32_fp8"})

# Positional fields through elf_mach, then the LDS pool, SGPR, matrix-result and latency facts.
ARCHS: dict[str, ArchInfo] = {
    a.name: a
    for a in (
        ArchInfo("gfx942", "CDNA3", "Instinct MI300X / MI300A / MI325X", 64, 64 * 1024, "fnuz", "mfma",
                 _DOT_GFX942, 8, 512, 8, 4, 304, 5300.0, 9402, 0x04C,
                 lds_pool_bytes=64 * 1024, lds_pooled_per="cu", sgpr_limited_occupancy=True, acc_row_span=4,
                 load_latency_ns=(137.0, 218.0, 417.0)),
        ArchInfo("gfx950", "CDNA4", "Instinct MI350X / MI355X", 64, 160 * 1024, "ocp", "mfma",
                 _DOT_GFX950, 8, 512, 8, 4, 256, 8000.0, 9500, 0x04F,
                 lds_pool_bytes=160 * 1024, lds_pooled_per="cu", sgpr_limited_occupancy=True, acc_row_span=4,
                 load_latency_ns=(137.0, 218.0, 417.0)),
        ArchInfo("gfx1100", "RDNA3", "Radeon RX 7900 XTX / PRO W7900", 32, 64 * 1024, None, "wmma",
                 _DOT_GFX11, 16, 1536, 24, 2, 96, 960.0, 11000, 0x041,
                 lds_pool_bytes=128 * 1024, lds_pooled_per="wgp", sgpr_limited_occupancy=False, acc_row_span=16,
                 load_latency_ns=(100.0, 150.3, 234.6)),
        ArchInfo("gfx1151", "RDNA3.5", "Ryzen AI Max (Radeon 8060S)", 32, 64 * 1024, None, "wmma",
                 _DOT_GFX11, 16, 1536, 24, 2, 40, 256.0, 11501, 0x04A,
                 lds_pool_bytes=128 * 1024, lds_pooled_per="wgp", sgpr_limited_occupancy=False, acc_row_span=16,
                 load_latency_ns=(100.0, 174.0, 344.2)),
        ArchInfo("gfx1201", "RDNA4", "Radeon RX 9070 XT / AI PRO R9700", 32, 64 * 1024, "ocp", "wmma",
                 _DOT_GFX12, 16, 1536, 24, 2, 64, 640.0, 12001, 0x04E,
                 lds_pool_bytes=128 * 1024, lds_pooled_per="wgp", sgpr_limited_occupancy=False, acc_row_span=8,
                 load_latency_ns=(100.0, 150.3, 234.6)),
    )
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
