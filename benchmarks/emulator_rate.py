"""The emulator's speed: wave-instructions per second of host time over a fixed set of
launches, for this tree and a baseline commit, in one run on one machine.

    python -m benchmarks.emulator_rate [--baseline f654dca] [--arch A ..] [--write]

Two sets of launches per arch, every kernel family in each:

- ``tests``: the small shapes the test suite uses (K = 512, a few dozen rows, 2 CUs);
- ``report``: decode shapes as the report's scaled-down GPU runs them (K = 4096, 4 CUs).

Each tree runs in a process of its own per arch (``--worker``, with ``HIPSKINNY_TREE`` naming
the tree to import), the two trees one after the other for each arch; a baseline commit is
checked out into a git worktree under /tmp. Every workload is called once to warm up (listing
parse, decode), then timed `--repeat` times (3), keeping the fastest call (the machine is shared;
one call varies by 20-30%): the rate is the sum of the launches' instruction counts over the sum
of their `LaunchStats.seconds`; the table per workload names the slowest launches. Both trees
get the same inputs; plans and kernels change between commits, so their outputs are not compared
with each other bit for bit: each output of either tree must lie within this tree's float64
reference's accumulation bound, the one its test suite holds the family to (exit 1 otherwise).
``--write`` stores the result in RESULTS.json and rewrites the "Emulator rate" section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ARCHS = ("gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201")
SETS = {"tests": {"k": 512, "m": 96, "cus": 2}, "report": {"k": 4096, "m": 256, "cus": 4}}


def _workloads(hs: Any, arch: str, size: dict[str, int]) -> dict[str, Callable[[], Any]]:
    """name -> a call of the public API on fixed inputs (only API the baseline has too)."""
    return {name: call for name, (call, _) in _cases(hs, arch, size).items()}


def _cases(hs: Any, arch: str, size: dict[str, int]) -> dict[str, tuple[Callable[[], Any], Callable[..., None]]]:
    """name -> (the call, check(output, kernels launched)): the check holds the output to this
    tree's float64 reference within the accumulation bound its test suite holds the kernels that
    ran to (AssertionError otherwise), so a baseline's outputs meet the same model as this tree's."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    k, m = size["k"], size["m"]
    rng = np.random.default_rng(0)
    w16 = (rng.standard_normal((m, k)) * 0.05).astype(np.float16)
    wbf = w16.astype(bf16)
    xs = {n: rng.standard_normal((n, k)).astype(np.float16) for n in (1, 4, 16, 32)}
    flavor = hs.arch.ARCHS[arch].fp8_format or "ocp"   # the W8A8 flavour (either without FP8 instructions)
    q8 = hs.fp8.quantize(w16.astype(np.float32), granularity="channel", flavor=flavor)
    # plain absmax: the nested (compress_statistics) quantizer changed after the baseline commit
    packed, state = hs.bnb.quantize_4bit(w16, quant_type="nf4", blocksize=64, compress_statistics=False)
    e, h, i = 8, 256, 128
    w13 = (rng.standard_normal((e, 2 * i, h)) * 0.05).astype(bf16)
    w2 = (rng.standard_normal((e, h, i)) * 0.05).astype(bf16)
    xm = rng.standard_normal((3, h)).astype(bf16)
    ids = np.stack([rng.choice(e, 2, replace=False) for _ in range(3)]).astype(np.int32)
    tw = rng.uniform(0.05, 1.0, (3, 2)).astype(np.float32)
    keys = rng.standard_normal((80, 512))
    cache = hs.mla.pack_cache(keys, layout="v4", block_size=64, fp8="ocp", rng=np.random.default_rng(1))
    idx = rng.integers(0, 80, 41).astype(np.int32)
    ptr = np.array([0, 1, 41], np.int32)
    q = (rng.standard_normal((2, 20, 512)) * 0.5).astype(bf16)
    mla = getattr(hs, "sparse_mla", None) or hs.mla.sparse_decode     # the baseline's name: mla.sparse_decode
    b = _bounds()

    def nf4(y: Any, x: np.ndarray, kernels: list[str]) -> None:
        if any("splitk" in name for name in kernels):    # the split-K kernel rounds each weight to x's dtype
            b.nf4_16(y, x, b.nf4_weights(packed, state, x.dtype))
        else:
            b.nf4(y, x, packed, state)
    return {
        "skinny_gemm n=1": (lambda: hs.skinny_gemm(xs[1], w16), lambda y, _: b.skinny(y, xs[1], w16)),
        "skinny_gemm n=16": (lambda: hs.skinny_gemm(xs[16].astype(bf16), wbf),
                             lambda y, _: b.skinny(y, xs[16].astype(bf16), wbf)),
        "skinny_gemm n=32": (lambda: hs.skinny_gemm(xs[32], w16), lambda y, _: b.skinny(y, xs[32], w16)),
        "fp8_linear n=4": (lambda: hs.fp8_linear(xs[4], *q8), lambda y, _: b.fp8(y, xs[4], *q8)),
        "fp8_linear n=16": (lambda: hs.fp8_linear(xs[16], *q8), lambda y, _: b.fp8(y, xs[16], *q8)),
        "matmul_4bit n=1": (lambda: hs.matmul_4bit(xs[1], packed, state), lambda y, ks: nf4(y, xs[1], ks)),
        "matmul_4bit n=16": (lambda: hs.matmul_4bit(xs[16], packed, state), lambda y, ks: nf4(y, xs[16], ks)),
        "fused_moe n=3": (lambda: hs.moe.fused_moe(xm, w13, w2, tw, ids),
                          lambda y, _: b.moe(y, xm, w13.astype(np.float64), w2.astype(np.float64), tw, ids)),
        "sparse_mla t=2": (lambda: mla(q, cache, idx, ptr, scale=512 ** -0.5, return_lse=True),
                           lambda out, _: b.mla(*out, q, cache, idx, ptr, {}, "v4", ("ocp", "ocp"), 512 ** -0.5)),
    }


