"""HipDevice — the path real users run — with real results: the fake libamdhip64 hands
every launch to the emulator, so allocations, copies, module loads and launches go
through hip-python and the HIP C API, and the numbers that come back are computed."""

from __future__ import annotations

import json

import paths
import pytest

TESTS = str(paths.TESTS)

SCENARIO = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, ml_dtypes, hipskinny
from fakehip.emulated import install
runtime = install()
rng = np.random.default_rng(3)
out = {{}}
for name, dtype in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
    x = rng.standard_normal((1, 1000)).astype(dtype)
    w = (rng.standard_normal((77, 1000)) / 30).astype(dtype)
    b = rng.standard_normal(77).astype(dtype)
    y = hipskinny.gemv(x, w, b)
    exact = w.astype(np.float64) @ x.astype(np.float64).ravel() + b.astype(np.float64)
    scale = np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)).ravel() + np.abs(b.astype(np.float64))
    out[name] = {{"err_over_scale": float(np.max(np.abs(y.astype(np.float64).ravel() - exact) / scale)),
                  "dtype": str(y.dtype), "shape": list(y.shape)}}
stats = runtime.device.last_launch_stats
out["launches"] = len(runtime.device.launches)
out["errors"] = runtime.errors
out["kernel"] = stats.kernel
out["loaded"] = stats.bytes_loaded["global"]
print("OUT", json.dumps(out))
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100", "gfx1201"])
def test_gemv_through_hip_runs_on_the_emulator(fakehip_run, hip_python, arch):
    run = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "8"},
                      hip_python=hip_python)
    out = json.loads(run.stdout.split("OUT ", 1)[1])
    assert out["errors"] == [] and out["launches"] == 2
    # fp32 accumulation of K=1000 products + one rounding: relative to sum|w x| the error is at
    # most (K + 1) * 2**-24 plus half an output ulp (2**-11 fp16, 2**-8 bf16) of a value <= sum|w x|.
    assert out["f16"]["err_over_scale"] <= 1001 * 2.0**-24 + 2.0**-10
    assert out["bf16"]["err_over_scale"] <= 1001 * 2.0**-24 + 2.0**-7
    assert out["f16"]["shape"] == [1, 77] and out["bf16"]["dtype"] == "bfloat16"
    assert out["kernel"].startswith("gemv_bf16_") and out["loaded"] >= 77 * 1000 * 2
