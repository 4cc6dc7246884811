"""The planners' occupancy choices against the performance model: each alternative, predicted.

    python -m benchmarks.choices                  # all archs; prints the table
    python -m benchmarks.choices --arch gfx942 --json choices.json
    python -m benchmarks.choices --compute-table  # `_splitk.SPLITK_COMPUTE` from benchmarks/RESULTS.json

These choices are made from host shapes and the device's CU count, by constants this sweeps:
  * the lane-split kernels (skinny_gemm N <= 8, and the quantized families that share
    ops/_linear.py's plan): workgroups per CU of the persistent grid, `_linear.MAX_GROUPS_PER_CU`
    (capped by the kernel's registers and LDS);
  * gemv: the workgroups per CU its rows-per-workgroup rule keeps, `gemv.GROUPS_PER_CU`;
  * the split-K kernels (N > 8): the weight bytes in flight each work unit is counted for when K
    is split to cover DRAM's latency, `_splitk.SPLITK_UNIT_BYTES` (fewer: more shards, more fp32
    partial traffic; 2**40: no split for latency's sake);
  * the split-K shards' fp32 partials, at most `_splitk.PARTIAL_SHARE` of a call's unavoidable
    bytes (1e9: no cap);
  * the split-K kernels' compute over their bandwidth floor, `_splitk.SPLITK_COMPUTE`, which the
    shard count weighs against the partials (`--compute-table` derives it from a report: a
    measurement, not swept);
  * the quantized ops at N = 2..8: the lane-split kernel or the split-K one,
    `_linear.SMALL_N_SPLITK_WORK` (swept as "never" and "always"; the shipped choice per row is
    the rule's, `_linear.small_n_splitk`).
Every alternative is measured like a report row (benchmarks.dynamic on the arch's scaled-down GPU,
the cache model's DRAM bytes, the latency floor) and predicted by benchmarks/model.py; nothing is
timed on a GPU. The table marks the shipped value and the fastest per row.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hipskinny import ops
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.ops import _linear, _splitk, gemv

from . import dynamic
from .report import evaluate, families_by_arch
from .shapes import SHAPES
from .static import family_static

# SMALL_N_SPLITK_WORK's alternatives by name: split-K on no call, or on every call of N = 2..8
_SMALL_N = {"never": {}, "always": dict.fromkeys(SHIPPED_ARCHS, 0)}
# (module, constant, alternatives, ops, N values); an alternative named by a string stands for
# _SMALL_N's value
CHOICES = ((_linear, "MAX_GROUPS_PER_CU", (1, 2, 4), ("skinny_gemm", "fp8_linear", "matmul_4bit", "w4a16_linear"),
            (1, 4, 8)),
           (gemv, "GROUPS_PER_CU", (1, 2, 4, 8), ("gemv",), (1,)),
           (_splitk, "SPLITK_UNIT_BYTES", (4096, 8192, 16384, 2**40),
            ("skinny_gemm", "fp8_linear", "matmul_4bit", "w4a16_linear"), (16, 64)),
           (_linear, "SMALL_N_SPLITK_WORK", tuple(_SMALL_N), (*_linear.SMALL_N_SPLITK_OPS, "fp8_linear:w8a8"),
            (2, 4, 8)),
           (_splitk, "PARTIAL_SHARE", (0.05, 0.1, 1e9), ("skinny_gemm", "fp8_linear", "matmul_4bit", "w4a16_linear"),
            (16,)))
LAYERS = ("qkv_proj", "o_proj", "down_proj", "router")


@contextlib.contextmanager
def override(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name = value`` for the block (a string: `_SMALL_N`'s value of that name), with every
    cached plan and bound call forgotten."""
    old = getattr(module, name)
    setattr(module, name, _SMALL_N[value] if isinstance(value, str) else value)
    _forget()
    try:
        yield
    finally:
        setattr(module, name, old)
        _forget()


def _forget() -> None:
    """Clear every op module's plan and bound-call caches (they hold choices made before)."""
    ops.forget_plans()


def measure(op: str, arch: str, m: int, k: int, n: int) -> dict[str, Any]:
    """One row at the current constants, as the report computes it."""
    meas = dynamic.measure(op, arch, np.float16, n, m, k)
    shipped = sorted({f for f, a in families_by_arch() if a == arch})
    family = dynamic.kernel_family((meas.info or {}).get("kernel", ""), shipped)
    static = {s.name: s for s in family_static(arch, family)} if family else {}
    return evaluate(meas, static, family, 2)