class _Bounds:
    """The test suite's accumulation bounds (tests/<family>/test_*.py), one per family: the error
    model each family's kernels are held to, not a tolerance of this benchmark's own."""

    def __init__(self) -> None:
        sys.path.insert(0, str(ROOT / "tests"))
        import paths  # tests/paths.py: the test folders on sys.path
        paths.importable()
        import test_fp8_linear
        import test_fused_moe
        import test_matmul_4bit
        import test_skinny_gemm
        import test_sparse_mla
        self.skinny, self.fp8 = test_skinny_gemm.assert_bound, test_fp8_linear.assert_bound
        self.nf4, self.moe, self.mla = test_matmul_4bit.assert_bound, test_fused_moe.assert_moe, \
            test_sparse_mla.assert_close
        self.nf4_16, self.nf4_weights = test_matmul_4bit.assert_route_bound, test_matmul_4bit.route_weights


_BOUNDS: list[_Bounds] = []


def _bounds() -> Any:
    """The bounds, imported when first checked (a worker never checks: it may run a baseline tree)."""
    class Lazy:
        def __getattr__(self, name: str) -> Any:
            if not _BOUNDS:
                _BOUNDS.append(_Bounds())
            return getattr(_BOUNDS[0], name)
    return Lazy()


def _encode(out: Any) -> list[dict[str, Any]]:
    """An output (array or tuple of arrays) as JSON: dtype name, shape, bytes in base64."""
    return [{"dtype": str(np.asarray(o).dtype), "shape": list(np.shape(o)),
             "data": base64.b64encode(np.ascontiguousarray(np.asarray(o)).tobytes()).decode()}
            for o in (out if isinstance(out, tuple) else (out,))]


def _decode(parts: list[dict[str, Any]]) -> Any:
    import ml_dtypes
    arrays = tuple(np.frombuffer(base64.b64decode(p["data"]), getattr(ml_dtypes, p["dtype"], None) or p["dtype"])
                   .reshape(p["shape"]) for p in parts)
    return arrays if len(arrays) > 1 else arrays[0]


def check(res: dict[str, Any]) -> list[str]:
    """Each workload's output in `res` held to this tree's reference and bound: the ones off, with why."""
    import hipskinny as hs
    off, cases = [], {}
    for key, v in res.items():
        arch, name, label = key.split("|")
        if (arch, name) not in cases:
            cases[arch, name] = _cases(hs, arch, SETS[name])
        try:
            cases[arch, name][label][1](_decode(v["outputs"]), v["kernels"])
        except AssertionError as e:
            off.append(f"{key}: {str(e).splitlines()[0] if str(e) else 'outside the bound'}")
    return off


