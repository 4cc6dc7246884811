"""The performance report: every kernel family x arch x real decode shape.

    python -m benchmarks.report                  # writes benchmarks/RESULTS.md and RESULTS.json
    python -m benchmarks.report --check          # small shapes, asserts the invariants (CI)

Families and archs come from ``hsaco/manifest.json``; the kernel a shape gets comes from
the op's ``plan_info``, and the launch goes through the public API, so new kernels and
families show up without changes here. Static numbers are read from the code objects
and their listings (static.py), dynamic ones from the emulator (dynamic.py), times from
the roofline (model.py). No time here is measured on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import hipskinny.ops as hs_ops
from hipskinny import registry
from hipskinny.arch import ARCHS

from . import ROOT, dynamic, emulator_rate, families, hardware, latency, overhead, published
from .model import arithmetic_floor_seconds, busiest_cu_share, predict, workgroup_work
from .shapes import CHECK_SHAPES, SHAPES, Shape, n_values
from .static import KernelStatic, family_static, inst_class, kernel_sort_key

HERE = Path(__file__).resolve().parent
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
# Code-object families outside this report's model, which is that of a GEMM-shaped op: a weight
# matrix [M, K] streamed against N tokens, sampled by scaling M with the CU count, judged per
# weight byte. Their spills and scratch are checked by the build, their results by their tests;
# the report names them with the reason their op module declares (`hipskinny.ops.Exports.report`).
OUTSIDE_MODEL = {co: ex.report for ex in map(hs_ops.exports, hs_ops.op_names()) if ex.report != hs_ops.GEMM_REPORT
                 for co in ex.code_objects}
# Families outside the model that have their own benchmarks/<family>.py, whose section the report shows.
SECTIONS = tuple(op for op in hs_ops.op_names()
                 if hs_ops.exports(op).report != hs_ops.GEMM_REPORT and (HERE / f"{op}.py").is_file())
LINEARITY_TOL = 0.02        # per-row counts at c and 2c CUs may differ by this much (partial groups)
LINEARITY_SHAPE = (2048, 1 << 25)   # checked on the first shape with M >= 2048 and M*K <= 32M (mid-sized, cheap)

ASSUMPTIONS = """\
* **Times are predictions of a model, not measurements**: no AMD GPU was used. Counts
  (bytes, instructions) are exact for what the emulator ran; the rates they are divided
  by are the flagship products' peak figures in the table above.
* Roofs: DRAM bytes / peak DRAM bandwidth;
  VALU (+ transcendental) wave-instructions / single-issue rate (64 lanes per CU per
  clock; no credit for VOPD dual issue or packed math); MFMA/WMMA FLOPs / dense fp16
  matrix rate; LDS bytes / LDS bandwidth. The other roofs are assumed to overlap fully.
* DRAM bytes (`dram_bytes`, `dram_ratio` over the minimum) come from the sample's global
  requests replayed through LRU models of the arch's caches (benchmarks/cache.py): 128-byte
  lines; an L2 per XCD (gfx942/gfx950: 8 x 4 MiB) or per chip (6, 2, 8 MiB), then the MALL /
  Infinity Cache (256, 256, 96, 32, 64 MiB), both scaled to the sample's CUs (same cache
  per CU, plus room for the activation x, which every workgroup reads and which does not
  shrink with the sample; x's own DRAM traffic is not scaled up with the rows); cold per call;
  the workgroups that fit at once (the plan's per CU, else two) interleaved access by access;
  stores without a fetch, each dirty line written back once.
  The requested-bytes traffic ratio stays as a column: the re-reads the caches absorb.
  Peak bandwidth is not reachable in practice (gfx1151 measures ~83% of its 256 GB/s); the
  floor ratio, not the absolute time, is the kernel's figure.
* Latency floor (`latency_us`, benchmarks/latency.py): per launch, the published
  per-dispatch time of a trivial kernel in a HIP graph replay (1.75-2.82 µs on the RDNA
  parts; 2.0 µs assumed on CDNA) plus the memory round trips no other wave can overlap:
  each wave's chain of dependent global round trips (counted by the emulator from its
  loads, stores and vmcnt/vscnt waits), times a round trip's latency (L2, MALL and DRAM
  load latencies weighted by where the cache model served the launch's lines; sources
  and assumptions per arch in `benchmarks.hardware.HARDWARE` and `latency.SOURCES`), at least
  the longest chain and at least all chains over SIMDs x occupancy. Predicted time = the largest roof or this floor
  (bound `latency`). The VALU, matrix and LDS roofs are charged on the busiest CU: times
  `busiest_cu_share`, its share of the plan's work (units, row tiles or row groups dealt to
  the workgroups, the workgroups round robin to the CUs) over the average CU's; even spread
  where the plan's work is not known (the dequantize routes' two launches).
