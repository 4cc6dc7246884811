"""The performance model: what a launch costs on real hardware, from emulator counts.

Decode kernels are memory-bound, so the floor is bytes / DRAM bandwidth. The
other two roofs are instruction issue (VALU wave-instructions over the rate the
SIMDs can issue them) and, for later kernels, matrix work. Every number here is
derived from `ArchInfo` (the single per-arch table) and the emulator's counts;
nothing is timed on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from hipskinny.arch import ArchInfo

# Peak engine clock of the flagship product per arch, GHz (archs.md §4).
CLOCK_GHZ = {"gfx942": 2.1, "gfx950": 2.4, "gfx1100": 2.5, "gfx1151": 2.9, "gfx1201": 2.97}


def wave_issue_rate(arch: ArchInfo, cu_count: int) -> float:
    """VALU wave-instructions per second the whole GPU can issue.

    gfx9: four SIMD16 per CU, a wave64 instruction occupies a SIMD for 4 cycles -> one
    wave-instruction per CU per cycle. gfx11/12: two SIMD32 per CU, one wave32
    instruction per SIMD per cycle (VOPD dual issue ignored: a lower bound on throughput).
    """
    per_cu_per_cycle = 1.0 if arch.wave_size == 64 else 2.0
    return cu_count * per_cu_per_cycle * CLOCK_GHZ[arch.name] * 1e9


@dataclass
class Prediction:
    bytes_moved: int
    bytes_min: int
    valu: int
    seconds_memory: float
    seconds_issue: float

    @property
    def traffic_ratio(self) -> float:
        return self.bytes_moved / self.bytes_min

    @property
    def seconds(self) -> float:
        return max(self.seconds_memory, self.seconds_issue)

    @property
    def floor_ratio(self) -> float:
        """Predicted time over the bandwidth floor (bytes_min / bandwidth)."""
        return self.seconds / (self.seconds_memory / self.traffic_ratio)


def predict(arch: ArchInfo, cu_count: int, bytes_moved: int, bytes_min: int, valu: int) -> Prediction:
    bw = arch.peak_bandwidth_gbs * 1e9
    return Prediction(bytes_moved, bytes_min, valu, bytes_moved / bw, valu / wave_issue_rate(arch, cu_count))


def balance_point(arch: ArchInfo, cu_count: int) -> float:
    """VALU wave-instructions per byte of DRAM bandwidth the SIMDs can sustain."""
    return wave_issue_rate(arch, cu_count) / (arch.peak_bandwidth_gbs * 1e9)
