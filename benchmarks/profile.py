"""Where a report row's instructions go: ``python -m benchmarks.profile OP ARCH N M K``.

Runs the row's scaled-down sample as the report measures it (`benchmarks.dynamic`: the same CU
count, rows and plan) and prints, in address order, every instruction of the launch that ran at
least ``--min`` of the hottest one's count, with its count per wave and 1000 weight columns of the
sample -- a loop body's instructions share a count, so the hot loop reads as a block -- then the
VALU mnemonics (not the matrix ones) per weight and lane (`LaunchStats.by_address`, the emulator's per-address
profile). The instruction text comes from the listing shipped with the code object. A row whose
call makes several launches (a route) profiles its last one.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import ml_dtypes
import numpy as np

from hipskinny import registry
from hipskinny.arch import ARCHS

from . import dynamic, static


def listing_text(arch: str, kernel: str) -> dict[int, str]:
    """Address -> instruction text of ``kernel`` in the shipped ``arch`` code object that holds it
    (`static.kernel_bodies`: the listing verified against the binary)."""
    families = [e["family"] for e in registry.manifest()["code_objects"].values() if e["arch"] == arch]
    family = dynamic.kernel_family(kernel, families)
    if family is None:
        raise KeyError(f"no shipped {arch} code object holds {kernel}")
    _, kernels = static.kernel_bodies(arch, family)
    body = next(b for kern, b in kernels if kern.name == kernel)
    return {inst.addr: inst.text for inst in body.insts()}


def profile(op: str, arch: str, n: int, m: int, k: int, dtype: Any = np.float16) -> dict[str, Any]:
    """The sample launch of a report row (the report's own sample run, `dynamic._emulate`): its
    kernel, the sample's rows, its per-address counts and the instruction text of each address."""
    real = dynamic.plan_info(op, dynamic.device(arch, ARCHS[arch].default_cu_count), dtype, n, m, k)
    cus, rows, _ = dynamic.choose_sample(op, arch, dtype, n, m, k, real, dynamic.MIN_ROWS)
    dynamic._emulate(op, arch, cus, dtype, n, rows, k, seed=0)
    stats = dynamic.device(arch, cus).launches[-1]       # the call's last launch
    return {"kernel": stats.kernel, "cus": cus, "rows": rows, "k": k, "wave_size": ARCHS[arch].wave_size,
            "counts": Counter(stats.by_address), "total": stats.total_instructions,
            "text": listing_text(arch, stats.kernel)}


def report(p: dict[str, Any], least: float = 0.02) -> str:
    """The hot instructions in address order and the VALU mix, as text."""
    per = 1000 / (p["rows"] * p["k"])                      # per wave-instruction: per 1000 weights
    counts, text = p["counts"], p["text"]
    top = max(counts.values())
    lines = [f"{p['kernel']}: sample of {p['rows']} rows x K = {p['k']} on {p['cus']} CUs, "
             f"{p['total']:,} wave-instructions; count per 1000 weights, instructions >= {least:.0%} of the hottest"]
    lines += [f"  {a:8x} {c * per:9.4f}  {text.get(a, '?')}" for a, c in sorted(counts.items()) if c >= least * top]
    valu = Counter()
    for a, c in counts.items():
        mnemonic = text.get(a, "?").split(" ")[0]
        if mnemonic.startswith("v_") and not mnemonic.startswith(("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")):
            valu[mnemonic] += c
    lanes = p["wave_size"] / (p["rows"] * p["k"])          # per weight and lane
    lines.append(f"VALU per weight x lane: {sum(valu.values()) * lanes:.3f}")
    lines += [f"  {name:32s} {c * lanes:.4f}" for name, c in valu.most_common(20)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("arch", choices=sorted(ARCHS))
    ap.add_argument("n", type=int)
    ap.add_argument("m", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("--dtype", choices=("f16", "bf16"), default="f16")
    ap.add_argument("--min", type=float, default=0.02, help="least count shown, as a share of the hottest")
    a = ap.parse_args(argv)
    dtype = np.float16 if a.dtype == "f16" else ml_dtypes.bfloat16
    print(report(profile(a.op, a.arch, a.n, a.m, a.k, dtype), a.min))


if __name__ == "__main__":
    main()