* Floors: `floor_us` = minimum bytes / peak bandwidth (`floor_ratio`, the kernel's figure);
  `arithmetic_floor_us` = 2·N·M·K FLOPs at the dense matrix rate (8-bit rate for the FP8
  kernels), plus the VALU's packed rate where MFMA units are separate (CDNA), the larger of the
  two on RDNA (WMMA runs on the SIMDs); `roofline_ratio` = predicted / the larger floor. Where
  the multiply-adds alone outlast the bytes (4-bit weights at N = 64 on RDNA), no kernel gets
  within 1.15x of the bandwidth floor.
* Scalar, branch, wait and LDS-issue instructions cost nothing beyond their roofs.
"""

SAMPLING = """\
Real shapes are too large to emulate whole at ~10^5 wave-instructions/s, so each one runs
on a *scaled-down GPU*: the same arch with c CUs instead of C (the device's CU count and
the flagship CU count its `ArchInfo` reports, which some plans use) and M' ~ M·c/C weight
rows, same N and K. The ops size their launches from M / CU count, so the sample executes
the same kernel and configuration with the same work per wave as the real launch. This is
checked, not assumed: every entry of the op's `plan_info` for the sample must equal the
real one (configuration: kernel, tile sizes, K-chunks, shards, ...) or scale by M/M'
(grid, work units, scratch bytes) within 0.1%. c is the smallest CU count from the one
giving M' >= {min_rows} rows (up to 8x it) that passes, M' a whole number of 128-, 64-, ...
or 1-row blocks; counts are then scaled by M/M' (column `CUs/rows` in the tables). When no
c passes, the closest within 2% is used and its error reported, else the whole GPU is
emulated (or, above a budget, the row is reported as skipped). The traffic ratio is the
sample's own bytes over its own minimum (every weight, activation and output byte once),
so it is >= 1 whenever the kernel reads each byte at least once. A sample over {cap:,} weight
elements (the lm_heads on the RDNA parts: few CUs leave thousands of rows per CU even at
c = 1) is not run whole: two runs on the same c-CU grid with R and R/2 rows fit every count
as a fixed part plus a part per row, evaluated at M' (`CUs/rows (fit R/2+R)`); this cuts
the emulated work per workgroup, to keep the full report near 20 minutes. Linearity check:
for each (code-object family, arch) the first mid-sized shape (M >= 2048, M·K <= 32M) is repeated at 2c CUs
and 2M' rows; per-row
bytes, VALU, LDS and matrix counts must agree within {tol:.0%}. All families are sampled
this way: GEMV (one workgroup per R rows), small-N skinny GEMM (persistent grid, waves
stride over row tiles) and split-K skinny GEMM (persistent grid over 128-row x K-shard
units) all depend on M only through M / CU count.
"""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def families_by_arch() -> dict[tuple[str, str], dict[str, Any]]:
    m = registry.manifest()
    return {(e["family"], e["arch"]): e for e in m["code_objects"].values()}


def evaluate(meas: dynamic.Measurement, static: dict[str, KernelStatic], family: str | None,
             itemsize: int) -> dict[str, Any]:
    """One result row: the real shape's numbers from a measurement."""
    row: dict[str, Any] = {"op": meas.op, "family": None, "arch": meas.arch, "n": meas.n, "m": meas.m, "k": meas.k,
                           "status": meas.status, "message": meas.message, "plan": meas.info}
    if meas.status != "ok" or meas.sample is None:
        return row
    info = ARCHS[meas.arch]
    cus = info.default_cu_count
    s = meas.sample
    st = s.stats
    sample_moved = st.bytes_loaded["global"] + st.bytes_stored["global"]
    sample_min, _ = dynamic.min_bytes(meas.op, meas.n, s.rows, meas.k, itemsize)
    ratio = sample_moved / sample_min
    real_min, weight_bytes = dynamic.min_bytes(meas.op, meas.n, meas.m, meas.k, itemsize)
    dram_ratio = meas.dram() / real_min
    sc = meas.scaled()
    valu = sc["instructions"].get("valu", 0) + sc["instructions"].get("trans", 0)
    kernel = meas.info.get("kernel", "")
    ks = static.get(kernel)
    dyn_lds = int(meas.info.get("lds_bytes", 0))
    occ_terms = ks.occupancy_with(dyn_lds) if ks else {}
    occupancy = {kernel: min(occ_terms.values())} if occ_terms else {}
    lat = latency.call_floor(meas.arch, s.waits, meas.scale, occupancy)
    share = _cu_share(meas, ks, cus)
    pred = predict(info, cus, bytes_moved=dram_ratio * real_min, bytes_min=real_min, valu=valu,
                   mnemonics=sc["mnemonics"], lds_bytes=sc["lds_bytes"], latency_seconds=lat, cu_share=share or 1.0)
    # the multiply-adds any kernel must do, at the rate of the instructions the op's operands allow
    # (both 8-bit: the FP8 kernels, tagged _fp8_)
    arithmetic = arithmetic_floor_seconds(info, 2.0 * meas.n * meas.m * meas.k, cus, "_fp8_" in kernel)
    row.update({
        "family": family, "kernel": kernel, "sample": {"cus": s.cus, "rows": s.rows, "scale": meas.scale,
                                     "wave_instructions": st.total_instructions, "seconds": st.seconds,
                                     "plan_error": meas.plan_error, "fitted_from_rows": meas.fitted},
        "bytes_min": real_min, "bytes_moved": ratio * real_min, "traffic_ratio": ratio,
        "dram_bytes": dram_ratio * real_min, "dram_ratio": dram_ratio,
        "instructions": dict(sc["instructions"]), "valu": valu, "matrix": sc["instructions"].get("matrix", 0),
        "lds_instructions": sc["instructions"].get("lds", 0), "lds_bytes": sc["lds_bytes"],
        "valu_per_weight_byte": valu / weight_bytes, "balance_point": hardware.balance_point(info, cus),
        "occupancy": min(occ_terms.values()) if occ_terms else None, "occupancy_terms": occ_terms,
        "round_trips": {w.kernel: {"longest": w.trips.longest, "per_wave": w.trips.total / max(1.0, w.trips.waves),
                                   "round_trip_ns": w.round_trip_ns} for w in s.waits},
        "latency_us": lat * 1e6,
        "predicted_us": pred.seconds * 1e6, "floor_us": pred.seconds_floor * 1e6, "bound": pred.bound,
        "floor_ratio": pred.floor_ratio, "roofs_us": {k: v * 1e6 for k, v in pred.roofs.items()},
        "arithmetic_floor_us": arithmetic * 1e6,
        "roofline_ratio": pred.seconds / max(pred.seconds_floor, arithmetic),
        "linearity": meas.linearity(),
        "busiest_cu_share": share,
        "main_loop_valu_per_byte": ks.loop_valu_per_byte if ks else None,
    })
    return row


def _cu_share(meas: dynamic.Measurement, ks: KernelStatic | None, cus: int) -> float | None:
    """The busiest CU's share of the plan's work (benchmarks/model.py), which the compute roofs are
    charged at; None (charged as an even spread) where the plan's work is not known, and for a call
    of several launches: its plan describes only the last one."""
    several = meas.sample is not None and meas.sample.last is not None
    work = workgroup_work(meas.info, meas.m, ks.waves) if ks and not several else None
    return None if work is None else busiest_cu_share(work, cus)


def consistency(meas: dynamic.Measurement, ks: KernelStatic | None) -> list[str]:
    """Static vs dynamic: the kernel ran only instructions its listing holds, and classifying
    the executed mnemonics the static way gives the emulator's per-class counts."""
    if meas.sample is None:
        return []
    where = f"{meas.op}/{meas.arch} N={meas.n} {meas.m}x{meas.k}"
    if ks is None:
        return [f"{where}: plan chose {meas.info.get('kernel')!r}, which no shipped code object holds"]
    st = meas.sample.stats
    errors = []
    # (a call of several launches: the last one's, the kernel its plan names)
    extra = set(st.mnemonics if meas.sample.last is None else meas.sample.last) - ks.mnemonics
    if extra:
        errors.append(f"{where}: executed {sorted(extra)} not in {ks.name}'s listing")
    by_class: dict[str, float] = defaultdict(float)
    for mnem, count in st.mnemonics.items():
        by_class[inst_class(mnem)] += count
    dyn = {c: v for c, v in st.instructions.items() if v}
    if by_class.keys() - dyn.keys() or any(abs(by_class[c] - v) > 1e-6 * max(1.0, abs(v)) for c, v in dyn.items()):
        errors.append(f"{where}: static classes {dict(by_class)} != dynamic {dict(st.instructions)}")
    if ks.loop and st.instructions.get("vmem_load", 0) < ks.loop.get("vmem_load", 0):
        errors.append(f"{where}: fewer loads ran than one main-loop iteration holds")
    return errors


def _unit_costs() -> dict[tuple[str, str], float]:
    """Emulated seconds per (op, arch) in the stored report: the order to measure them in."""
    try:
        rows = json.loads((HERE / "RESULTS.json").read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return {}
    cost: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        cost[r["op"], r["arch"]] += (r.get("sample") or {}).get("seconds") or 0.0
    return cost


_STATICS: dict[tuple[str, str], dict[str, KernelStatic]] = {}
_SENT: set[tuple[str, str]] = set()         # statics a worker already returned to the parent


def _static_of(family: str, arch: str) -> dict[str, KernelStatic]:
    """A shipped code object's kernels by name (read once per process: a second for fp8_linear)."""
    if (family, arch) not in _STATICS:
        _STATICS[family, arch] = {k.name: k for k in family_static(arch, family)}
    return _STATICS[family, arch]


def _measure_unit(unit: tuple, log: Any = None) -> tuple[list[dict[str, Any]], list[str], tuple[str, float, float],
                                                        dict[tuple[str, str], dict[str, KernelStatic]]]:
    """One op on one arch over every shape and N: (rows, consistency failures, (arch, emulated
    wave-instructions, their seconds), the statics this process read). A top-level function:
    worker processes run it."""
    op, arch, shapes, dtype_name, check, min_rows, families, started = unit
    log = log or sys.stderr
    dtype = DTYPES[dtype_name]
    itemsize = np.dtype(dtype).itemsize
    shipped = families_by_arch()
    statics = {f: _static_of(f, arch) for f in families if (f, arch) in shipped}
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    instructions = seconds = 0.0
    linear_done: set[str] = set()       # one linearity check per (code-object family, arch)
    for shape in shapes:
        for n in n_values(op, check):
            try:
                kernel = dynamic.plan_info(op, dynamic.device(arch, ARCHS[arch].default_cu_count), dtype,
                                           n, shape.m, shape.k).get("kernel", "")
            except Exception:           # noqa: BLE001 - measure() reports it
                kernel = ""
            family = dynamic.kernel_family(kernel, families)
            mid = LINEARITY_SHAPE[0] <= shape.m and shape.m * shape.k <= LINEARITY_SHAPE[1]
            meas = dynamic.measure(op, arch, dtype, n, shape.m, shape.k, min_rows=min_rows,
                                   linearity=mid and family is not None and family not in linear_done)
            ks = statics.get(family, {}).get(kernel) if family else None
            row = evaluate(meas, statics.get(family, {}) if family else {}, family, itemsize)
            row.update({"model": shape.model, "layer": shape.layer})
            rows.append(row)
            if meas.sample is not None:
                for s in (meas.sample, meas.check):
                    if s is not None:
                        instructions += s.stats.total_instructions
                        seconds += s.stats.seconds
                if meas.check is not None and family:
                    linear_done.add(family)
                failures += consistency(meas, ks)
            what = (f"{row['kernel']} ratio {row['traffic_ratio']:.3f} {row['bound']}"
                    if meas.status == "ok" else meas.message[:70])
            print(f"{op:12} {arch:8} {shape.label:28} N={n:<3} {meas.status:11} {what} "
                  f"[{time.time() - started:.0f}s]", file=log, flush=True)
    fresh = {key: v for key, v in _STATICS.items() if key not in _SENT}
    _SENT.update(fresh)
    return rows, failures, (arch, instructions, seconds), fresh


def run(archs: list[str], op_names: list[str] | None, shapes: tuple[Shape, ...], dtype_name: str, check: bool,
        min_rows: int, overhead_seconds: float, log: Any = sys.stderr, jobs: int = 1) -> dict[str, Any]:
    """Measure every (op, arch) unit, `jobs` of them at a time in worker processes (1: in this one);
    rows come out in op, arch, shape order either way."""
    pairs = {key: e for key, e in families_by_arch().items() if key[1] in archs and key[0] not in OUTSIDE_MODEL}
    families = sorted({f for f, _ in pairs})
    op_list = op_names or dynamic.ops()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    rate: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    t0 = time.perf_counter()
    start_commit = _git("rev-parse", "--short", "HEAD")
    units = [(op, arch, shapes, dtype_name, check, min_rows, families, time.time()) for op in op_list for arch in archs]
    # The per-call scenario (its own process) runs alongside the units in a check, which only asserts
    # its numbers are positive; a full run times it alone, after them (the cores are busy until then).
    python_overhead = overhead.start(overhead_seconds) if check else None
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        # The costliest units first, so the workers finish together; spawn: a fresh interpreter per
        # worker (forking a process that holds torch's threads is unsafe).
        cost = _unit_costs()
        order = sorted(range(len(units)), key=lambda u: -cost.get(units[u][:2], float("inf")))
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            by_unit = dict(zip(order, pool.map(_measure_unit, [units[u] for u in order]), strict=True))
        done = [by_unit[u] for u in range(len(units))]
    else:
        done = [_measure_unit(u, log) for u in units]
    for unit_rows, unit_failures, (arch, instructions, seconds), unit_statics in done:
        rows += unit_rows
        failures += unit_failures
        rate[arch][0] += instructions
        rate[arch][1] += seconds
        _STATICS.update(unit_statics)                           # the workers' reads, not repeated here
    statics = {(f, a): _static_of(f, a) for f, a in sorted(pairs)}
    failures += invariants(rows, statics, archs)
    if python_overhead is None:
        python_overhead = overhead.start(overhead_seconds)
    static_rows = [k.row() for f, a in sorted(statics, key=lambda fa: (archs.index(fa[1]), fa[0]))
                   for k in sorted(statics[f, a].values(), key=lambda k: kernel_sort_key(k.name))]
    status = _git("status", "--porcelain", "--untracked-files=no", "--", "frontend", "kernels", "hsaco")
    return {
        "command": "python -m benchmarks.report" + (" --check" if check else ""),
        "date": datetime.date.today().isoformat(), "commit": _git("rev-parse", "--short", "HEAD"),
        "commit_at_start": start_commit,
        "uncommitted": [ln.split(maxsplit=1)[1] for ln in status.splitlines() if ln.strip()] if status != "unknown"
        else [],
        "dtype": dtype_name, "min_rows": min_rows, "linearity_tol": LINEARITY_TOL,
        "archs": {a: _arch_row(a) for a in archs},
        "rows": rows, "static": static_rows,
        "outside_model": {f: OUTSIDE_MODEL[f] for f, _ in families_by_arch() if f in OUTSIDE_MODEL},
        "python_overhead": overhead.finish(python_overhead, op_list),
        "emulator_rate": {a: {"wave_instructions": v[0], "seconds": v[1], "per_second": v[0] / v[1] if v[1] else 0}
                          for a, v in rate.items()},
        "failures": failures, "seconds": time.perf_counter() - t0,
    }


def _arch_row(arch: str) -> dict[str, Any]:
    a, hw = ARCHS[arch], hardware.HARDWARE[arch]
    return {"product": hw.product, "cu_count": a.default_cu_count, "simds_per_cu": a.simds_per_cu,
            "wave_size": a.wave_size, "clock_ghz": hw.clock_ghz, "bandwidth_gbs": a.peak_bandwidth_gbs,
            "valu_wave_instr_per_s": hardware.valu_issue_rate(a),
            "matrix_tflops_fp16": hardware.matrix_flops_rate(a) / 1e12,
            "lds_tbs": hardware.lds_bandwidth(a) / 1e12, "lds_per_workgroup": a.lds_per_workgroup,
            "balance_point": hardware.balance_point(a), "sources": hw.sources}


def invariants(rows: list[dict[str, Any]], statics: dict[tuple[str, str], dict[str, KernelStatic]],
               archs: list[str]) -> list[str]:
    out = []
    for r in rows:
        where = f"{r['op']}/{r['arch']} {r['model']} {r['layer']} N={r['n']}"
        if r["status"] == "error":
            out.append(f"{where}: {r['message']}")
        if r["status"] != "ok":
            continue
        if r["family"] is None:
            out.append(f"{where}: kernel {r['kernel']!r} belongs to no shipped code object")
        # every byte of the minimum is requested, and crosses DRAM once, in whole lines; 0.1% slack for
        # scalar (SMEM) loads, which neither the byte counts nor the cache model see: fp8_linear W8A8 at
        # N = 1 reads its per-tensor x_scale (4 bytes of the minimum) with s_load and comes to 0.9999,
        # the block-scaled split-K kernel its weight block scales (0.9998 on a one-unit sample)
        if r["traffic_ratio"] < 0.999:
            out.append(f"{where}: traffic ratio {r['traffic_ratio']:.4f} < 0.999")
        if r["dram_ratio"] < 0.999:
            out.append(f"{where}: DRAM ratio {r['dram_ratio']:.4f} < 0.999")
        # every launch waits for at least its own loads: one round trip beyond the launch overhead
        if not r["round_trips"] or min(t["longest"] for t in r["round_trips"].values()) < 1 or \
                r["latency_us"] <= latency.LAUNCH_US[r["arch"]]:
            out.append(f"{where}: latency floor {r['latency_us']:.2f} µs from round trips {r['round_trips']}")
        if r["linearity"] is not None and r["linearity"] > LINEARITY_TOL:
            out.append(f"{where}: per-row counts differ by {r['linearity']:.1%} between c and 2c CUs")
        if r["sample"]["plan_error"] > dynamic.SAMPLE_TOL:
            out.append(f"{where}: the sample's plan is {r['sample']['plan_error']:.1%} off the scaled real one")
        if not r["occupancy"] or r["occupancy"] < 1:
            out.append(f"{where}: occupancy {r['occupancy']}")
        if r["plan"].get("lds_bytes", 0) > ARCHS[r["arch"]].lds_per_workgroup:
            out.append(f"{where}: LDS {r['plan']['lds_bytes']} over the arch limit")
    for (family, arch), kernels in statics.items():
        if not kernels:
            out.append(f"{family}/{arch}: code object has no kernels")
        for k in kernels.values():
            if k.vgpr_spills or k.sgpr_spills or k.private_segment:
                out.append(f"{family}/{arch} {k.name}: spills {k.vgpr_spills}/{k.sgpr_spills}, "
                           f"private segment {k.private_segment} B")
            if k.manifest_occupancy is not None and k.manifest_occupancy != ARCHS[arch].occupancy(
                    k.vgpr, k.lds_static, 256 // k.wave_size):
                out.append(f"{family}/{arch} {k.name}: manifest occupancy {k.manifest_occupancy} disagrees "
                           "with the code object's registers")
            if not k.loop:
                out.append(f"{family}/{arch} {k.name}: no main loop found in the listing")
        if not any(r["status"] == "ok" and r["family"] == family and r["arch"] == arch for r in rows):
            out.append(f"{family}/{arch}: shipped, but no op's plan ran one of its kernels on these shapes")
        if not any(r["family"] == family and r["arch"] == arch and r["linearity"] is not None for r in rows
                   if r["status"] == "ok") and any(r["status"] == "ok" and r["family"] == family
                                                   and r["arch"] == arch and r["sample"]["cus"] < ARCHS[arch]
                                                   .default_cu_count for r in rows):
            out.append(f"{family}/{arch}: sampled but never linearity-checked")
    return out


# --- Markdown ------------------------------------------------------------------------------------

def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _us(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def _sample(s: dict[str, Any]) -> str:
    fit = s.get("fitted_from_rows")
    return f"{s['cus']}/{s['rows']}" + (f" (fit {fit[0]}+{fit[1]})" if fit else "")


def _config(plan: dict[str, Any]) -> str:
    skip = {"kernel", "grid", "lds_bytes", "k_chunk", "units", "partial_bytes", "counter_bytes"}
    return ", ".join(f"{k}={v}" for k, v in plan.items() if k not in skip)


def merge_section(section: str, prog: str, rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any],
                  order: Callable[[dict[str, Any]], Any], argv: list[str] | None, seconds: float, json_path: str,
                  md_path: str) -> None:
    """Merge a benchmark's rows into section ``section`` of the report: rows with the key of a new
    row are replaced, the others kept; every new row and the section record the command that made
    them (``prog`` and the arguments, without where the files went), the date, the commit and the
    seconds spent (added to the kept rows'); the JSON is rewritten and the Markdown re-rendered."""
    path = Path(json_path)
    rep = json.loads(path.read_text())
    old = rep.get(section, {})
    done = {key(r) for r in rows}
    keep = [r for r in old.get("rows", []) if key(r) not in done]
    given = list(argv if argv is not None else sys.argv[1:])
    for flag in ("--json", "--md"):
        if flag in given:
            at = given.index(flag)
            del given[at:at + 2]
    command = shlex.join(["python", "-m", prog, *given])
    for r in rows:
        r["command"] = command
    rep[section] = {"command": command, "date": datetime.date.today().isoformat(),
                    "commit": _git("rev-parse", "--short", "HEAD"),
                    "seconds": seconds + old.get("seconds", 0.0) * bool(keep),
                    "rows": sorted(keep + rows, key=order), "notes": old.get("notes", "")}
    path.write_text(json.dumps(rep, indent=1, default=float) + "\n")
    Path(md_path).write_text(markdown(rep))


def markdown(rep: dict[str, Any]) -> str:
    out = [f"# Performance report ({rep['dtype']})", "", *_produced_by(rep),
           "**Every time in this file is predicted by a roofline model from exact emulator counts; "
           "none was measured on a GPU** (no AMD GPU exists where this project is built).", "",
           "## Hardware numbers (`hipskinny.arch.ARCHS` and `benchmarks.hardware`, one flagship product per arch)", "",
           "| arch | product | CUs | SIMDs/CU | wave | clock GHz | DRAM GB/s | VALU wave-instr/s | "
           "fp16 matrix TFLOPS | LDS TB/s | balance (VALU/B) |", "|" + "---|" * 11]
    for a, h in rep["archs"].items():
        out.append(f"| {a} | {h['product']} | {h['cu_count']} | {h['simds_per_cu']} | {h['wave_size']} | "
                   f"{h['clock_ghz']} | {h['bandwidth_gbs']:,.0f} | {h['valu_wave_instr_per_s'] / 1e12:.3f} T | "
                   f"{h['matrix_tflops_fp16']:,.1f} | {h['lds_tbs']:.1f} | {h['balance_point']:.3f} |")
    out += ["", "Sources (tags of `shared/reference/archs.md`):", ""]
    for a, h in rep["archs"].items():
        out.append(f"- {a}: " + "; ".join(f"{k}: {v}" for k, v in h["sources"].items()))
    out += ["", "Balance point: VALU wave-instructions the SIMDs issue while one byte arrives at peak "
            "bandwidth. A kernel spending fewer VALU instructions per weight byte can stay bandwidth-bound.",
            "", "## Model and its assumptions", "", ASSUMPTIONS, "## How real shapes are emulated", "",
            SAMPLING.format(min_rows=rep["min_rows"], tol=rep["linearity_tol"], cap=dynamic.ROW_CAP_ELEMENTS)]
    out += _findings(rep)
    for op in sorted({r["op"] for r in rep["rows"]}):
        out += _op_tables(rep, op)
    out += _static_tables(rep)
    for family in SECTIONS:          # the families measured by their own benchmarks/<family>.py
        if rep.get(family):
            out += importlib.import_module(f"{__package__}.{family}").markdown(rep[family])
    out += published.markdown(rep)
    if rep.get("outside_model"):
        out += ["## Families outside this report", ""]
        out += [f"- `{f}`: {why}" for f, why in sorted(rep["outside_model"].items())] + [""]
    out += _checks(rep)
    out += _overhead(rep)
    out += ["## Emulator rate", ""]
    if rep.get("emulator_speed"):
        out += emulator_rate.markdown(rep["emulator_speed"])
    out += ["Over every emulated launch of the report run (machine shared with other work):", "",
            "| arch | wave-instructions | seconds | per second |", "|---|---|---|---|"]
    for a, v in rep["emulator_rate"].items():
        out.append(f"| {a} | {v['wave_instructions']:,.0f} | {v['seconds']:.1f} | {v['per_second']:,.0f} |")
    return "\n".join(out) + "\n"


def _findings(rep: dict[str, Any]) -> list[str]:
    out = ["## Summary per op, arch and N", "",
           "Over the shapes of `benchmarks/shapes.py`.", "",
           "| op | arch | N | traffic ratio (min–max) | DRAM ratio (min–max) | predicted / floor (min–max) | bounds | "
           "VALU per weight byte / balance (max) |", "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rep["rows"]:
        if r["status"] == "ok":
            groups[r["op"], r["arch"], r["n"]].append(r)
    for (family, arch, n), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], list(rep["archs"]).index(
            kv[0][1]), kv[0][2])):
        tr = [r["traffic_ratio"] for r in rs]
        dr = [r["dram_ratio"] for r in rs]
        fr = [r["floor_ratio"] for r in rs]
        bounds = defaultdict(int)
        for r in rs:
            bounds[r["bound"]] += 1
        use = max(r["valu_per_weight_byte"] / r["balance_point"] for r in rs)
        out.append(f"| {family} | {arch} | {n} | {min(tr):.3f}–{max(tr):.3f} | {min(dr):.3f}–{max(dr):.3f} | "
                   f"{min(fr):.2f}–{max(fr):.2f} | "
                   + ", ".join(f"{b} {c}" for b, c in sorted(bounds.items())) + f" | {use:.2f} |")
    ok = [r for r in rep["rows"] if r["status"] == "ok"]
    if ok:
        out += ["", "Notable (generated):", ""]
        lat = [r for r in ok if r["bound"] == "latency"]
        out.append(f"- {len(lat)} of {len(ok)} rows are latency-bound (launch overhead and dependent round "
                   "trips above every roof; benchmarks/latency.py).")
        busy = [r for r in ok if r["bound"] not in ("memory", "latency")]
        out.append(f"- {len(busy)} of {len(ok)} rows are bound by VALU, LDS or matrix issue"
                   + (": " + "; ".join(f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} "
                                       f"({r['bound']}, {r['floor_ratio']:.2f}x floor)" for r in busy[:12])
                      + (" ..." if len(busy) > 12 else "") if busy else "") + ".")
        compute = [r for r in ok if max(r["roofs_us"][b] for b in ("valu", "lds", "matrix")) > 1.15 * r["floor_us"]]
        out.append(f"- {len(compute)} of {len(ok)} rows have a VALU, LDS or matrix roof above 1.15x the bandwidth "
                   "floor (whatever bounds them).")
        over = [r for r in busy if r["roofline_ratio"] > 1.15]
        at = [r for r in busy if r["floor_ratio"] > 1.15 and r["roofline_ratio"] <= 1.15]
        out.append(f"- Of the rows bound by VALU, LDS or matrix issue, {len(over)} are above 1.15x the roofline floor "
                   "(the larger of the bandwidth floor and `arithmetic_floor_us`: 2·N·M·K FLOPs at the arch's "
                   "matrix rate, 8-bit rate for the FP8 kernels, plus the VALU's where MFMA units are separate; "
                   "benchmarks/model.py)"
                   + (": " + "; ".join(f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} "
                                       f"{r['roofline_ratio']:.2f}x" for r in over[:12])
                      + (" ..." if len(over) > 12 else "") if over else "")
                   + f"; {len(at)} more are above 1.15x the bandwidth floor only because their multiply-adds alone "
                   "take longer than their bytes (no kernel can beat that).")
        out.append(_busiest_cu(ok))
        worst = sorted(ok, key=lambda r: -r["traffic_ratio"])[:5]
        out.append("- Highest traffic ratios: " + "; ".join(
            f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} {r['traffic_ratio']:.3f}" for r in worst)
            + ".")
        worst = sorted(ok, key=lambda r: -r["dram_ratio"])[:5]
        out.append("- Highest DRAM ratios: " + "; ".join(
            f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} {r['dram_ratio']:.3f}" for r in worst)
            + ".")
        out.append(_above_dram(ok))
        big = [r for r in ok if r["m"] * r["k"] >= 1 << 24]
        if big:
            best = min(r["floor_ratio"] for r in big)
            out.append(f"- On the large layers (M·K >= 16M weights) predicted time is {best:.2f}–"
                       f"{max(r['floor_ratio'] for r in big):.2f}x the bandwidth floor.")
    return out + [""] + _against_baselines(rep)


