"""GEMV at real decode shapes: traffic, instruction mix, occupancy, predicted time, per arch.

    python benchmarks/gemv.py [--arch gfx942 ...] [--dtype f16|bf16] [--json out.json]

Every workgroup of the GEMV does identical work except the last (partial) one, so a
real shape is measured by emulating SAMPLE_GROUPS full workgroups at the real K and
scaling by the workgroup count; `--check-linear` emulates twice as many to confirm the
counts scale exactly. Also reports the Python-side cost of one call (CPU µs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model import balance_point, predict  # noqa: E402

import hipskinny  # noqa: E402
from hipskinny import registry  # noqa: E402
from hipskinny.arch import ARCHS, SHIPPED_ARCHS  # noqa: E402
from hipskinny.emulator import EmulatedDevice  # noqa: E402
from hipskinny.ops import gemv as op  # noqa: E402
from hipskinny.ops._common import DTYPE_TAG  # noqa: E402

# (model, layer, M, K) at N = 1, from shared/reference/shapes.md.
SHAPES = [
    ("Llama-3-8B", "qkv_proj", 6144, 4096), ("Llama-3-8B", "o_proj", 4096, 4096),
    ("Llama-3-8B", "gate_up_proj", 28672, 4096), ("Llama-3-8B", "down_proj", 4096, 14336),
    ("Llama-3-8B", "lm_head", 128256, 4096), ("Qwen3-30B-A3B", "qkv_proj", 5120, 2048),
    ("Qwen3-30B-A3B", "router", 128, 2048), ("Llama-3-70B", "o_proj", 8192, 8192),
]
SAMPLE_GROUPS = 4
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def measure(arch: str, m: int, k: int, dtype, groups: int) -> dict:
    """Emulate `groups` workgroups of the kernel the op picks for (M, K); per-group counts."""
    dev = EmulatedDevice(arch)
    r = op.rows_per_group(m, dev.properties.cu_count)
    rows = r * groups
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, k)).astype(dtype)
    w = rng.standard_normal((rows, k)).astype(dtype)
    name = f"gemv_{DTYPE_TAG[np.dtype(dtype)]}_r{r}"
    fn, meta = registry.load(dev, "gemv").kernel(name)
    from hipskinny.launch import make_plan

    plan = make_plan(fn, meta, (groups, 1, 1), (op.THREADS, 1, 1))
    stride = -(-k // 8) * 8
    wp = np.zeros((rows, stride), dtype)
    wp[:, :k] = w
    x_d, w_d, y_d = dev.alloc(x.nbytes), dev.alloc(wp.nbytes), dev.alloc(rows * 2)
    dev.copy_to_device(x_d, x, x.nbytes)
    dev.copy_to_device(w_d, wp, wp.nbytes)
    dev.launch(plan.function, plan.grid, plan.block, plan.kernarg((x_d, w_d, 0, y_d, rows, k, stride)))
    s = dev.last_launch_stats
    return {"kernel": name, "rows_per_group": r, "meta": meta, "stats": s,
            "loaded": s.bytes_loaded["global"] / groups, "stored": s.bytes_stored["global"] / groups,
            "valu": (s.instructions["valu"] + s.instructions["trans"]) / groups,
            "instructions": {c: v / groups for c, v in s.instructions.items()}, "rate": s.rate}


def python_overhead_us(repeats: int = 2000) -> float:
    """CPU time of one gemv call on device-resident operands, device work excluded."""
    from hipskinny.devices.base import Device, DeviceProperties

    class NullDevice(Device):
        kind = "null"
        properties = DeviceProperties("null", "gfx942", 304, 65536, 64, 1 << 34)

        def alloc(self, n): return 0x1000
        def free(self, p): pass
        def copy_to_device(self, d, s, n, stream=0): pass
        def copy_to_host(self, d, s, n, stream=0): pass
        def memset(self, p, v, n, stream=0): pass
        def load_module(self, image): return "module"
        def get_function(self, module, name): return name
        def launch(self, fn, grid, block, kernarg, shared_mem=0, stream=0): pass
        def synchronize(self, stream=0): pass

    dev = NullDevice()
    x = np.ones((1, 4096), np.float16)
    w = np.ones((8, 4096), np.float16)        # host staging is a no-op on this device
    with hipskinny.on_device(dev):
        hipskinny.gemv(x, w)
        start = time.perf_counter()
        for _ in range(repeats):
            hipskinny.gemv(x, w)
        return (time.perf_counter() - start) / repeats * 1e6


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", nargs="+", default=list(SHIPPED_ARCHS))
    p.add_argument("--dtype", default="f16", choices=list(DTYPES))
    p.add_argument("--json")
    p.add_argument("--check-linear", action="store_true")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    rows = []
    print(f"{'arch':8} {'model/layer':28} {'M':>7} {'K':>6} {'kernel':14} {'traffic':>8} {'VALU/B':>8} "
          f"{'balance':>8} {'occ':>4} {'pred µs':>8} {'/floor':>6}")
    for arch in args.arch:
        info = ARCHS[arch]
        cu = info.default_cu_count
        for model_name, layer, m, k in SHAPES:
            s = measure(arch, m, k, dtype, SAMPLE_GROUPS)
            if args.check_linear:
                s2 = measure(arch, m, k, dtype, 2 * SAMPLE_GROUPS)
                assert s2["loaded"] == s["loaded"] and s2["valu"] == s["valu"], "per-group counts not linear"
            r = s["rows_per_group"]
            groups = -(-m // r)
            moved = int(s["loaded"] * groups + 2 * m)
            minimum = 2 * (m * k + k + m)
            valu = int(s["valu"] * groups)
            pred = predict(info, cu, moved, minimum, valu)
            meta = s["meta"]
            occ = info.occupancy(meta.vgpr_count, meta.group_segment_fixed_size, op.THREADS // info.wave_size)
            row = {"arch": arch, "model": model_name, "layer": layer, "M": m, "K": k, "kernel": s["kernel"],
                   "bytes_moved": moved, "bytes_min": minimum, "traffic_ratio": pred.traffic_ratio,
                   "valu_per_byte": valu / moved, "balance_point": balance_point(info, cu), "occupancy": occ,
                   "predicted_us": pred.seconds * 1e6, "floor_ratio": pred.floor_ratio,
                   "emulator_rate": s["rate"]}
            rows.append(row)
            print(f"{arch:8} {model_name + '/' + layer:28} {m:7} {k:6} {s['kernel']:14} "
                  f"{pred.traffic_ratio:8.3f} {valu / moved:8.4f} {row['balance_point']:8.4f} {occ:4} "
                  f"{pred.seconds * 1e6:8.1f} {pred.floor_ratio:6.2f}", flush=True)
    overhead = python_overhead_us()
    print(f"Python-side cost of one gemv call (host operands, null device): {overhead:.1f} µs")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "python_us_per_call": overhead}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
