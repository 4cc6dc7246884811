"""The sparse MLA rows of the performance report: `hipskinny.sparse_mla` at DeepSeek shapes.

    python -m benchmarks.sparse_mla               # all archs; adds the "sparse_mla" section to RESULTS.json/md

A call's work is the rows its index lists gather, so each row here emulates the whole call on the
flagship's CU count (no scaled-down GPU) at the shapes of sparse_mla_spec.md section 11: DeepSeek
V4 at TP8 (B = 4 decode tokens, 16 real heads, a 128-row sliding window plus 512 CSA rows or 8 HCA
rows per token, the model's sink and scale) and V3.2 (B = 4, 128 heads, top-2048, one list),
OCP FP8, every token's slots its own, scattered at random (fixed seed). Minimum bytes: each distinct gathered row
once (its data and scale bytes), q, out and the index lists. Times come from benchmarks/model.py's
roofline over the counts (a model; nothing is timed on a GPU); its memory roof is the DRAM bytes of
the requests through the arch's caches (benchmarks/cache.py, two workgroups per CU resident; rows
measured before that model show no DRAM ratio and charged every requested byte), under a latency
floor (benchmarks/latency.py: launch overhead plus each wave's dependent round trips; — in rows
measured before it). Requested bytes above the minimum
are split by buffer (benchmarks/traffic.py): cache rows re-read by other head groups or
workgroups, and the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import hipskinny
from hipskinny import mla, registry, scratch
from hipskinny.arch import ARCHS
from hipskinny.ops import sparse_mla as op

from . import dynamic, latency, traffic
from .model import predict

HERE = Path(__file__).resolve().parent
BF16 = np.dtype(ml_dtypes.bfloat16)
# (name, layout, T, H, SWA rows, extra rows per token, sink)
SHAPES = (("DSv4 CSA-2048", "v4", 4, 16, 128, 512, True),
          ("DSv4 HCA-32", "v4", 4, 16, 128, 8, True),
          ("V3.2 top-2048", "v32", 4, 128, 2048, 0, False))
# gfx950 measured by the PR (sparse_mla_spec.md section 11), B = 4, 64 padded heads: GPU time per call
PR_GFX950_US = {"DSv4 CSA-2048": 35.8, "DSv4 HCA-32": 21.4}
BLOCK = 64


def _call(name: str, layout: str, t: int, h: int, n0: int, n1: int, sink: bool, seed: int = 0
          ) -> tuple[tuple, dict[str, Any], int]:
    """The call's operands (q, cache, indices, indptr), its keywords and the distinct rows it gathers."""
    rng = np.random.default_rng(seed)
    lay = mla.LAYOUTS[layout]
    # every token its own rows (requests do not share cache blocks), scattered over a pool twice as large
    pool0 = 2 * t * n0
    c0 = mla.pack_cache(rng.standard_normal((pool0, lay.d_qk)), layout=layout, block_size=BLOCK)
    i0 = rng.permutation(pool0)[:t * n0].astype(np.int32)
    kw: dict[str, Any] = {"scale": lay.d_qk ** -0.5, "layout": layout}
    distinct = len(set(i0.tolist()))
    if n1:
        pool1 = 2 * t * n1
        c1 = mla.pack_cache(rng.standard_normal((pool1, lay.d_qk)), layout=layout, block_size=BLOCK)
        i1 = rng.permutation(pool1)[:t * n1].astype(np.int32)
        kw.update(extra_cache=c1, extra_indices=i1, extra_indptr=np.arange(0, t * n1 + 1, n1, dtype=np.int32))
        distinct += len(set(i1.tolist()))
    if sink:
        kw["sink"] = rng.uniform(-1, 1, h).astype(np.float32)
    q = rng.standard_normal((t, h, lay.d_qk)).astype(BF16)
    return (q, c0, i0, np.arange(0, t * n0 + 1, n0, dtype=np.int32)), kw, distinct