def _busiest_cu(ok: list[dict[str, Any]]) -> str:
    """The rows whose plan leaves some CU with more than its share of the work, and those bound by it."""
    known = [r for r in ok if r.get("busiest_cu_share") is not None]
    uneven = [r for r in known if r["busiest_cu_share"] > 1.05]
    bound = [r for r in uneven if r["bound"] in ("valu", "lds", "matrix")]
    worst = sorted(bound, key=lambda r: -r["busiest_cu_share"])[:6]
    return (f"- Work over CUs (`busiest_cu_share`: the plan's units or tiles dealt round robin, the busiest CU's "
            f"over the average; benchmarks/model.py): {len(uneven)} of {len(known)} rows leave the busiest CU more "
            f"than 1.05x the average, {len(bound)} of them bound by a VALU, LDS or matrix roof charged there"
            + (": largest shares " + "; ".join(
                f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} share {r['busiest_cu_share']:.2f} "
                f"({r['bound']}, {r['roofline_ratio']:.2f}x)" for r in worst) if worst else "") + ".")


def _above_dram(ok: list[dict[str, Any]]) -> str:
    """The rows whose DRAM bytes exceed the minimum by more than 5%, by cause."""
    above = [r for r in ok if r["dram_ratio"] > 1.05]
    causes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in above:
        if r["op"].endswith(":dequantize"):
            causes["the dequantize route (a 16-bit copy of the weights written, then read by the GEMM: by "
                   "design)"].append(r)
        elif "splitk" in r.get("kernel", "") and r["plan"].get("shards", 1) > 1:
            causes["split-K's fp32 partial tiles (shards x M x 16 x token tiles x 4 bytes written and read "
                   "back; at N <= 16 the planner keeps them within _splitk.PARTIAL_SHARE of the call's "
                   "unavoidable bytes, the rest is x re-read and the counters; above, the shard count keeps "
                   "enough weight loads in flight to cover DRAM latency and, where the kernel's compute "
                   "rivals its bytes, enough units to spread that compute over the CUs "
                   "(`_splitk.splitk_split`), at the cost of this traffic)"].append(r)
        elif "splitk" in r.get("kernel", ""):
            causes["x re-read by every 128-row block once the weight stream has evicted it (one shard, "
                   "N >= 16, the RDNA parts' smaller L2 and MALL)"].append(r)
        else:
            causes["other"].append(r)
    parts = [f"{len(rs)} from {cause}" + (": " + "; ".join(
        f"{r['op']} {r['arch']} {r['model']} {r['layer']} N={r['n']} {r['dram_ratio']:.2f}" for r in rs[:8])
        + (" ..." if len(rs) > 8 else "") if cause == "other" else "") for cause, rs in causes.items()]
    return f"- {len(above)} of {len(ok)} rows have a DRAM ratio above 1.05: " + "; ".join(parts) + "."


