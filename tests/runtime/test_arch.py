import pytest

from hipskinny import UnsupportedArchError
from hipskinny.arch import ARCHS, SHIPPED_ARCHS, arch_info, parse_gcn_arch_name


def test_shipped_archs_are_the_five():
    assert SHIPPED_ARCHS == ("gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201")


@pytest.mark.parametrize("text, name, features", [
    ("gfx942:sramecc+:xnack-", "gfx942", ("sramecc+", "xnack-")),
    ("gfx1201", "gfx1201", ()),
    (b"gfx1100\0garbage", "gfx1100", ()),          # older hip-python: NUL-padded bytes
    (" GFX950:xnack+ ", "gfx950", ("xnack+",)),
])
def test_parse_gcn_arch_name(text, name, features):
    assert parse_gcn_arch_name(text) == (name, features)


def test_arch_info_keeps_features_and_facts():
    info = arch_info("gfx942:sramecc+:xnack-")
    assert info.name == "gfx942" and info.features == ("sramecc+", "xnack-")
    assert (info.wave_size, info.lds_per_workgroup, info.fp8_format) == (64, 65536, "fnuz")
    assert arch_info("gfx950").lds_per_workgroup == 160 * 1024
    assert arch_info("gfx1100").fp8_format is None and arch_info("gfx1201").fp8_format == "ocp"
    assert {a.wave_size for a in ARCHS.values() if a.name.startswith("gfx1")} == {32}


@pytest.mark.parametrize("text", ["gfx90a:sramecc+:xnack-", "gfx1030", "sm_90"])
def test_unsupported_arch_names_the_shipped_ones(text):
    with pytest.raises(UnsupportedArchError) as e:
        arch_info(text)
    for arch in SHIPPED_ARCHS:
        assert arch in str(e.value)


def test_empty_arch_name_is_an_error():
    with pytest.raises(UnsupportedArchError):
        arch_info("")


# Occupancy (waves per SIMD) as LLVM computes it: code_objects.md §5.
@pytest.mark.parametrize("arch, vgprs, waves", [
    ("gfx942", 64, 8), ("gfx942", 65, 7), ("gfx942", 96, 5), ("gfx942", 128, 4), ("gfx942", 256, 2),
    ("gfx942", 512, 1), ("gfx1100", 96, 16), ("gfx1100", 97, 12), ("gfx1100", 128, 10),
    ("gfx1201", 192, 8), ("gfx1151", 256, 5),
])
def test_occupancy_vgpr_term(arch, vgprs, waves):
    assert ARCHS[arch].occupancy(vgprs, 0, 4) == waves


@pytest.mark.parametrize("arch, lds, threads, waves", [
    ("gfx942", 8192, 256, 8), ("gfx942", 16384, 256, 4), ("gfx942", 65536, 256, 1),
    ("gfx950", 32768, 256, 5), ("gfx950", 65536, 256, 2), ("gfx950", 163840, 256, 1),
    ("gfx1100", 16384, 256, 16), ("gfx1201", 32768, 256, 8), ("gfx1100", 65536, 256, 4),
    ("gfx942", 4096, 64, 4),
])
def test_occupancy_lds_term(arch, lds, threads, waves):
    info = ARCHS[arch]
    assert info.occupancy(32, lds, threads // info.wave_size) == waves


def test_occupancy_terms_add_the_gfx9_sgpr_limit():
    info = ARCHS["gfx942"]
    assert info.occupancy_terms(64, 100, 0, 4) == {"cap": 8, "vgpr": 8, "sgpr": 8}
    assert min(info.occupancy_terms(64, 102, 0, 4).values()) == 7          # code_objects.md §5
    terms = ARCHS["gfx1100"].occupancy_terms(97, 105, 32768, 8)
    assert "sgpr" not in terms and min(terms.values()) == ARCHS["gfx1100"].occupancy(97, 32768, 8)


# Derived rates against archs.md §5 (matrix TFLOPS) and §10 (lane-instructions per byte, single issue).
@pytest.mark.parametrize("arch, matrix_tflops, lane_instr_per_byte", [
    ("gfx942", 1307.4, 7.7), ("gfx950", 2516.6, 4.9), ("gfx1100", 122.9, 16.0), ("gfx1151", 59.4, 29.0),
    ("gfx1201", 194.6, 19.0),
])
def test_hardware_rates_match_the_fact_sheet(arch, matrix_tflops, lane_instr_per_byte):
    info = ARCHS[arch]
    assert info.matrix_flops_rate() / 1e12 == pytest.approx(matrix_tflops, rel=1e-3)
    assert info.balance_point() * info.wave_size == pytest.approx(lane_instr_per_byte, rel=0.01)
    assert info.valu_issue_rate(1) == pytest.approx(64 / info.wave_size * info.clock_ghz * 1e9)
    assert info.lds_bandwidth() > info.peak_bandwidth_gbs * 1e9


def test_every_hardware_number_has_a_source():
    from hipskinny.arch import HW_SOURCES

    for arch, info in ARCHS.items():
        assert info.product and info.clock_ghz > 0 and info.matrix_flops_per_clk_cu > 0
        assert set(HW_SOURCES[arch]) >= {"cu_count", "bandwidth", "clock", "simds", "matrix", "lds"}
