"""The performance report's check mode: small shapes, every invariant asserted.

Runs in a subprocess so that the report measures this source tree (benchmarks/ imports
hipskinny from frontend/), whatever copy of the package the test process imported. Two
archs (one wave64, one wave32) keep it well under a minute; `python -m benchmarks.report
--check` covers all five.
"""

from __future__ import annotations

import json
import subprocess
import sys

import paths
import pytest

from hipskinny.arch import ARCHS

ROOT = paths.REPO


def test_report_check_mode(tmp_path):
    out = tmp_path / "report.json"
    md = tmp_path / "report.md"
    # -j 2: the worker processes a full run uses (as fast as one process at these sizes)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.report", "--check", "--arch", "gfx942", "gfx1151",
                           "-j", "2", "--json", str(out), "--md", str(md)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads(out.read_text())
    assert rep["failures"] == []
    ok = [r for r in rep["rows"] if r["status"] == "ok"]
    assert ok and all(r["traffic_ratio"] >= 0.999 and r["dram_ratio"] >= 0.999 for r in ok)   # SMEM: see report.py
    # every row has a latency floor, and the predicted time is at least it
    assert all(r["latency_us"] > 1 and r["predicted_us"] >= r["latency_us"] for r in ok)
    assert any(r["bound"] == "latency" for r in ok)
    # the caches absorb re-reads: somewhere the requests exceed what DRAM sees
    assert any(r["dram_ratio"] < r["traffic_ratio"] - 0.05 for r in ok)
    assert all(r["status"] in ("ok", "unsupported") for r in rep["rows"])
    # Every shipped (code-object family, arch) was reached by some op's plan.
    shipped = {(k["family"], k["arch"]) for k in rep["static"]}
    assert shipped == {(r["family"], r["arch"]) for r in ok}
    assert any(r["linearity"] is not None for r in ok)
    assert {"gemv", "skinny_gemm"} <= set(rep["python_overhead"]["families"])
    cases = rep["python_overhead"]["cases"]           # per-call cost through HipDevice on the fake runtime
    assert {"skinny_gemm_torch_out", "skinny_gemm_dlpack_out", "skinny_gemm_numpy_no_copies"} <= set(cases)
    assert all(v > 0 for v in cases.values()) and rep["python_overhead"]["torch_add_us"] > 0
    text = md.read_text()
    assert "## Per-call cost" in text and "present_cpu_torch_as_gpu" in text
    assert "not measured" in text or "none was measured on a GPU" in text


def test_model_helpers():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.dynamic import kernel_family, mismatch
        from benchmarks.model import arithmetic_floor_seconds, matrix_flops
        from benchmarks.static import load_bytes
    finally:
        sys.path.remove(str(ROOT))
    assert matrix_flops("v_mfma_f32_16x16x16_f16") == 8192
    assert matrix_flops("v_mfma_f32_4x4x4_16b_f16") == 2 * 4 * 4 * 4 * 16
    assert matrix_flops("v_wmma_f32_16x16x16_f16") == 8192
    assert load_bytes("global_load_dwordx4") == 16 and load_bytes("global_load_b128") == 16
    # the arithmetic floor: MI300X's MFMA plus its VALU (2048 + 256 FLOPs per clock and CU); the RX 7900 XTX's
    # WMMA alone (it runs on the SIMDs): 4-bit qkv_proj at N = 64 needs 26.2 us of multiply-adds there,
    # against 13.3 us for its bytes
    flops = 2 * 64 * 6144 * 4096
    mi300, navi31 = ARCHS["gfx942"], ARCHS["gfx1100"]
    assert arithmetic_floor_seconds(mi300, flops, 304) == pytest.approx(flops / (304 * 2304 * 2.1e9))
    assert arithmetic_floor_seconds(mi300, flops, 304, eight_bit=True) == pytest.approx(flops / (304 * 4352 * 2.1e9))
    assert arithmetic_floor_seconds(navi31, flops, 96) == pytest.approx(26.21e-6, rel=1e-3)
    assert load_bytes("global_load_ushort") == 2 and load_bytes("ds_read_b128") == 0
    fams = ["skinny_gemm", "skinny_gemm_splitk", "gemv"]
    assert kernel_family("skinny_gemm_splitk_f16_t1", fams) == "skinny_gemm_splitk"
    assert kernel_family("skinny_gemm_f16_n1_y1", fams) == "skinny_gemm"
    assert kernel_family("other_f16", fams) is None
    real = {"kernel": "k", "ytile": 2, "grid": 608, "units": 1002}
    assert mismatch(real, {"kernel": "k", "ytile": 2, "grid": 4, "units": 6.6}, 152) < 0.01
    assert mismatch(real, {"kernel": "k", "ytile": 4, "grid": 4, "units": 6.6}, 152) > 0.5
    assert mismatch(real, {"kernel": "j", "ytile": 2, "grid": 4, "units": 6.6}, 152) == float("inf")