def worker(archs: list[str], sets: list[str], repeat: int = 3) -> dict[str, Any]:
    """Run every workload in this process's `hipskinny` (see `benchmarks._use_tree`)."""
    import hipskinny as hs
    from hipskinny.emulator import EmulatedDevice
    out: dict[str, Any] = {}
    for arch in archs:
        for name in sets:
            size = SETS[name]
            for label, call in _workloads(hs, arch, size).items():
                dev = EmulatedDevice(arch, size["cus"])
                best: tuple[float, float, list, Any] | None = None
                with hs.on_device(dev):
                    first = time.perf_counter()
                    call()                                 # warm: instructions read, handlers decoded
                    first = time.perf_counter() - first
                    for _ in range(repeat):                # the fastest call: the machine is shared
                        dev.launches.clear()
                        wall = time.perf_counter()
                        result = call()
                        wall = time.perf_counter() - wall
                        stats = list(dev.launches)
                        seconds = sum(s.seconds for s in stats)
                        if best is None or seconds < best[0]:
                            best = (seconds, wall, stats, result)
                assert best is not None
                seconds, wall, stats, result = best
                out[f"{arch}|{name}|{label}"] = {
                    "wave_instructions": sum(s.total_instructions for s in stats),
                    "seconds": seconds, "wall": wall, "first_call": first, "launches": len(stats), "repeat": repeat,
                    "kernels": [s.kernel for s in stats], "outputs": _encode(result)}
    return out


def _run_tree(tree: Path, archs: list[str], sets: list[str], repeat: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, HIPSKINNY_TREE=str(tree), HIPSKINNY_DEVICE="")
        subprocess.run([sys.executable, "-m", "benchmarks.emulator_rate", "--worker", f.name, "--arch", *archs,
                        "--set", *sets, "--repeat", str(repeat)], cwd=ROOT, env=env, check=True)
        return json.loads(Path(f.name).read_text())


def _worktree(commit: str) -> Path:
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"hipskinny-{sha}"
    if not (path / "frontend").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def _totals(res: dict[str, Any], arch: str, name: str) -> tuple[int, float, float]:
    """(wave-instructions, seconds, first calls' wall seconds) of one arch's set."""
    rows = [v for key, v in res.items() if key.startswith(f"{arch}|{name}|")]
    return (sum(r["wave_instructions"] for r in rows), sum(r["seconds"] for r in rows),
            sum(r.get("first_call", 0.0) for r in rows))


