"""``hipskinny demo``: one GEMV at a real decode shape, checked against the numpy reference."""

from __future__ import annotations

import time

import numpy as np

from .devices import current_device, emulator_available, on_device, parse_device
from .devices.hip import hip_runtime_status
from .errors import HipSkinnyError

# Qwen3-30B-A3B router (M=128, K=2048): a real decode GEMV small enough for the emulator.
DEMO_M, DEMO_K = 128, 2048


def run_demo(spec: str | None = None) -> int:
    from .ops.gemv import gemv, gemv_reference

    try:
        device = parse_device(spec) if spec else _default_device()
    except HipSkinnyError as e:
        print(f"demo not run: {e}")
        return 2
    if device is None:
        status = hip_runtime_status()
        print("demo not run: no AMD GPU here (" + (status.get("problem") or "none found") + ") and the CPU "
              "emulator is not part of this installation yet, so there is nothing to run the kernels on.")
        return 0
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, DEMO_K)).astype(np.float16)
    w = (rng.standard_normal((DEMO_M, DEMO_K)) / np.sqrt(DEMO_K)).astype(np.float16)
    try:
        with on_device(device):
            start = time.perf_counter()
            y = gemv(x, w)
            seconds = time.perf_counter() - start
    except HipSkinnyError as e:     # a chosen GPU without a runtime: one message, no traceback
        print(f"demo not run on {spec or 'the default device'}: {e}")
        return 2
    ref = gemv_reference(x, w).astype(np.float64)
    err = np.abs(y.astype(np.float64) - ref)
    # fp32 accumulation of K products, then one fp16 rounding (see tests/test_gemv_emulated.py).
    scale = np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)).ravel()
    bound = (DEMO_K + 1) * 2.0**-24 * scale + 2.0**-10 * (np.abs(ref).ravel() + scale)
    ok = bool(np.all(err.ravel() <= bound))
    print(f"gemv fp16 M={DEMO_M} K={DEMO_K} on {device.label} ({device.properties.cu_count} CUs): "
          f"max |y - reference| = {err.max():.3g}; within the fp32-accumulation bound: {'yes' if ok else 'NO'}; "
          f"{seconds * 1e3:.1f} ms wall")
    stats = getattr(device, "last_launch_stats", None)
    if stats is not None:
        print(f"launch stats: {stats}")
    return 0 if ok else 1


def _default_device():  # -> Device | None
    status = hip_runtime_status()
    if status.get("device_count", 0) > 0 or emulator_available():
        return current_device()
    return None
