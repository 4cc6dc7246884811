"""``python -m benchmarks.variants``: which shipped kernels the ops' plans select (dead variants).

A code object's variants (token tiles, slices, atomic, YTILEs, values per lane, ...) are chosen at
run time by the ops' plan functions, from the call's shape, the dtypes and weight formats, and the
arch (a scaled-down GPU's CU count changes its arch facts too: `benchmarks.dynamic.ScaledDevice`).
A kernel no plan can select only costs build time. This module sweeps the plans -- no emulation --
per arch over a generous grid that holds the report's shapes (`benchmarks.shapes`, SHAPES and
CHECK_SHAPES) and the tests' (N = 1..128 at every token-tile and partial-row boundary, M and K from
one row / one 128-column group to the lm_heads', every dtype, weight flavour, scale granularity,
``deterministic`` and ``native`` choice, CU counts from 1 to the arch's), and lists per code object
the kernels selected and those never selected. Kernels the ops look up by name (the dequantize
routes, ``fused_moe_route``) are selected by their plan calls too.

For every selected kernel it records one *witness*: the first plan call that selected it. The
witnesses are stored in ``benchmarks/VARIANTS.json`` (``--write``); ``tests/report/test_variants.py``
replays them (seconds, plans only) and fails when a shipped kernel has none -- a variant no plan
selects came back, or a plan rule changed and ``python -m benchmarks.variants --write`` must be
rerun (`check`).

    python -m benchmarks.variants                 # every arch: per code object, selected / built
    python -m benchmarks.variants --arch gfx942 --family fp8_linear_splitk --list
    python -m benchmarks.variants --write         # store the witnesses (benchmarks/VARIANTS.json)
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import hipskinny.ops as hs_ops
from hipskinny import dtypes
from hipskinny.arch import ARCHS
from hipskinny.errors import HipSkinnyError

from . import ROOT
from .shapes import CHECK_SHAPES, SHAPES

WITNESSES = ROOT / "benchmarks" / "VARIANTS.json"

# The grid. N: every lane-split N, then the split-K boundaries (token tiles 1 | 2 | 4 | 8, gfx9's
# partial rows in fours, gfx12's eights, the quantized ops' 64).
LANE_N = tuple(range(1, 9))
SPLITK_N = (9, 13, 16, 17, 32, 33, 64, 65, 128)
M_GRID = (1, 64, 128, 300, 640, 1024, 2048, 4096, 8192, 14336, 28672, 65536, 151936)
K_GRID = (128, 384, 1024, 2048, 4096, 7168, 14336, 28672)
CU_GRID = (1, 2, 4, 8, 16, 32, 64, 128)
# The code objects each op's plans choose from (a sweep stops planning an op once they are covered).
OP_FAMILIES = {**{op: hs_ops.exports(op).code_objects for op in hs_ops.op_names()},
               "matmul_4bit:dequantize": ("matmul_4bit",), "w4a16_linear:dequantize": ("w4a16_linear",)}
FP8_X = ("float16", "bfloat16", "e4m3fn", "e4m3fnuz")
X_DTYPES = {"float16": dtypes.F16, "bfloat16": dtypes.BF16, "float32": dtypes.F32, "e4m3fn": dtypes.E4M3FN,
            "e4m3fnuz": dtypes.E4M3FNUZ}


def shapes() -> list[tuple[int, int]]:
    """(M, K) pairs: the grid's, then the report's shapes and check shapes."""
    report = [(s.m, s.k) for s in (*SHAPES, *CHECK_SHAPES)]
    return report + [mk for mk in itertools.product(M_GRID, K_GRID) if mk not in report]


def cu_counts(arch: str) -> list[int]:
    """The arch's CU count first (most variants are found there), then the scaled-down GPUs'."""
    full = ARCHS[arch].default_cu_count
    return [full] + sorted((c for c in CU_GRID if c < full), reverse=True)


_devices: dict[str, Any] = {}


def device(arch: str, cus: int) -> Any:
    """A `benchmarks.dynamic.ScaledDevice` of `cus` CUs that loads code objects for their metadata only
    (plans read kernel names and metadata; nothing is decoded for the emulator)."""
    from . import dynamic

    class PlanDevice(dynamic.ScaledDevice):
        def load_module(self, image: bytes) -> Any:
            return None

        def get_function(self, module: Any, name: str) -> Any:
            return name

    dev = _devices.get(arch)
    if dev is None:
        dev = _devices[arch] = PlanDevice(arch)
    dev.cus = cus
    return dev


# A plan call: (op, positional args after the device, keyword args); `call` runs it.
Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def calls(arch: str) -> Iterator[Call]:
    """Every plan call of the sweep on one device of `arch` (the device is the caller's)."""
    mk = shapes()
    for (m, k), n in itertools.product(mk, LANE_N + SPLITK_N):
        for dt in ("float16", "bfloat16"):
            for det in (True, False) if n > 8 else (True,):
                yield "skinny_gemm", (dt, n, m, k), {"deterministic": det}
            if n <= 64:
                yield "matmul_4bit", (dt, n, m, k), {}
                yield "w4a16_linear", (dt, n, m, k), {}
        for x, flavor, block in itertools.product(FP8_X, ("ocp", "fnuz"), (False, True)):
            natives: tuple[bool | None, ...] = (None, False) if x.startswith("e4m3") else (None,)
            for native in natives:
                for scaled in (False, True) if block and n <= 8 else (block,):
                    yield "fp8_linear", (x, n, m, k), {"w_flavor": flavor, "block": block, "x_scaled": scaled,
                                                      "native": native}
    for m, k in mk:
        for dt in ("float16", "bfloat16"):
            yield "gemv", (dt, 1, m, k), {}
            yield "matmul_4bit:dequantize", (dt, 16, m, k), {}
            yield "w4a16_linear:dequantize", (dt, 16, m, k), {}
    for dt, n, e in itertools.product(("float16", "bfloat16", "float32"), (1, 7, 64, 1000),
                                      (2, 8, 16, 32, 33, 64, 65, 128, 129, 256, 257, 512)):
        yield "topk_softmax", (dt, n, e, min(2, e)), {}
    for dt, int4, n, (h, i), (e, k) in itertools.product(
            ("float16", "bfloat16"), (True, False), (1, 2, 4, 8, 16, 64, 256), ((2048, 768), (4096, 1536), (512, 64)),
            ((8, 2), (64, 8), (128, 8), (256, 8))):
        yield "fused_moe", (dt, n, h, i, e, k), {"int4": int4}
    for layout, t, h, capacity in itertools.product(("v4", "v32"), (1, 4, 64), (8, 16, 64, 128), (64, 2048, 65536)):
        yield "sparse_mla", (t, h, capacity), {"layout": layout}


def call(device: Any, c: Call) -> list[str]:
    """The kernels plan call `c` selects on `device` ([] where the op rejects the call)."""
    from hipskinny.ops import _common, fused_moe, matmul_4bit, sparse_mla, w4a16_linear

    from . import dynamic
    op, args, kw = c
    a = tuple(X_DTYPES[x] if isinstance(x, str) and x in X_DTYPES else x for x in args)
    try:
        if op == "fused_moe":
            return [p["kernel"] for p in fused_moe.plan_info(device, *a, **kw)]
        if op == "sparse_mla":
            return [sparse_mla.plan_info(device, *a, **kw)["kernel"]]
        if op in ("matmul_4bit:dequantize", "w4a16_linear:dequantize"):
            dt, _n, m, k = a
            tag = _common.DTYPE_TAG[dt]
            if op.startswith("matmul_4bit"):
                return [matmul_4bit._OP.dequantize_plan(device, f"dequantize_4bit_{tag}", m, m * k // 8).info["kernel"]]
            return [w4a16_linear._OP.dequantize_plan(device, f"{w4a16_linear.FAMILY}_dequantize_{tag}", m,
                                                     m * k // 8).info["kernel"]]
        if op == "gemv":
            return [dynamic.plan_info(op, device, *a)["kernel"]]
        return [importlib.import_module(f"hipskinny.ops.{op}").plan_info(device, *a, **kw)["kernel"]]
    except HipSkinnyError:
        return []


def built(arch: str) -> dict[str, set[str]]:
    """The shipped kernels of `arch` by code-object family (hsaco/manifest.json)."""
    manifest = json.loads((ROOT / "hsaco" / "manifest.json").read_text())
    return {e["family"]: {k["name"] for k in e["kernels"]}
            for e in manifest["code_objects"].values() if e["arch"] == arch}


def sweep(arch: str, families: set[str] | None = None, log: Callable[[str], None] | None = None
          ) -> dict[str, dict[str, Any]]:
    """{kernel: witness} for every kernel some plan of the sweep selects on `arch`; a witness is the
    first call that selected it: {"cus", "op", "args", "kwargs"}. With `families`, stops once every
    kernel those code objects build is selected."""
    found: dict[str, dict[str, Any]] = {}
    shipped = built(arch)
    families = set(shipped) if families is None else families
    # per op, the kernels of its code objects in scope: once all are found its calls are skipped
    wanted = {op: set().union(*(shipped.get(f, set()) for f in fams if f in families))
              for op, fams in OP_FAMILIES.items()}
    for cus in cu_counts(arch):
        dev = device(arch, cus)
        start = time.monotonic()
        for c in calls(arch):
            if wanted[c[0]] <= found.keys():
                continue
            for name in call(dev, c):
                if name not in found:
                    found[name] = {"cus": cus, "op": c[0], "args": list(c[1]), "kwargs": c[2]}
        if all(w <= found.keys() for w in wanted.values()):
            return found
        if log:
            log(f"{arch}: {cus} CUs swept in {time.monotonic() - start:.0f} s, {len(found)} kernels selected")
    return found


def replay(arch: str, witnesses: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Run every witness of `arch` again: {kernel: what its witness selects now}."""
    out = {}
    for name, w in sorted(witnesses.items(), key=lambda kv: kv[1]["cus"]):
        out[name] = call(device(arch, w["cus"]), (w["op"], tuple(w["args"]), w["kwargs"]))
    return out


def check(archs: list[str] | None = None) -> list[str]:
    """Problems: a shipped kernel without a stored witness, or whose witness no longer selects it."""
    stored = json.loads(WITNESSES.read_text())
    problems = []
    for arch in archs or list(ARCHS):
        witnesses = stored.get(arch, {})
        now = replay(arch, witnesses)
        for family, names in sorted(built(arch).items()):
            for name in sorted(names):
                if name not in witnesses:
                    problems.append(f"{arch}/{family}: {name} is built but no plan of the sweep selects it "
                                    "(python -m benchmarks.variants --arch ...; stop building it, or rerun --write)")
                elif name not in now[name]:
                    problems.append(f"{arch}/{family}: {name}'s witness {witnesses[name]} now selects "
                                    f"{now[name]} (rerun python -m benchmarks.variants --write)")
    return problems


def dump(stored: dict[str, dict[str, Any]]) -> str:
    """VARIANTS.json's text: one witness a line."""
    archs = [f"  {json.dumps(arch)}: {{\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(w, sort_keys=True)}"
                                                     for k, w in sorted(ws.items())) + "\n  }"
             for arch, ws in sorted(stored.items())]
    return "{\n" + ",\n".join(archs) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.variants", description=__doc__.split("\n")[0])
    p.add_argument("--arch", action="extend", nargs="+", default=[], metavar="A")
    p.add_argument("--family", action="extend", nargs="+", default=[], metavar="F",
                   help="only these code objects (stops sweeping once all their kernels are selected)")
    p.add_argument("--list", action="store_true", help="name every kernel selected and never selected")
    p.add_argument("--write", action="store_true", help=f"store the witnesses in {WITNESSES.name}")
    p.add_argument("--check", action="store_true", help="replay the stored witnesses only (tests/report)")
    args = p.parse_args(argv)
    archs = args.arch or list(ARCHS)
    if args.check:
        problems = check(archs)
        print("\n".join(problems) or f"every shipped kernel of {', '.join(archs)} has a witness that selects it")
        return 1 if problems else 0
    stored = json.loads(WITNESSES.read_text()) if WITNESSES.is_file() else {}
    dead_total = 0
    for arch in archs:
        found = sweep(arch, set(args.family) or None, log=lambda s: print(s, file=sys.stderr, flush=True))
        for family, names in sorted(built(arch).items()):
            if args.family and family not in args.family:
                continue
            dead = sorted(names - found.keys())
            dead_total += len(dead)
            print(f"{arch}/{family}: {len(names) - len(dead)} of {len(names)} built kernels selected"
                  + (f"; never: {' '.join(dead)}" if dead else ""))
            if args.list:
                for name in sorted(names & found.keys()):
                    print(f"    {name}  <- {found[name]}")
        stored[arch] = {k: found[k] for k in sorted(found) if any(k in v for v in built(arch).values())}
    if args.write:
        WITNESSES.write_text(dump(stored))
        print(f"wrote {WITNESSES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