def compare(new: dict[str, Any], old: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per arch and set: both rates. (Instruction counts differ where a code object or a plan
    changed between the commits; each tree's rate is over its own.)"""
    rows = []
    for arch in dict.fromkeys(k.split("|")[0] for k in new):
        for name in dict.fromkeys(k.split("|")[1] for k in new):
            instr, sec, first = _totals(new, arch, name)
            row = {"arch": arch, "set": name, "wave_instructions": instr, "seconds": sec,
                   "per_second": instr / sec if sec else 0.0, "first_calls": first}
            if old is not None:
                oi, osec, ofirst = _totals(old, arch, name)
                row.update(baseline_seconds=osec, baseline_per_second=oi / osec if osec else 0.0,
                           baseline_first_calls=ofirst)
                row["speedup"] = row["per_second"] / row["baseline_per_second"] if osec else 0.0
            rows.append(row)
    return rows


def markdown(speed: dict[str, Any]) -> list[str]:
    """The "Emulator rate" table of RESULTS.md from the stored result."""
    base = speed.get("baseline")
    out = [f"Measured by `{speed['command']}` on {speed['date']} at commit `{speed['commit']}`"
           + (f", against commit `{base}` in the same run on the same machine" if base else "")
           + ": wave-instructions per second of host time over fixed launches of every kernel family "
           "(`benchmarks/emulator_rate.py`: `tests` = the test suite's small shapes, `report` = the report's "
           "scaled-down decode shapes), each called once to warm up, then timed"
           + (f" {speed['repeat']} times, the fastest call counting" if speed.get("repeat", 1) > 1 else "")
           + ("; every output of both trees is within the test suite's accumulation bound of this tree's float64 "
              "reference" if speed.get("checked") else "; the outputs of both trees agree bit for bit" if base else "")
           + (f" (instruction counts differ where the code objects changed between the commits: "
              f"{', '.join(speed['recompiled'])})" if speed.get("recompiled") else "") + ".", ""]
    if base:
        first = all("first_calls" in r for r in speed["rows"])
        out += [f"| arch | launches | wave-instructions | `{base}` per second | this tree per second | speedup |"
                + (f" first calls, `{base}` | first calls, this tree |" if first else ""),
                "|---|---|---|---|---|---|" + ("---|---|" if first else "")]
        for r in speed["rows"]:
            out.append(f"| {r['arch']} | {r['set']} | {r['wave_instructions']:,} | {r['baseline_per_second']:,.0f} "
                       f"| {r['per_second']:,.0f} | {r['speedup']:.2f}x |"
                       + (f" {r['baseline_first_calls']:.2f} s | {r['first_calls']:.2f} s |" if first else ""))
        if first:
            out += ["", "First calls: the wall time of each workload's warm-up call, summed; a new process per arch "
                    "runs the workloads in order, so these include reading each code object's instructions and "
                    "decoding the instructions run."]
        instr = sum(r["wave_instructions"] for r in speed["rows"])
        sec, bsec = sum(r["seconds"] for r in speed["rows"]), sum(r["baseline_seconds"] for r in speed["rows"])
        out += ["", f"All launches: {bsec:.1f} s at `{base}`, {sec:.1f} s in this tree ({bsec / sec:.2f}x; "
                f"{instr:,} wave-instructions here)."]
        work, old = speed.get("workloads") or {}, speed.get("baseline_workloads") or {}
        if work and old:
            name = lambda key: " ".join(key.split("|"))  # noqa: E731
            slowest = sorted(work, key=lambda k: -work[k]["seconds"])[:3]
            least = sorted(work, key=lambda k: old[k]["seconds"] / work[k]["seconds"])[:3]
            out += ["", "Slowest launches here: "
                    + ", ".join(f"{name(k)} ({work[k]['seconds']:.2f} s)" for k in slowest)
                    + f"; least gain over `{base}`: " + ", ".join(
                        f"{name(k)} ({old[k]['seconds'] / work[k]['seconds']:.2f}x)" for k in least) + "."]
        if speed.get("baseline_workloads"):
            out += ["", "Per workload (host seconds of its fastest call; the ratio is the baseline's seconds over "
                    "this tree's):", "",
                    f"| arch | launches | workload | wave-instructions | seconds | `{base}` wave-instructions "
                    f"| `{base}` seconds | host time ratio |", "|---|---|---|---|---|---|---|---|"]
            for key, v in speed["workloads"].items():
                o = speed["baseline_workloads"][key]
                arch, name, label = key.split("|")
                out.append(f"| {arch} | {name} | {label} | {v['wave_instructions']:,} | {v['seconds']:.3f} "
                           f"| {o['wave_instructions']:,} | {o['seconds']:.3f} | {o['seconds'] / v['seconds']:.2f}x |")
    else:
        out += ["| arch | launches | wave-instructions | per second |", "|---|---|---|---|"]
        for r in speed["rows"]:
            out.append(f"| {r['arch']} | {r['set']} | {r['wave_instructions']:,} | {r['per_second']:,.0f} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.emulator_rate", description=__doc__.split("\n")[0])
    p.add_argument("--baseline", help="a commit to measure against (checked out into a git worktree)")
    p.add_argument("--arch", nargs="+", default=list(ARCHS))
    p.add_argument("--set", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--write", action="store_true", help="store in RESULTS.json and rewrite RESULTS.md")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per workload; the fastest counts")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        Path(args.worker).write_text(json.dumps(worker(args.arch, args.set, args.repeat)))
        return 0
    # Arch by arch, this tree then the baseline: a slower minute of the shared machine then hits both.
    new: dict[str, Any] = {}
    old: dict[str, Any] | None = {} if args.baseline else None
    for arch in args.arch:
        new.update(_run_tree(ROOT, [arch], args.set, args.repeat))
        if old is not None:
            old.update(_run_tree(_worktree(args.baseline), [arch], args.set, args.repeat))
    rows = compare(new, old)
    off = [f"this tree: {line}" for line in check(new)]
    off += [f"{args.baseline}: {line}" for line in check(old)] if old is not None else []
    recompiled = sorted({key.split("|")[2].split()[0] for key in new
                         if old is not None and old[key]["wave_instructions"] != new[key]["wave_instructions"]})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    command = "python -m benchmarks.emulator_rate" + (f" --baseline {args.baseline}" if args.baseline else "") \
        + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
    strip = lambda res: {k: {f: x for f, x in v.items() if f != "outputs"} for k, v in res.items()}  # noqa: E731
    speed = {"command": command, "date": datetime.date.today().isoformat(), "commit": commit, "repeat": args.repeat,
             "baseline": args.baseline, "rows": rows, "recompiled": recompiled, "workloads": strip(new),
             "baseline_workloads": None if old is None else strip(old), "checked": True}
    print("\n".join(markdown(speed)))
    for line in off:
        print(f"OFF THE REFERENCE: {line}")
    if args.write and not off:
        from . import report
        report.store_emulator_speed(speed)
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