def test_fitted_sample_equals_the_whole_one():
    """Two shorter runs on the same grid, fitted, give the counts of the whole sample."""
    sys.path.insert(0, str(ROOT))
    try:
        import numpy as np

        import benchmarks.dynamic as d
    finally:
        sys.path.remove(str(ROOT))
    cap = d.ROW_CAP_ELEMENTS
    try:
        d.ROW_CAP_ELEMENTS = 1 << 18
        fitted = d.measure("skinny_gemm", "gfx1201", np.float16, 1, 64 * 2048, 512)
        d.ROW_CAP_ELEMENTS = 1 << 40
        whole = d.measure("skinny_gemm", "gfx1201", np.float16, 1, 64 * 2048, 512)
    finally:
        d.ROW_CAP_ELEMENTS = cap
    assert fitted.fitted is not None and whole.fitted is None
    assert fitted.sample.rows == whole.sample.rows
    for key, value in whole.sample.per_row.items():
        assert fitted.sample.per_row[key] == pytest.approx(value, rel=1e-9)


def test_rows_above_dram_ratio_are_explained_by_cause():
    from benchmarks.report import _above_dram
    base = {"arch": "gfx1151", "model": "M", "layer": "L", "n": 16}
    sk = "skinny_gemm_splitk_f16_t1"
    rows = [{**base, "op": "matmul_4bit:dequantize", "kernel": "skinny_gemm_splitk_f16_t1", "plan": {"shards": 4},
             "dram_ratio": 8.0},
            {**base, "op": "skinny_gemm", "kernel": sk, "plan": {"shards": 4}, "dram_ratio": 1.3},
            {**base, "op": "skinny_gemm", "kernel": sk, "plan": {"shards": 1}, "dram_ratio": 1.2},
            {**base, "op": "gemv", "kernel": "gemv_f16_r1", "plan": {}, "dram_ratio": 1.07},
            {**base, "op": "gemv", "kernel": "gemv_f16_r1", "plan": {}, "dram_ratio": 1.01}]
    line = _above_dram(rows)
    assert line.startswith("- 4 of 5 rows have a DRAM ratio above 1.05")
    assert "1 from the dequantize route" in line and "1 from split-K's fp32 partial tiles" in line
    assert "1 from x re-read by every 128-row block" in line and "1 from other: gemv gfx1151 M L N=16 1.07" in line


@pytest.mark.parametrize("arch", list(ARCHS))
def test_a_sample_on_fewer_cus_gives_the_dram_bytes_of_more(arch, monkeypatch):
    """The activation x does not shrink with a sample's rows (benchmarks/cache.py, shared lines): a
    one-CU sample of skinny_gemm N = 16 (x 256 KiB, evicted between the units a workgroup runs in
    turn) scaled by 2 gives the DRAM bytes of the two-CU GPU at twice the rows exactly; scaling x's
    re-reads too would overstate them by x per extra round."""
    sys.path.insert(0, str(ROOT))
    try:
        import numpy as np

        import benchmarks.dynamic as d
        from hipskinny.ops import _splitk
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(_splitk, "SPLITK_UNIT_BYTES", 1 << 30)      # one shard on both: the same plan, scaled
    n, k, rows = 16, 8192, 512
    one = d._emulate("skinny_gemm", arch, 1, np.float16, n, rows, k, seed=0)
    two = d._emulate("skinny_gemm", arch, 2, np.float16, n, 2 * rows, k, seed=0)
    assert one.info["shards"] == two.info["shards"] == 1 and 2 * one.info["units"] == two.info["units"]
    x_bytes = n * k * 2
    assert one.dram_shared >= x_bytes and two.dram_shared >= x_bytes
    assert one.dram > 2 * rows * k + x_bytes                              # x re-read: two rounds of units
    meas = d.Measurement("skinny_gemm", arch, n, 2 * rows, k, "ok", sample=one, scale=2.0)
    assert meas.dram() == two.dram
    assert 2 * one.dram > two.dram


