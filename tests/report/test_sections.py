"""The fused MoE and sparse MLA sections' measurements (benchmarks.fused_moe, benchmarks.sparse_mla) at small
shapes: every launch of the call through the cache model and the latency floor."""

from __future__ import annotations

import pytest

from benchmarks import fused_moe as moe
from benchmarks import latency
from benchmarks import sparse_mla as mla


@pytest.mark.parametrize("arch", ["gfx942", "gfx1151"])
def test_moe_row_has_dram_bytes_and_a_latency_floor_per_launch(arch):
    r = moe.measure(arch, "tiny", 8, 2, 256, 128, 2, False)
    assert r["dram_ratio"] >= 0.999 and r["dram_ratio"] <= r["ratio"] + 1e-9
    p = r["parts"]
    # three launches (route, GEMM1, GEMM2), each at least its overhead and one round trip
    assert p["call"]["latency_s"] > 3 * latency.LAUNCH_US[arch] * 1e-6
    route = p["call"]["latency_s"] - p["gemm1"]["latency_s"] - p["gemm2"]["latency_s"]   # the routing launch's
    assert route > latency.LAUNCH_US[arch] * 1e-6
    assert p["gemm1"]["round_trips"] >= 2 and p["gemm2"]["round_trips"] >= 2
    assert p["call"]["seconds"] >= p["call"]["latency_s"]
    assert p["call"]["dram_bytes"] >= p["gemm1"]["dram_bytes"] + p["gemm2"]["dram_bytes"]
    assert "| tiny | " + arch in "\n".join(moe.markdown({"command": "x", "date": "d", "commit": "c",
                                                          "seconds": 1.0, "rows": [r]}))


def test_mla_row_has_dram_bytes_and_a_latency_floor():
    r = mla.measure("gfx950", "tiny", "v4", 1, 16, 64, 0, False)
    assert r["dram_ratio"] >= 0.999 and r["latency_s"] > latency.LAUNCH_US["gfx950"] * 1e-6
    assert r["round_trips"]["longest"] >= 2 and r["seconds"] >= r["latency_s"]
    assert "| tiny | gfx950 |" in "\n".join(mla.markdown({"command": "x", "date": "d", "commit": "c",
                                                           "seconds": 1.0, "rows": [r]}))


@pytest.mark.parametrize("arch", ["gfx950", "gfx1201"])
@pytest.mark.parametrize("splits", [1, 2, 5])
def test_mla_chain_is_what_the_split_count_assumes(arch, splits):
    """ops.sparse_mla.chain_trips (the split count's model) against the chains the emulator
    measures: 8 tiles of one token, one head group; the split that merges may hold the odd split
    of the last pair itself (one acc load fewer)."""
    from hipskinny.ops import sparse_mla as op
    r = mla.measure(arch, "tiny", "v4", 1, 16, 8 * op.ROWS, 0, False, splits=splits)
    want = op.chain_trips(8, splits)
    assert want - (splits % 2) <= r["round_trips"]["longest"] <= want