def _against_baselines(rep: dict[str, Any]) -> list[str]:
    """Predicted time of ops (and variants) whose family names a baseline op, over the baseline's at
    the same arch, shape and N, on the large layers (M·K >= 16M weights)."""
    ok = [r for r in rep["rows"] if r["status"] == "ok"]
    by_key = {(r["op"], r["arch"], r["model"], r["layer"], r["n"]): r for r in ok}
    groups: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for r in ok:
        base = families.family(r["op"]).baseline
        b = by_key.get((base, r["arch"], r["model"], r["layer"], r["n"])) if base else None
        if b is not None and r["m"] * r["k"] >= 1 << 24:
            groups[r["op"], base, r["arch"], r["n"]].append(r["predicted_us"] / b["predicted_us"])
    if not groups:
        return []
    out = ["## Against the baseline op (large layers, M·K >= 16M weights)", "",
           "Predicted time over the baseline op's predicted time at the same arch, shape and N "
           "(**both predicted, not measured**).", "",
           "| op | baseline | arch | N | median | min–max | layers |", "|---|---|---|---|---|---|---|"]
    archs = list(rep["archs"])
    for (op, base, arch, n), v in sorted(groups.items(), key=lambda kv: (kv[0][0], archs.index(kv[0][2]), kv[0][3])):
        out.append(f"| {op} | {base} | {arch} | {n} | {float(np.median(v)):.2f} | {min(v):.2f}–{max(v):.2f} | "
                   f"{len(v)} |")
    return out + [""]