def min_bytes(layout: str, t: int, h: int, distinct: int, n0: int, n1: int) -> float:
    """Each distinct gathered row's bytes once (data + scales), q, out (bf16) and the index lists."""
    lay = mla.LAYOUTS[layout]
    return distinct * lay.token_bytes + t * h * (lay.d_qk + 512) * 2 + t * (n0 + n1) * 4 + 2 * (t + 1) * 4


def measure(arch: str, name: str, layout: str, t: int, h: int, n0: int, n1: int, sink: bool,
            splits: int | None = None) -> dict[str, Any]:
    """One row; ``splits`` overrides the op's split count (the sweep behind its choice)."""
    args, kw, distinct = _call(name, layout, t, h, n0, n1, sink)
    if splits is not None:
        kw["splits"] = splits
    info = ARCHS[arch]
    dev = dynamic.device(arch, info.default_cu_count)
    dev.launches.clear()
    t0 = time.perf_counter()
    with hipskinny.on_device(dev), traffic.Recorder(dev) as rec:
        op.sparse_mla(*args, **kw)
    seconds = time.perf_counter() - t0
    (stats,) = list(dev.launches)
    least = min_bytes(layout, t, h, distinct, n0, n1)
    moved = stats.bytes_loaded["global"] + stats.bytes_stored["global"]
    # DRAM bytes through the arch's caches (benchmarks/cache.py), cache.PER_CU workgroups per CU resident,
    # and the latency floor
    caches, waits = rec.costs(0, stats, arch, info.default_cu_count)
    dram = caches.dram_bytes
    lat = latency.call_floor(arch, [waits])
    valu = stats.instructions["valu"] + stats.instructions["trans"]
    pred = predict(info, info.default_cu_count, bytes_moved=dram, bytes_min=least, valu=valu,
                   mnemonics=stats.mnemonics, lds_bytes=stats.bytes_loaded["lds"] + stats.bytes_stored["lds"],
                   latency_seconds=lat)
    # the caches' traffic, by the pool slots their host bytes were staged into
    slots = {ptr: name for name, ptr in scratch.pool(dev, 0).addresses().items()}
    cache_bytes = [0, 0]    # requested, distinct
    buffers: dict[str, list[int]] = {}
    for base, tr in rec.table().get(0, {}).items():
        buf = slots.get(base, "other").removeprefix("mla.")
        req, dist = tr.region(0, tr.size)
        got = buffers.setdefault(buf, [0, 0])
        got[0] += req
        got[1] += dist
        if buf in ("swa_cache", "extra_cache"):
            cache_bytes[0] += req
            cache_bytes[1] += dist
    plan = op.plan_info(dev, t, h, sum(len(a) for a in (args[2], kw.get("extra_indices", ()))), layout)
    return {"arch": arch, "shape": name, "layout": layout, "T": t, "H": h, "swa": n0, "extra": n1,
            "distinct_rows": distinct, "min_bytes": least, "bytes": moved, "ratio": moved / least,
            "dram_bytes": dram, "dram_ratio": dram / least, "latency_s": lat,
            "round_trips": {"longest": waits.trips.longest, "per_wave": waits.trips.total / max(1.0, waits.trips.waves),
                            "round_trip_ns": waits.round_trip_ns},
            "cache_requested": cache_bytes[0], "cache_distinct": cache_bytes[1], "buffers": buffers,
            "gather_ratio": cache_bytes[0] / (distinct * mla.LAYOUTS[layout].token_bytes),
            "valu": valu, "seconds": pred.seconds, "bound": pred.bound, "roofs": pred.roofs,
            "floor_s": least / (info.peak_bandwidth_gbs * 1e9), "plan": plan, "emulated_s": seconds}


