"""Against published measurements: the predicted times of our kernels next to the times the
upstream pull requests this work comes from published, measured on hardware, at the same shapes
(the figures as quoted in issue 26; ``../shared/reference/archs.md`` section 11 and
``sparse_mla_spec.md`` section 11 for the MoE, lm_head and sparse MLA ones).

    python -m benchmarks.published    # measures the router top-k row; renders the section from RESULTS.json

Theirs are measurements of their kernels on a GPU; ours are predictions of ours by the model of
benchmarks/model.py (roofs over the emulator's exact counts, under the latency floor of
benchmarks/latency.py). Nothing here was timed on a GPU, and a prediction is not a measurement:
where a prediction is far below a measurement, the gap is an upper bound on what our kernel can
gain, not a speedup. The rows other than the router are read from the sections that produce them
(`python -m benchmarks.report`, `benchmarks.fused_moe`, `benchmarks.sparse_mla`), so this section shows what
their last runs predicted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import hipskinny
from hipskinny.arch import ARCHS

from . import dynamic, latency, traffic
from .model import predict

HERE = Path(__file__).resolve().parent

# (what, arch, their µs, their kernel and how it was timed, where ours comes from)
PUBLISHED = (
    ("Qwen3-30B-A3B MoE GEMM1 (int4 AWQ, 8 routed experts, N = 1)", "gfx1151", 66.4,
     "ROCm/vllm gfx11 MoE (#876/#908)", ("fused_moe", "Qwen3-30B-A3B", 1, "gemm1")),
    ("Qwen3-30B-A3B MoE GEMM2 (int4 AWQ, N = 1)", "gfx1151", 40.4,
     "ROCm/vllm gfx11 MoE (#876/#908)", ("fused_moe", "Qwen3-30B-A3B", 1, "gemm2")),
    ("Qwen3-30B-A3B qkv_proj 5120 x 2048 (int4 AWQ, N = 1)", "gfx1151", 33.6,
     "upstream gfx1151 int4 GEMM", ("report", "w4a16_linear", "Qwen3-30B-A3B", "qkv_proj", 1)),
    ("Qwen3-30B-A3B o_proj 2048 x 4096 (int4 AWQ, N = 1)", "gfx1151", 33.3,
     "upstream gfx1151 int4 GEMM", ("report", "w4a16_linear", "Qwen3-30B-A3B", "o_proj", 1)),
    ("Qwen3-30B-A3B lm_head 152064 x 2048 (bf16, N = 1)", "gfx1151", 2568.0,
     "upstream gfx1151 bf16 skinny GEMM", ("report", "gemv", "Qwen3-30B-A3B", "lm_head", 1)),
    ("Qwen3-30B-A3B router top-k (128 experts, k = 8, N = 1)", "gfx1151", 8.7,
     "upstream gfx1151 router top-k", ("published", "router")),
    ("DeepSeek V4 sparse MLA, CSA-2048 (B = 4)", "gfx950", 35.8,
     "upstream gfx950 sparse MLA HIP v3.8", ("sparse_mla", "DSv4 CSA-2048")),
    ("DeepSeek V4 sparse MLA, HCA-32 (B = 4)", "gfx950", 21.4,
     "upstream gfx950 sparse MLA HIP v3.8", ("sparse_mla", "DSv4 HCA-32")),
)
# How ours differ from theirs at the same shape (said next to the numbers).
DIFFERENCES = {
    "qkv_proj": "ours: GPTQ-style symmetric g128 (AWQ's 4-bit zero points add 0.8% of the bytes)",
    "o_proj": "ours: GPTQ-style symmetric g128 (AWQ's 4-bit zero points add 0.8% of the bytes)",
    "lm_head": "ours: the report's row, fp16 (same bytes as bf16), 151936 rows (Qwen3's vocabulary; "
               "theirs padded to 152064: +0.08%)",
    "gemm1": "ours: GPTQ-style symmetric g128 experts, uniform routing",
    "gemm2": "ours: GPTQ-style symmetric g128 experts, uniform routing",
}
ROUTER = ("gfx1151", 1, 128, 8)      # arch, N, experts, k


def measure_router(arch: str, n: int, e: int, k: int) -> dict[str, Any]:
    """`hipskinny.moe.topk_softmax` of fp32 logits [n, e] on the whole emulated GPU: its roofs and
    latency floor (one launch; every logit read once, weights and ids written once)."""
    info = ARCHS[arch]
    dev = dynamic.device(arch, info.default_cu_count)
    dev.launches.clear()
    logits = np.random.default_rng(0).standard_normal((n, e)).astype(np.float32)
    with hipskinny.on_device(dev), traffic.Recorder(dev, table=False) as rec:
        hipskinny.moe.topk_softmax(logits, k, renormalize=True)
    (stats,) = list(dev.launches)
    caches, waits = rec.costs(0, stats, arch, info.default_cu_count)
    lat = latency.call_floor(arch, [waits])
    least = 4 * n * e + 8 * n * k
    pred = predict(info, info.default_cu_count, bytes_moved=caches.dram_bytes, bytes_min=least,
                   valu=stats.instructions["valu"] + stats.instructions["trans"], mnemonics=stats.mnemonics,
                   lds_bytes=stats.bytes_loaded["lds"] + stats.bytes_stored["lds"], latency_seconds=lat)
    return {"name": "router", "arch": arch, "N": n, "E": e, "k": k, "kernel": stats.kernel,
            "predicted_us": pred.seconds * 1e6, "bound": pred.bound, "latency_us": lat * 1e6}


def ours(rep: dict[str, Any], arch: str, where: tuple) -> tuple[float, str] | None:
    """(predicted µs, bound) of our row in the stored report, or None if that row was not run."""
    kind = where[0]
    if kind == "report":
        _, op, model, layer, n = where
        for r in rep.get("rows", []):
            if (r["op"], r["model"], r["layer"], r["n"], r["arch"], r["status"]) == (op, model, layer, n, arch, "ok"):
                return r["predicted_us"], r["bound"]
    elif kind == "fused_moe":
        _, model, n, part = where
        for r in rep.get("fused_moe", {}).get("rows", []):
            if (r["model"], r["N"], r["arch"]) == (model, n, arch):
                p = r["parts"][part]
                return p["seconds"] * 1e6, p["bound"]
    elif kind == "sparse_mla":
        for r in rep.get("sparse_mla", {}).get("rows", []):
            if (r["shape"], r["arch"]) == (where[1], arch):
                return r["seconds"] * 1e6, r["bound"]
    else:
        for r in rep.get("published", {}).get("rows", []):
            if (r["name"], r["arch"]) == (where[1], arch):
                return r["predicted_us"], r["bound"]
    return None


def markdown(rep: dict[str, Any]) -> list[str]:
    """The section of RESULTS.md (rendered by benchmarks.report.markdown from the stored rows)."""
    out = ["## Against published measurements", "", __doc__.split("\n\n", 2)[2].replace("\n", " ").strip(), "",
           "| what | arch | theirs, measured µs | their kernel | ours, predicted µs | bound | ours / theirs | "
           "how ours differ |", "|" + "---|" * 8]
    for what, arch, theirs, kernel, where in PUBLISHED:
        got = ours(rep, arch, where)
        pred, bound = (f"{got[0]:.1f}", got[1]) if got else ("not run", "")
        ratio = f"{got[0] / theirs:.2f}" if got else ""
        key = where[3] if where[0] == "report" else where[-1]
        out.append(f"| {what} | {arch} | {theirs:g} | {kernel} | {pred} | {bound} | {ratio} | "
                   f"{DIFFERENCES.get(key, '')} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.published", description=__doc__.split("\n")[0])
    p.add_argument("--json", default=str(HERE / "RESULTS.json"))
    p.add_argument("--md", default=str(HERE / "RESULTS.md"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    row = measure_router(*ROUTER)
    print(f"router {row['arch']}: {row['predicted_us']:.1f} us ({row['bound']})", file=sys.stderr)
    from benchmarks.report import merge_section  # imported here: the report imports this module

    merge_section("published", "benchmarks.published", [row], key=lambda r: (r["name"], r["arch"]),
                  order=lambda r: (r["name"], r["arch"]), argv=argv, seconds=time.perf_counter() - t0,
                  json_path=args.json, md_path=args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["PUBLISHED", "main", "markdown", "measure_router", "ours"]
