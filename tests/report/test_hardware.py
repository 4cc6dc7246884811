"""benchmarks/hardware.py: the model's rates per arch, their sources, and the occupancy terms."""

from __future__ import annotations

import pytest

from benchmarks import hardware
from hipskinny.arch import ARCHS


def test_occupancy_terms_add_the_gfx9_sgpr_limit():
    info = ARCHS["gfx942"]
    assert hardware.occupancy_terms(info, 64, 100, 0, 4) == {"cap": 8, "vgpr": 8, "sgpr": 8}
    assert min(hardware.occupancy_terms(info, 64, 102, 0, 4).values()) == 7          # code_objects.md §5
    terms = hardware.occupancy_terms(ARCHS["gfx1100"], 97, 105, 32768, 8)
    assert "sgpr" not in terms and min(terms.values()) == ARCHS["gfx1100"].occupancy(97, 32768, 8)


# Derived rates against archs.md §5 (matrix TFLOPS) and §10 (lane-instructions per byte, single issue).
@pytest.mark.parametrize("arch, matrix_tflops, lane_instr_per_byte", [
    ("gfx942", 1307.4, 7.7), ("gfx950", 2516.6, 4.9), ("gfx1100", 122.9, 16.0), ("gfx1151", 59.4, 29.0),
    ("gfx1201", 194.6, 19.0),
])
def test_hardware_rates_match_the_fact_sheet(arch, matrix_tflops, lane_instr_per_byte):
    info, hw = ARCHS[arch], hardware.HARDWARE[arch]
    assert hardware.matrix_flops_rate(info) / 1e12 == pytest.approx(matrix_tflops, rel=1e-3)
    assert hardware.balance_point(info) * info.wave_size == pytest.approx(lane_instr_per_byte, rel=0.01)
    assert hardware.valu_issue_rate(info, 1) == pytest.approx(64 / info.wave_size * hw.clock_ghz * 1e9)
    assert hardware.lds_bandwidth(info) > info.peak_bandwidth_gbs * 1e9


def test_every_hardware_number_has_a_source():
    assert set(hardware.HARDWARE) == set(ARCHS)
    for hw in hardware.HARDWARE.values():
        assert hw.product and hw.clock_ghz > 0 and hw.matrix_flops_per_clk_cu > 0
        assert set(hw.sources) >= {"cu_count", "bandwidth", "clock", "simds", "matrix", "lds", "latency"}
