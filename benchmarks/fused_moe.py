"""The fused MoE rows of the performance report: `hipskinny.moe.fused_moe` at real expert shapes.

    python -m benchmarks.fused_moe                # all archs; adds the "fused_moe" section to RESULTS.json/md

A MoE call's work is the routed experts' weights, which depend on the routing, not one [M, K]
matrix that benchmarks.report can scale down with the CU count; so each row here emulates the
whole call on the flagship's CU count (every launch of it: routing, GEMM1, GEMM2) with int4
GPTQ-style symmetric group-128 experts, fp16, and a fixed seeded uniform routing (each token
picks k different experts). Minimum bytes: each distinct routed expert's packed weights and
scales once, x, out, topk_weights and topk_ids. Times come from benchmarks/model.py's roofline
over the summed counts (a model; nothing is timed on a GPU), its memory roof on each launch's
DRAM bytes through the arch's caches (benchmarks/cache.py, cold per call, two workgroups per CU
resident), under the latency floor of the three launches (benchmarks/latency.py); rows shown
with — were measured before those models and charge every requested byte. DeepSeek-V3's stack (256 experts
of 7168 x 2048) is too large to hold on the emulator, so its rows use a stack of only the
routed experts (ids renumbered; at N = 1 the plan depends on E only through N * k, so it is
the real launch).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import hipskinny
from hipskinny import registry, scratch, w4a16
from hipskinny.arch import ARCHS
from hipskinny.ops import fused_moe as op

from . import dynamic, hardware, latency, traffic
from .model import predict

HERE = Path(__file__).resolve().parent
GROUP = 128
# (name, E, k, H, I, N values, compact): compact = hold only the routed experts (see above).
MODELS = (("Qwen3-30B-A3B", 128, 8, 2048, 768, (1, 4), False),
          ("DeepSeek-V3", 256, 8, 7168, 2048, (1,), True))


def _stack(rng: np.random.Generator, e: int, m: int, k: int) -> w4a16.Prepared:
    codes = rng.integers(0, 16, (e, m, k), dtype=np.int8)
    scales = rng.uniform(0.002, 0.02, (e, m, k // GROUP)).astype(np.float16)
    ckpt = w4a16.pack_checkpoint(codes, None, scales, fmt="gptq", group_size=GROUP)
    return w4a16.prepare(**ckpt, fmt="gptq", group_size=GROUP, dtype=np.float16)


def routing(n: int, k: int, e: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(e, k, replace=False) for _ in range(n)]).astype(np.int32)


def min_bytes(distinct: int, n: int, k: int, h: int, i: int) -> tuple[float, float]:
    """(least bytes a call moves, weight bytes): each routed expert's codes and fp16 scales once,
    x and out (fp16), topk_weights (fp32) and topk_ids (int32)."""
    weights = distinct * (2 * i * h + h * i) / 2
    scales = distinct * 2 * (2 * i * (h // GROUP) + h * (i // GROUP))
    return weights + scales + 2 * n * h * 2 + n * k * 8, weights


def measure(arch: str, name: str, e: int, k: int, h: int, i: int, n: int, compact: bool) -> dict[str, Any]:
    ids = routing(n, k, e)
    distinct = sorted(set(ids.ravel().tolist()))
    stack_e = len(distinct) if compact else e
    if compact:
        ids = np.searchsorted(np.array(distinct), ids).astype(np.int32)
    rng = np.random.default_rng(1)
    w13, w2 = _stack(rng, stack_e, 2 * i, h), _stack(rng, stack_e, h, i)
    x = rng.standard_normal((n, h)).astype(np.float16)
    tw = rng.uniform(0.05, 1, (n, k)).astype(np.float32)
    info = ARCHS[arch]
    dev = dynamic.device(arch, info.default_cu_count)
    dev.launches.clear()
    t0 = time.perf_counter()
    with hipskinny.on_device(dev), traffic.Recorder(dev) as rec:
        hipskinny.moe.fused_moe(x, w13, w2, tw, ids)
    seconds = time.perf_counter() - t0
    launches = list(dev.launches)
    assert [s.kernel.removeprefix("fused_moe_").split("_")[0] for s in launches] == ["route", "gemm1", "gemm2"], \
        [s.kernel for s in launches]
    least, wbytes = min_bytes(len(distinct), n, k, h, i)
    # each launch through the arch's caches (cold per call), cache.PER_CU workgroups per CU resident
    caches, waits = zip(*(rec.costs(j, st, arch, info.default_cu_count) for j, st in enumerate(launches)),
                        strict=True)
    parts = {}
    for label, j in (("gemm1", [1]), ("gemm2", [2]), ("call", [0, 1, 2])):
        stats = launches[j[0]] if len(j) == 1 else dynamic.combined(launches)
        moved = stats.bytes_loaded["global"] + stats.bytes_stored["global"]
        dram = sum(caches[x].dram_bytes for x in j)
        lat = latency.call_floor(arch, [waits[x] for x in j])
        valu = stats.instructions["valu"] + stats.instructions["trans"]
        pred = predict(info, info.default_cu_count, bytes_moved=dram, bytes_min=least, valu=valu,
                       mnemonics=stats.mnemonics, lds_bytes=stats.bytes_loaded["lds"] + stats.bytes_stored["lds"],
                       latency_seconds=lat)
        parts[label] = {"kernel": stats.kernel, "bytes": moved, "dram_bytes": dram, "latency_s": lat,
                        "round_trips": sum(waits[x].trips.longest for x in j), "valu": valu,
                        "seconds": pred.seconds, "bound": pred.bound, "roofs": pred.roofs}
        if label != "call":
            parts[label]["buffers"] = _by_buffer(rec.table().get(1 if label == "gemm1" else 2, {}), dev, n * k, h, i)
    call = parts["call"]
    return {"arch": arch, "model": name, "E": e, "k": k, "H": h, "I": i, "N": n, "distinct": len(distinct),
            "compact": compact, "min_bytes": least, "weight_bytes": wbytes, "ratio": call["bytes"] / least,
            "dram_ratio": call["dram_bytes"] / least,
            "valu_per_weight_byte": call["valu"] / wbytes, "balance": hardware.balance_point(info),
            "floor_s": least / (info.peak_bandwidth_gbs * 1e9), "parts": parts,
            "plan": op.plan_info(dev, np.float16, n, h, i, stack_e, k), "emulated_s": seconds}


def _by_buffer(launch: dict[int, traffic.Traffic], dev: Any, slots: int, h: int, i: int
               ) -> dict[str, list[int]]:
    """{buffer: [requested bytes, distinct bytes]} of one launch: requested = loads + stores as
    LaunchStats counts them, distinct = 4-byte words touched. Buffers are the op's pooled slots
    (host operands are staged into them), the scratch slot split into its regions by
    fused_moe.scratch_bytes' layout."""
    prefix = f"{op.FAMILY}."   # the op's slot names: fused_moe.<operand>
    names = {ptr: name.removeprefix(prefix) for name, ptr in scratch.pool(dev, 0).addresses().items()}
    route = 4 * (op.COUNTERS + -(-(op.META_WORDS + 4 * slots) // 4) * 4)
    act = 2 * -(-(slots * i) // 8) * 8
    regions = ((0, route, "route"), (route, route + act, "act"), (route + act, route + act + 4 * slots * h, "partials"))
    out: dict[str, list[int]] = {}
    for base, t in launch.items():
        name = names.get(base, "other")
        parts = [(lo, hi, r) for lo, hi, r in regions] if name == op.META_SLOT.removeprefix(prefix) else \
            [(0, t.size, name)]
        for lo, hi, region in parts:
            req, dist = t.region(lo, hi)
            got = out.setdefault(region, [0, 0])
            got[0] += req
            got[1] += dist
    return out


def markdown(section: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md (called by benchmarks.report.markdown when the JSON has one)."""
    commands = sorted({r.get("command", section["command"]) for r in section["rows"]})
    out = ["## fused_moe (`hipskinny.moe.fused_moe`)", "",
           f"Produced by {', '.join(f'`{c}`' for c in commands)} (last run on {section['date']} at commit "
           f"`{section['commit']}`, {section['seconds'] / 60:.1f} min on a 2-core CPU in all). "
           + __doc__.split("\n\n", 2)[2].replace("\n", " ").strip(), "",
           "| model | arch | N | distinct experts | kernels (NP) | traffic ratio | DRAM ratio | "
           "VALU/weight B (balance) | trips | latency µs | GEMM1 µs | GEMM2 µs | call µs | floor µs | bound |",
           "|" + "---|" * 15]
    for r in section["rows"]:
        p = r["parts"]
        if "dram_ratio" in r:
            dram, trips, lat = f"{r['dram_ratio']:.3f}", f"{p['call']['round_trips']:.0f}", \
                f"{p['call']['latency_s'] * 1e6:.1f}"
        else:                   # rows from before the cache model and the latency floor
            dram = trips = lat = "—"
        out.append(f"| {r['model']} | {r['arch']} | {r['N']} | {r['distinct']} | "
                   f"{p['gemm1']['kernel'].split('_')[-1]} | {r['ratio']:.3f} | {dram} | "
                   f"{r['valu_per_weight_byte']:.3f} ({r['balance']:.3f}) | {trips} | {lat} | "
                   f"{p['gemm1']['seconds'] * 1e6:.1f} | {p['gemm2']['seconds'] * 1e6:.1f} | "
                   f"{p['call']['seconds'] * 1e6:.1f} | {r['floor_s'] * 1e6:.1f} | {p['call']['bound']} |")
    out += _excess_table(section["rows"])
    return out + ["", section.get("notes", "").strip(), ""]


# Where the bytes above the minimum go: (column, buffers, what is counted of them).
_EXCESS = (("scale re-reads", ("w13_scales", "w2_scales"), "again"),
           ("weight re-reads", ("w13", "w2"), "again"),
           ("x re-staged", ("x",), "again"),
           ("route words re-read", ("route",), "again"),
           ("act", ("act",), "all"),
           ("partials", ("partials",), "all"))


def excess(row: dict[str, Any]) -> dict[str, float]:
    """A row's bytes above the minimum by cause (from GEMM1's and GEMM2's per-buffer counts):
    re-reads (requested - distinct) of scales, weights, x and the route words; the act and
    partials round trips (not in the minimum at all); the routing launch; the rest."""
    got: dict[str, float] = {}
    for name, bufs, how in _EXCESS:
        got[name] = float(sum((b[0] - b[1]) if how == "again" else b[0]
                              for part in ("gemm1", "gemm2") for key, b in row["parts"][part]["buffers"].items()
                              if key in bufs))
    p = row["parts"]
    got["routing launch"] = float(p["call"]["bytes"] - p["gemm1"]["bytes"] - p["gemm2"]["bytes"])
    total = p["call"]["bytes"] - row["min_bytes"]
    got["rest"] = total - sum(got.values())
    got["total"] = total
    return got


def _excess_table(rows: list[dict[str, Any]]) -> list[str]:
    rows = [r for r in rows if "buffers" in r["parts"]["gemm1"]]
    if not rows:
        return []
    cols = [c[0] for c in _EXCESS] + ["routing launch", "rest"]
    out = ["", "Bytes above the minimum, by cause, in % of the minimum (requested bytes as the emulator counts "
           "them, every active lane's access; re-reads = requested - distinct bytes of the buffer in the launch):",
           "", "| model | arch | N | above min | " + " | ".join(cols) + " |", "|" + "---|" * (4 + len(cols))]
    for r in rows:
        e = excess(r)
        pct = {k: 100 * v / r["min_bytes"] for k, v in e.items()}
        out.append(f"| {r['model']} | {r['arch']} | {r['N']} | {pct['total']:.1f} | "
                   + " | ".join(f"{pct[c]:.1f}" for c in cols) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fused_moe", description=__doc__.split("\n")[0])
    p.add_argument("--arch", nargs="+", default=None)
    p.add_argument("--model", nargs="+", default=None, help="model names (default: all)")
    p.add_argument("--n", nargs="+", type=int, default=None,
                   help="token counts (default: each model's; larger N emulates more experts: minutes per row)")
    p.add_argument("--json", default=str(HERE / "RESULTS.json"))
    p.add_argument("--md", default=str(HERE / "RESULTS.md"))
    args = p.parse_args(argv)
    archs = args.arch or list(registry.manifest()["archs"])
    t0 = time.perf_counter()
    rows = []
    for name, e, k, h, i, ns, compact in MODELS:
        if args.model and name not in args.model:
            continue
        for arch in archs:
            for n in args.n or ns:
                r = measure(arch, name, e, k, h, i, n, compact)
                print(f"{name} {arch} N={n}: ratio {r['ratio']:.3f}, call {r['parts']['call']['seconds'] * 1e6:.1f} us "
                      f"({r['emulated_s']:.0f} s)", file=sys.stderr, flush=True)
                rows.append(r)
    from benchmarks.report import merge_section  # imported here: the report imports this module
    models = [m[0] for m in MODELS]
    merge_section("fused_moe", "benchmarks.fused_moe", rows, key=lambda r: (r["model"], r["arch"], r["N"]),
                  order=lambda r: (models.index(r["model"]), list(ARCHS).index(r["arch"]), r["N"]), argv=argv,
                  seconds=time.perf_counter() - t0, json_path=args.json, md_path=args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["MODELS", "excess", "main", "markdown", "measure", "min_bytes", "routing"]