def markdown(section: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md (called by benchmarks.report.markdown when the JSON has one)."""
    commands = sorted({r.get("command", section["command"]) for r in section["rows"]})
    out = ["## sparse_mla (`hipskinny.sparse_mla`)", "",
           f"Produced by {', '.join(f'`{c}`' for c in commands)} (last run on {section['date']} at commit "
           f"`{section['commit']}`, {section['seconds'] / 60:.1f} min on a 2-core CPU in all). "
           + __doc__.split("\n\n", 2)[2].replace("\n", " ").strip(), "",
           "| shape | arch | T x H | rows / token | splits x head groups | traffic ratio | DRAM ratio | cache bytes "
           "requested / distinct rows | above min: partials / q / lists (% of min) | trips | latency µs | "
           "predicted µs | floor µs | bound | PR (gfx950, measured) |", "|" + "---|" * 15]
    for r in section["rows"]:
        pr = PR_GFX950_US.get(r["shape"]) if r["arch"] == "gfx950" else None
        dram = f"{r['dram_ratio']:.3f}" if "dram_ratio" in r else "—"     # rows from before the cache model
        out.append(f"| {r['shape']} | {r['arch']} | {r['T']} x {r['H']} | {r['swa']} + {r['extra']} | "
                   f"{r['plan']['splits']} x {r['plan']['head_groups']} | {r['ratio']:.3f} | "
                   f"{dram} | {r['gather_ratio']:.3f} | "
                   f"{_above(r)} | {_trips(r)} | {_latency(r)} | {r['seconds'] * 1e6:.1f} | "
                   f"{r['floor_s'] * 1e6:.2f} | {r['bound']} | "
                   f"{f'{pr} µs' if pr else ''} |")
    return out + ["", section.get("notes", "").strip(), ""]


def _trips(r: dict[str, Any]) -> str:
    """The longest chain of dependent round trips of a wave (— for rows from before the latency floor)."""
    return f"{r['round_trips']['longest']:.0f}" if "round_trips" in r else "—"


def _latency(r: dict[str, Any]) -> str:
    return f"{r['latency_s'] * 1e6:.1f}" if "latency_s" in r else "—"


def _above(r: dict[str, Any]) -> str:
    """The partials round trip, q's re-reads and the list words' re-reads, in % of the minimum."""
    b = r["buffers"]
    part = sum(b.get(k, [0, 0])[0] for k in ("partials", "counters"))
    q = b.get("q", [0, 0])
    lists = [b.get(k, [0, 0]) for k in ("swa_indices", "swa_indptr", "extra_indices", "extra_indptr")]
    again = sum(x[0] - x[1] for x in lists)
    return " / ".join(f"{100 * v / r['min_bytes']:.0f}" for v in (part, q[0] - q[1], again))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sparse_mla", description=__doc__.split("\n")[0])
    p.add_argument("--arch", nargs="+", default=None)
    p.add_argument("--shape", nargs="+", default=None, help="shape names (default: all)")
    p.add_argument("--json", default=str(HERE / "RESULTS.json"))
    p.add_argument("--md", default=str(HERE / "RESULTS.md"))
    args = p.parse_args(argv)
    archs = args.arch or list(registry.manifest()["archs"])
    t0 = time.perf_counter()
    rows = []
    for name, layout, t, h, n0, n1, sink in SHAPES:
        if args.shape and name not in args.shape:
            continue
        for arch in archs:
            r = measure(arch, name, layout, t, h, n0, n1, sink)
            print(f"{name} {arch}: ratio {r['ratio']:.3f}, gather {r['gather_ratio']:.3f}, {r['seconds'] * 1e6:.1f} us "
                  f"({r['emulated_s']:.0f} s)", file=sys.stderr, flush=True)
            rows.append(r)
    from benchmarks.report import merge_section  # imported here: the report imports this module
    shapes = [s[0] for s in SHAPES]
    merge_section("sparse_mla", "benchmarks.sparse_mla", rows, key=lambda r: (r["shape"], r["arch"]),
                  order=lambda r: (shapes.index(r["shape"]), list(ARCHS).index(r["arch"])), argv=argv,
                  seconds=time.perf_counter() - t0, json_path=args.json, md_path=args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["SHAPES", "main", "markdown", "measure", "min_bytes"]
