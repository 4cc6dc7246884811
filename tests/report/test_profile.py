"""benchmarks.profile: a report row's sample launch, its counts by code address with the shipped
listing's text for each."""

from __future__ import annotations

import pytest

from benchmarks import profile
from hipskinny.arch import ARCHS


@pytest.mark.parametrize("arch", list(ARCHS))
def test_profile_of_a_row(arch):
    p = profile.profile("skinny_gemm", arch, 16, 4096, 8192)
    assert p["kernel"].startswith("skinny_gemm_splitk_f16_t1")
    assert sum(p["counts"].values()) == p["total"] > 0
    assert set(p["counts"]) <= set(p["text"])            # every address that ran is in the listing
    hottest = max(p["counts"], key=p["counts"].get)
    assert p["text"][hottest] and p["counts"][hottest] > p["counts"][min(p["counts"])]   # a loop runs more
    out = profile.report(p)
    assert out.startswith(p["kernel"]) and "VALU per weight x lane" in out
    assert "v_mfma" in out or "v_wmma" in out            # the matrix instructions of the group loop