def sweep(archs: list[str], only_ops: list[str] | None = None, only_n: list[int] | None = None,
          log: Any = sys.stderr) -> list[dict[str, Any]]:
    rows = []
    for module, name, values, op_names, all_n in CHOICES:
        ns = [n for n in all_n if not only_n or n in only_n]
        for op, arch in ((o, a) for o in op_names for a in archs if not only_ops or o in only_ops):
            for shape in (s for s in SHAPES if s.layer in LAYERS):
                for n in ns:
                    shipped = getattr(module, name)
                    if isinstance(values[0], str):
                        shipped = "always" if _linear.small_n_splitk(op.split(":")[0], arch, n, shape.m,
                                                                      shape.k) else "never"
                    got = {}
                    for v in values:
                        with override(module, name, v):
                            r = measure(op, arch, shape.m, shape.k, n)
                        got[v] = r
                    ok = {v: r for v, r in got.items() if r.get("status") == "ok"}
                    if not ok:
                        continue
                    best = min(ok, key=lambda v: (round(ok[v]["predicted_us"], 2), v))
                    rows.append({"op": op, "constant": name, "shipped": shipped, "arch": arch,
                                 "shape": shape.label, "m": shape.m, "k": shape.k, "n": n, "best": best,
                                 "predicted_us": {v: r["predicted_us"] for v, r in ok.items()},
                                 "bound": {v: r["bound"] for v, r in ok.items()},
                                 "dram_ratio": {v: r["dram_ratio"] for v, r in ok.items()},
                                 "kernel": {v: r["kernel"] for v, r in ok.items()}})
                    print(_line(rows[-1]), file=log, flush=True)
    return rows


def compute_table(results: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """`_splitk.SPLITK_COMPUTE` from a report's rows: per split-K kernel (`_splitk.compute_ratio`'s
    stem) and arch, the median over the layers (routers left out: their fixed costs are not a
    kernel's rate) of the VALU, matrix and LDS roofs, evenly spread (divided by the row's
    `busiest_cu_share`, and a sliced kernel's by its `_splitk.SPLITK_SLICE_COST`: the table is of the
    one-slice kernels), over the bandwidth floor, at one and at four token tiles; only where both
    were measured."""
    got: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in results["rows"]:
        plan = r.get("plan") or {}
        if r.get("status") != "ok" or "shards" not in plan or r["layer"] == "router" or ":dequantize" in r["op"]:
            continue
        stem = _splitk.kernel_stem(plan["kernel"])
        compute = max(r["roofs_us"][b] for b in ("valu", "matrix", "lds")) / (r.get("busiest_cu_share") or 1.0)
        compute /= 1 + _splitk.SPLITK_SLICE_COST * (plan.get("slices", 1) - 1)
        got[stem, r["arch"], plan["token_tiles"]].append(compute / r["floor_us"])
    table: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for stem, arch, nt in sorted(got):
        if nt == 1 and (stem, arch, 4) in got:
            table[stem][arch] = (round(statistics.median(got[stem, arch, 1]), 2),
                                 round(statistics.median(got[stem, arch, 4]), 2))
    return dict(table)


def _line(r: dict[str, Any]) -> str:
    alts = "  ".join(f"{v}{'*' if v == r['shipped'] else ''}{'!' if v == r['best'] else ''}: "
                     f"{us:.2f} µs {r['bound'][v]} dram {r['dram_ratio'][v]:.3f}"
                     for v, us in r["predicted_us"].items())
    return f"{r['op']:11} {r['arch']:8} {r['shape']:28} N={r['n']:<2} {alts}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.choices", description=__doc__.split("\n")[0])
    p.add_argument("--arch", nargs="+", default=list(SHIPPED_ARCHS), choices=sorted(ARCHS))
    p.add_argument("--op", nargs="+", help="only these ops")
    p.add_argument("--n", nargs="+", type=int, help="only these N")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--compute-table", nargs="?", const=str(Path(__file__).parent / "RESULTS.json"), metavar="JSON",
                   help="print _splitk.SPLITK_COMPUTE as measured by a report (default benchmarks/RESULTS.json)")
    a = p.parse_args(argv)
    if a.compute_table:
        for stem, by_arch in compute_table(json.loads(Path(a.compute_table).read_text())).items():
            print(f"    {stem!r}: {by_arch},")
        return 0
    rows = sweep(a.arch, a.op, a.n)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("(* shipped, ! fastest predicted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