def _op_tables(rep: dict[str, Any], op: str) -> list[str]:
    rows = [r for r in rep["rows"] if r["op"] == op]
    notes = families.family(op).notes if dynamic.split_op(op)[1] is None else ""
    # The notes were written against runs before the DRAM model (their predictions and "/floor"
    # figures charged every requested byte at DRAM price); the tables below are this run's.
    dated = "*(Notes from runs before the cache model: their predicted-time figures charged every requested " \
            "byte; the table below is this run's.)*"
    out = [f"## hipskinny.{op}", "", *([notes.strip(), "", dated, ""] if notes else []),
           "traffic = bytes requested / minimum; DRAM = bytes from and to DRAM through the cache model / "
           "minimum; VALU/B = VALU wave-instructions per weight byte (balance in the "
           "hardware table); LDS/W = LDS bytes per weight byte; occ = waves per SIMD with the launch's LDS; "
           "trips = the longest chain of dependent memory round trips of a wave (per launch, summed over a "
           "call's launches); floor = minimum bytes / bandwidth; latency = launch overhead + round trips x memory "
           "latency not hidden by other waves; pred = the largest roof or the latency floor (µs, **predicted, "
           "not measured**).", "",
           "| arch | shape (M×K) | N | kernel | config | CUs/rows | occ | traffic | DRAM | VALU/B | LDS/W | matrix | "
           "trips | floor µs | latency µs | pred µs | bound | /floor |", "|" + "---|" * 18]
    unsupported: dict[tuple[int, str], list[str]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            unsupported[r["n"], f"{r['status']}: {r['message']}"].append(f"{r['arch']} {r['model']} {r['layer']}")
            continue
        wb = 2 * r["m"] * r["k"]
        out.append(f"| {r['arch']} | {r['model']} {r['layer']} {r['m']}×{r['k']} | {r['n']} | {r['kernel']} | "
                   f"{_config(r['plan'])} | {_sample(r['sample'])} | {r['occupancy']} | "
                   f"{r['traffic_ratio']:.3f} | {r['dram_ratio']:.3f} | "
                   f"{r['valu_per_weight_byte']:.4f} | {r['lds_bytes'] / wb:.2f} | {r['matrix']:,.0f} | "
                   f"{_trips(r)} | {_us(r['floor_us'])} | {_latency(r)} | {_us(r['predicted_us'])} | {r['bound']} | "
                   f"{r['floor_ratio']:.2f} |")
    for (n, msg), where in sorted(unsupported.items()):
        archs = sorted({w.split()[0] for w in where})
        out.append(f"\nN={n}: {len(where)} shape×arch rows ({', '.join(archs)}) — {msg}")
    return out + [""]


def _trips(r: dict[str, Any]) -> str:
    trips = r.get("round_trips")
    return "—" if trips is None else f"{sum(t['longest'] for t in trips.values()):.0f}"


def _latency(r: dict[str, Any]) -> str:
    return "—" if r.get("latency_us") is None else _us(r["latency_us"])


def _static_tables(rep: dict[str, Any]) -> list[str]:
    used = {(r["arch"], r["kernel"]) for r in rep["rows"] if r["status"] == "ok"}
    head = ["| arch | kernel | VGPR | AGPR | SGPR | LDS static | spills v/s | private | occupancy (limit) | "
            "main loop: wave-instructions by class | loop bytes/lane | loop VALU/B |", "|" + "---|" * 12]

    def line(k: dict[str, Any]) -> str:
        terms = k["occupancy_terms"]
        limit = ", ".join(t for t, v in terms.items() if v == k["occupancy"])
        loop = ", ".join(f"{c} {v}" for c, v in sorted(k["main_loop"].items(), key=lambda kv: -kv[1]))
        return (f"| {k['arch']} | {k['kernel']} | {k['vgpr']} | {k['agpr']} | {k['sgpr']} | {k['lds_static']} | "
                f"{k['vgpr_spills']}/{k['sgpr_spills']} | {k['private_segment']} | {k['occupancy']} ({limit}) | "
                f"{loop} | {k['main_loop_load_bytes_per_lane']} | {k['main_loop_valu_per_byte']:.4f} |")

    out = ["## Static view of the code objects", "",
           "From the ELF metadata and the disassembly listings. Occupancy: waves per SIMD by the rules of "
           "`reference/code_objects.md` §5 on the static LDS (the launch's dynamic LDS is in the family tables). "
           "Main loop: the innermost loop (backward branch) that loads the most global bytes per iteration; "
           "loop VALU/B is its VALU wave-instructions per global byte the wave loads in one iteration.", "",
           "### Kernels the plans above use", "", *head]
    out += [line(k) for k in rep["static"] if (k["arch"], k["kernel"]) in used]
    out += ["", "<details><summary>Every shipped kernel</summary>", "", *head]
    out += [line(k) for k in rep["static"]]
    return out + ["", "</details>", ""]


def _checks(rep: dict[str, Any]) -> list[str]:
    lin = [r for r in rep["rows"] if r["status"] == "ok" and r["linearity"] is not None]
    out = ["## Checks", "",
           "Invariants (also asserted by `--check`): traffic ratio >= 0.999; DRAM ratio >= 0.999; per-row counts "
           "linear between c and 2c CUs; every executed instruction is in the kernel's listing and the static "
           "classification of the executed mnemonics reproduces the emulator's per-class counts; the plan's "
           "kernel is shipped; no spills or scratch; manifest occupancy agrees with the registers; every "
           "shipped (family, arch) has measured shapes.", "",
           "| code-object family | arch | linearity sample | CUs c / 2c | max per-row deviation |",
           "|---|---|---|---|---|"]
    for r in lin:
        out.append(f"| {r['family']} | {r['arch']} | {r['model']} {r['layer']} N={r['n']} | {r['sample']['cus']} / "
                   f"{2 * r['sample']['cus']} | {r['linearity']:.2%} |")
    out += ["", f"Failures: {len(rep['failures'])}", ""]
    out += [f"- {f}" for f in rep["failures"]]
    return out + [""]


_PER_CALL_ROWS = (
    ("skinny_gemm_torch_out", "hipskinny.skinny_gemm(x, w, out=o), torch GPU tensors, N=1", "torch", 5.0),
    ("skinny_gemm_torch", "hipskinny.skinny_gemm(x, w), torch GPU tensors (output allocated), N=1", "torch", 5.0),
    ("skinny_gemm_splitk_torch_out", "hipskinny.skinny_gemm(x, w, out=o), torch GPU tensors, N=16 (split-K, "
     "scratch)", "torch", 5.0),
    ("gemv_torch_out", "hipskinny.gemv(x, w, out=o), torch GPU tensors", "torch", 5.0),
    ("gemv_torch", "hipskinny.gemv(x, w), torch GPU tensors (output allocated)", "torch", 5.0),
    ("torch_ops_skinny_gemm", "torch.ops.hipskinny.skinny_gemm(x, w), torch GPU tensors, N=1", "torch.ops", None),
    ("skinny_gemm_dlpack_out", "hipskinny.skinny_gemm(x, w, out=o), other DLPack GPU objects, N=1 (DLPack 1.x: "
     "'dltensor_versioned' capsules)", "dlpack", 10.0),
    ("skinny_gemm_dlpack_legacy_out", "the same, legacy 'dltensor' capsules (the producer takes max_version)", "dlpack",
     (1.2, "skinny_gemm_dlpack_out", "versioned")),
    ("skinny_gemm_dlpack_pre10_out", "the same, producers from before DLPack 1.0 (no max_version keyword, legacy "
     "capsules)", "dlpack", (1.2, "skinny_gemm_dlpack_out", "versioned")),
    ("matmul_4bit_torch", "hipskinny.matmul_4bit(x, packed, state), torch GPU tensors (output allocated), N=1, NF4 "
     "nested", "torch", None),
    ("linear4bit_bitsandbytes", "bitsandbytes Linear4bit(x) with `integrations.bitsandbytes.enable()` (its "
     "forward serves the decode case: straight to the row above on the module's own tensors), N=1", "torch",
     (2.0, "matmul_4bit_torch", "direct call")),
    ("linear4bit_bitsandbytes_ops", "the same call through bitsandbytes' own forward (its Python, torch's "
     "dispatcher, then hipskinny's kernel registered for its op `gemm_4bit`), N=1", "torch", None),
    ("linear4bit_accelerated", "the same Linear4bit after `integrations.transformers.accelerate` (its forward "
     "calls hipskinny.matmul_4bit on its own tensors), N=1", "torch", (2.0, "matmul_4bit_torch", "direct call")),
    ("linear_accelerated", "torch.nn.Linear(x) after `integrations.transformers.accelerate` (module call, its "
     "checks, then hipskinny.skinny_gemm), N=1", "torch", (2.0, "skinny_gemm_torch", "direct call")),
    ("skinny_gemm_numpy", "hipskinny.skinny_gemm(x, w), numpy host inputs, N=1, with its copies", "numpy", None),
    ("skinny_gemm_numpy_no_copies", "the same, hipMemcpyAsync calls made no-ops (copies excluded)", "numpy", 25.0),
    ("gemv_numpy", "hipskinny.gemv(x, w), numpy host inputs, with its copies", "numpy", None),
    ("gemv_numpy_no_copies", "the same, copies excluded", "numpy", 25.0),
)


# The vLLM plugin's rows: measured in a run of their own (`--per-call-vllm`), next to that run's direct
# call and bare torch op, so their ratio never mixes two runs (the host's speed varies between sessions).
_VLLM_ROWS = (
    ("skinny_gemm_torch", "hipskinny.skinny_gemm(x, w), torch GPU tensors (output allocated), N=1: the direct call",
     None),
    ("vllm_linear_eager", "a vLLM linear layer's GEMM with the vLLM plugin, eager (`integrations.vllm`: the "
     "layer's adopted weight, the decode test, then hipskinny.skinny_gemm), N=1", (1.3, "skinny_gemm_torch")),
    ("vllm_linear_op", "the plugin's op `torch.ops.hipskinny_vllm.linear` as a compiled graph calls it (torch's "
     "dispatcher, then the row above's function; under HIP graphs paid once, at capture), N=1", None),
)


def _vllm_overhead(o: dict[str, Any]) -> list[str]:
    when = o["measured"]
    out = ["### The vLLM plugin", "",
           f"Measured {when['date']} at {when['commit']} by `{when['command']}`, in one run of the same scenario "
           f"(its own direct call and bare torch op, {o['torch_add_us']:.1f} µs here, give the scale: this "
           "host's speed differs between sessions).", "", "| call | µs | target |", "|---|---|---|"]
    for key, label, target in _VLLM_ROWS:
        us = o["cases"][key]
        if target:
            ratio = us / o["cases"][target[1]]
            out.append(f"| {label} | {us:.1f} ({ratio:.2f}×) | ≤ {target[0]:g}× direct call |")
        else:
            out.append(f"| {label} | {us:.1f} | |")
    return out + [""]


def _overhead(rep: dict[str, Any]) -> list[str]:
    o = rep["python_overhead"]
    sh = o["shape"]
    when = o.get("measured")
    out = ["## Per-call cost", "",
           *([f"Measured {when['date']} at {when['commit']} by `{when['command']}` (the rest of this report: "
              "the full run above).", ""] if when else []),
           f"CPU µs per call with a seen signature (bound call cached), M={sh['m']}, K={sh['k']}, fp16, measured "
           "through `HipDevice` on the fake HIP runtime (tests/fakehip: real hip-python, a runtime whose launch "
           "and copies do no GPU work, call log off), median of 9 rounds, in one run with a bare torch op. "
           "What is timed is everything a real call does on the host: signature, pointers, stream, output, "
           "argument packing, and the hip-python launch call itself.", "",
           "| call | µs | target |", "|---|---|---|"]
    for key, label, _, target in _PER_CALL_ROWS:
        if key in o["cases"]:
            us = o["cases"][key]
            if isinstance(target, tuple):     # at most target[0] times the row target[1] (named target[2])
                cell, limit = f"{us:.1f} ({us / o['cases'][target[1]]:.2f}×)", f"≤ {target[0]:g}× {target[2]}"
            else:
                cell, limit = f"{us:.1f}", f"≤ {target:g}" if target else ""
            out.append(f"| {label} | {cell} | {limit} |")
    out += [f"| one prepared hip-python launch of the same kernel (the floor inside every row above) | "
            f"{o['bare_launch_us']:.1f} | |",
            f"| bare torch op: torch.add on 1-element CPU tensors (torch {o['torch_version']}) | "
            f"{o['torch_add_us']:.1f} | |",
            f"| torch.nn.functional.linear 1×8 @ 8×8 fp32 (CPU) | {o['torch_linear_us']:.1f} | |",
            f"| torch.empty_strided of a 1×256 fp16 output (CPU): inside the two \"output allocated\" rows | "
            f"{o.get('torch_empty_us', float('nan')):.1f} | |", "",
            "How faithful: torch GPU tensors cannot exist without a GPU, so those rows use torch CPU tensors over "
            "the fake runtime's device memory, presented as GPU tensors by the test seam "
            "`operands.present_cpu_torch_as_gpu`: the same code path a ROCm tensor takes, except that the stream "
            "comes from a Python lambda (on ROCm torch: `torch._C._cuda_getCurrentRawStream`, a C call) and "
            "allocated outputs from torch's CPU allocator (on ROCm: its caching GPU allocator, of similar cost). "
            "The fake runtime's launch records nothing with its log off, so the launch row is hip-python's own "
            "cost; a real HIP runtime adds its launch latency (a few µs, GPU-side) to every row alike.", "",
            f"Where the µs of `skinny_gemm(x, w, out=o)` on torch tensors go (cProfile over 20,000 calls, self "
            f"time per call; the profiler inflates the total to {o['profile_total_us']:.1f} µs):", "",
            "| function | calls per call | µs per call |", "|---|---|---|"]
    for row in o["profile"]:
        out.append(f"| `{row['function']}` | {row['calls_per_call']:.0f} | {row['us_per_call']:.2f} |")
    out.append("")
    if rep.get("per_call_vllm"):
        out += _vllm_overhead(rep["per_call_vllm"])
    return out


def _source(rep: dict[str, Any], ops: list[str]) -> dict[str, Any]:
    return {"ops": ops, "command": rep["command"], "date": rep["date"], "commit": rep["commit"],
            "commit_at_start": rep.get("commit_at_start", rep["commit"]), "seconds": rep["seconds"]}


def _merge(new: dict[str, Any], old: dict[str, Any], archs: list[str]) -> dict[str, Any]:
    """``new`` (a run of some ops) with the other ops' rows, per-call section and emulator rate of
    ``old``; the invariants re-checked over all rows; which run produced which rows in ``sources``."""
    ops = sorted({r["op"] for r in new["rows"]})
    rows = [r for r in old["rows"] if r["op"] not in ops] + new["rows"]
    statics = {(f, a): {k.name: k for k in family_static(a, f)} for (f, a) in families_by_arch()
               if a in archs and f not in OUTSIDE_MODEL}
    out = dict(new, rows=rows, python_overhead=old["python_overhead"])
    out["failures"] = invariants(rows, statics, archs)
    kept = []
    for src in old.get("sources") or [_source(old, sorted({r["op"] for r in old["rows"]}))]:
        left = [o for o in src["ops"] if o not in ops]
        if left:
            kept.append(dict(src, ops=left))
    out["sources"] = kept + [_source(dict(new, command=new["command"] + " --merge --op " + " ".join(ops)), ops)]
    return out


def _produced_by(rep: dict[str, Any]) -> list[str]:
    if not rep.get("sources"):
        return [f"Produced by `{rep['command']}` on {rep['date']} at commit `{rep['commit']}` "
                f"({rep['seconds'] / 60:.1f} min on a 2-core CPU)"
                + (f"; HEAD moved from `{rep['commit_at_start']}` during the run"
                   if rep.get("commit_at_start", rep["commit"]) != rep["commit"] else "")
                + (f"; uncommitted changes then in: {', '.join(rep['uncommitted'])}" if rep["uncommitted"] else "")
                + ".", ""]
    out = ["Produced by several runs (rows of the other ops kept by `--merge`):", ""]
    for src in rep["sources"]:
        moved = f", started at `{src['commit_at_start']}`" if src["commit_at_start"] != src["commit"] else ""
        out.append(f"- {', '.join(src['ops'])}: `{src['command']}` on {src['date']} at commit `{src['commit']}`"
                   f"{moved} ({src['seconds'] / 60:.1f} min on a 2-core CPU)")
    return out + [""]


def store_emulator_speed(speed: dict[str, Any]) -> None:
    """Keep `benchmarks.emulator_rate`'s result in RESULTS.json and re-render RESULTS.md."""
    json_path = HERE / "RESULTS.json"
    rep = json.loads(json_path.read_text())
    rep["emulator_speed"] = speed
    json_path.write_text(json.dumps(rep, indent=1, default=float) + "\n")
    (HERE / "RESULTS.md").write_text(markdown(rep))


def _refresh_per_call(args: argparse.Namespace) -> int:
    """Re-measure the per-call cost alone; the rest of RESULTS.json/md stays as the last full run made it
    (the section says when it was measured)."""
    json_path = Path(args.json or HERE / "RESULTS.json")
    rep = json.loads(json_path.read_text())
    rep["python_overhead"] = overhead.measure(sorted(rep["python_overhead"].get("families", [])) or dynamic.ops())
    rep["python_overhead"]["measured"] = {"date": datetime.date.today().isoformat(),
                                          "commit": _git("rev-parse", "--short", "HEAD"),
                                          "command": "python -m benchmarks.report --per-call"}
    json_path.write_text(json.dumps(rep, indent=1, default=float) + "\n")
    Path(args.md or HERE / "RESULTS.md").write_text(markdown(rep))
    return 0


def _refresh_per_call_vllm(args: argparse.Namespace) -> int:
    """Measure the per-call scenario and keep the vLLM plugin's rows with that run's direct call and
    bare torch op (section "The vLLM plugin"); the rest of the report stays as it is."""
    json_path = Path(args.json or HERE / "RESULTS.json")
    rep = json.loads(json_path.read_text())
    o = overhead.measure(dynamic.ops())
    rep["per_call_vllm"] = {"cases": {key: o["cases"][key] for key, _, _ in _VLLM_ROWS},
                            "torch_add_us": o["torch_add_us"], "torch_version": o["torch_version"],
                            "measured": {"date": datetime.date.today().isoformat(),
                                         "commit": _git("rev-parse", "--short", "HEAD"),
                                         "command": "python -m benchmarks.report --per-call-vllm"}}
    json_path.write_text(json.dumps(rep, indent=1, default=float) + "\n")
    Path(args.md or HERE / "RESULTS.md").write_text(markdown(rep))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="small shapes; exit 1 if an invariant fails")
    p.add_argument("--arch", nargs="+", default=None)
    p.add_argument("--op", nargs="+", default=None, help="public ops to run (default: all in hipskinny.ops)")
    p.add_argument("--dtype", choices=list(DTYPES), default="f16")
    p.add_argument("--min-rows", type=int, default=dynamic.MIN_ROWS)
    p.add_argument("--md", help="Markdown output (default benchmarks/RESULTS.md; none with --check)")
    p.add_argument("--json", help="JSON output (default benchmarks/RESULTS.json; none with --check)")
    p.add_argument("--merge", action="store_true",
                   help="with --op: keep the other ops' rows of the existing JSON report and rewrite both files")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="(op, arch) units measured in parallel worker processes (default: the usable cores; "
                        "1 with --check, whose units are too small to pay for a worker's start)")
    p.add_argument("--per-call", action="store_true",
                   help="measure only the per-call cost and rewrite that section of the existing report")
    p.add_argument("--per-call-vllm", action="store_true",
                   help="measure the per-call scenario and rewrite only the vLLM plugin's rows (with that run's "
                        "direct call)")
    args = p.parse_args(argv)
    if args.per_call:
        return _refresh_per_call(args)
    if args.per_call_vllm:
        return _refresh_per_call_vllm(args)
    archs = args.arch or list(registry.manifest()["archs"])
    shapes = CHECK_SHAPES if args.check else SHAPES
    rep = run(archs, args.op, shapes, args.dtype, args.check, args.min_rows,
              overhead_seconds=0.05 if args.check else 1.0,
              jobs=max(1, args.jobs or (1 if args.check else len(os.sched_getaffinity(0)))))
    if args.merge:
        rep = _merge(rep, json.loads(Path(args.json or HERE / "RESULTS.json").read_text()), archs)
    stored = Path(args.json or HERE / "RESULTS.json")
    if not args.check and stored.is_file():
        # sections other commands measure (benchmarks.emulator_rate, SECTIONS' modules, .published): kept as they are
        old = json.loads(stored.read_text())
        for section in ("emulator_speed", *SECTIONS, "published", "per_call_vllm"):
            if old.get(section) is not None:
                rep.setdefault(section, old[section])
    md_path = args.md or (None if args.check else str(HERE / "RESULTS.md"))
    json_path = args.json or (None if args.check else str(HERE / "RESULTS.json"))
    if md_path:
        Path(md_path).write_text(markdown(rep))
    if json_path:
        Path(json_path).write_text(json.dumps(rep, indent=1, default=float) + "\n")
    for f in rep["failures"]:
        print(f"FAIL: {f}", file=sys.stderr)
    print(f"{len(rep['rows'])} rows, {len(rep['failures'])} failures, {rep['seconds']:.0f} s", file=sys.stderr)
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
