import re

import paths
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
    assert {a.wave_size for a in ARCHS.values() if a.generation >= 10} == {32}


# The product's facts, by name (archs.md §2, code_objects.md §5, matrix_layouts.md).
@pytest.mark.parametrize("arch, generation, pool, per, simds, sgpr, span", [
    ("gfx942", 9, 64 * 1024, "cu", 4, True, 4), ("gfx950", 9, 160 * 1024, "cu", 4, True, 4),
    ("gfx1100", 11, 128 * 1024, "wgp", 4, False, 16), ("gfx1151", 11, 128 * 1024, "wgp", 4, False, 16),
    ("gfx1201", 12, 128 * 1024, "wgp", 4, False, 8),
])
def test_arch_facts_by_name(arch, generation, pool, per, simds, sgpr, span):
    info = ARCHS[arch]
    assert (info.generation, info.lds_pool_bytes, info.lds_pooled_per) == (generation, pool, per)
    assert (info.simds_per_lds_pool, info.sgpr_limited_occupancy, info.acc_row_span) == (simds, sgpr, span)
    assert info.lds_per_workgroup <= info.lds_pool_bytes
    assert info.matrix_unit == ("mfma" if generation == 9 else "wmma")


def test_no_arch_name_prefix_tests_outside_arch_py():
    """Per-arch facts are ArchInfo fields read by name: no Python file of the repository outside
    frontend/arch.py tests an arch's name for its family (issue 56)."""
    needle = re.compile(r"startswith\(\s*\(?\s*f?[\"']gfx")
    files = [*paths.REPO.glob("*.py"), *(p for top in ("frontend", "benchmarks", "tests", "build_scripts")
                                         for p in (paths.REPO / top).rglob("*.py"))]
    assert len(files) > 100                          # the tree was read
    found = [f"{p.relative_to(paths.REPO)}:{i}" for p in sorted(files) if p != paths.REPO / "frontend" / "arch.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if needle.search(line)]
    assert found == []
    call = "startswith"
    assert needle.search(f'x.{call}("gfx9")') and needle.search(f"n.{call}(('gfx11', 'gfx12'))")


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