def test_prediction_charges_compute_on_the_busiest_cu():
    """`predict(..., cu_share)`: the VALU, matrix and LDS roofs times the busiest CU's share; memory,
    the floor and latency are chip-wide and stay."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.model import predict
    finally:
        sys.path.remove(str(ROOT))
    from hipskinny.arch import ARCHS
    args = dict(bytes_moved=2e6, bytes_min=1e6, valu=1e6, mnemonics={"v_mfma_f32_16x16x16_f16": 1e4},
                lds_bytes=1e8, latency_seconds=1e-6)
    even, busy = predict(ARCHS["gfx942"], 304, **args), predict(ARCHS["gfx942"], 304, cu_share=3.0, **args)
    for roof in ("valu", "matrix", "lds"):
        assert busy.roofs[roof] == pytest.approx(3 * even.roofs[roof]) and even.roofs[roof] > 0
    for roof in ("memory", "latency"):
        assert busy.roofs[roof] == even.roofs[roof]
    assert busy.seconds_floor == even.seconds_floor


def test_busiest_cu_share_of_a_plan():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.model import busiest_cu_share, workgroup_work
    finally:
        sys.path.remove(str(ROOT))
    # split-K: 416 units (32 row blocks x 13 shards) on 256 CUs: 160 CUs run two, 96 one
    assert busiest_cu_share(workgroup_work({"grid": 416, "units": 416}, 4096, 4), 256) == pytest.approx(512 / 416)
    assert busiest_cu_share(workgroup_work({"grid": 256, "units": 256}, 4096, 4), 256) == 1.0
    assert busiest_cu_share(workgroup_work({"grid": 1, "units": 1}, 128, 4), 256) == 256.0
    assert workgroup_work({"grid": 3, "units": 8}, 1024, 4) == [3, 3, 2]
    # lane-split: 10 tiles, 2 workgroups of 4 waves: b = 0 takes tiles 0-3 and 8-9, b = 1 tiles 4-7
    assert workgroup_work({"grid": 2, "ytile": 4}, 40, 4) == [6, 4]
    assert workgroup_work({"grid": 8, "rows_per_group": 8}, 64, 4) == [1] * 8
    assert workgroup_work({"kernel": "a route"}, 64, 4) is None


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("n", [4, 16])
def test_workgroup_work_is_what_the_kernels_run(arch, n, force_slices):
    """The workgroups' global accesses (benchmarks.traffic's streams) come in proportion to the work
    `workgroup_work` deals them, for a lane-split (N = 4) and a split-K (N = 16) skinny_gemm plan whose
    work does not divide by the grid (split-K: units of a whole row block, 11 of them; the planner
    would deal the walk evenly)."""
    sys.path.insert(0, str(ROOT))
    try:
        import numpy as np

        import hipskinny
        from benchmarks import dynamic, traffic
        from benchmarks.model import workgroup_work
    finally:
        sys.path.remove(str(ROOT))
    dev = dynamic.device(arch, 1)
    m, k = (1400, 512) if n <= 8 else (1408, 512)    # 1400 one-row tiles; 11 row blocks of 128
    force_slices(1, k // 128)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((n, k)).astype(np.float16), rng.standard_normal((m, k)).astype(np.float16)
    info = dynamic.plan_info("skinny_gemm", dev, np.float16, n, m, k)
    waves = 256 // ARCHS[arch].wave_size
    work = workgroup_work(info, m, waves)
    assert work is not None and len(set(work)) > 1           # uneven: the check means something
    with hipskinny.on_device(dev), traffic.Recorder(dev, table=False) as rec:
        hipskinny.skinny_gemm(x, w)
    launch = max(rec.streams)
    streams = rec.streams[launch]
    by_block = [len(streams[g]) for g in sorted(streams, key=lambda g: (g[2], g[1], g[0]))]
    assert len(by_block) == len(work)
    loads = np.array(by_block, float) - min(by_block)        # less each workgroup's fixed accesses
    share = np.array(work, float) - min(work)
    assert np.allclose(loads / loads.max(), share / share.max(), atol=0.02)
