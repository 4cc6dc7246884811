"""skinny_gemm on GPU-resident tensors through HipDevice: the fake libamdhip64 carries out
the launches on the emulator, so the in-place path (strides, alignment, bias rows, out=,
scratch from the pool of the device) is exercised with real results."""

from __future__ import annotations

import json

import paths
import pytest

TESTS = str(paths.TESTS)

SCENARIO = """
import ctypes, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from hipskinny.ops import _splitk; _splitk.PARTIAL_SHARE = 1e9   # small shapes keep their shards
from device_arrays import dev_array, outcome, read
from fakehip.emulated import install
from hipskinny import scratch
from hipskinny.devices import hip_device

runtime = install()

def err_over_scale(y, x, w, b):
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    exact = x64 @ w64.T + b64
    scale = np.abs(x64) @ np.abs(w64).T + np.abs(b64)
    return float(np.max(np.abs(y.astype(np.float64) - exact) / scale))

rng = np.random.default_rng(5)
res = {{}}
for n in (4, 24):
    m, k = 50, 1040
    x = rng.standard_normal((n, k)).astype(np.float16)
    w = (rng.standard_normal((m, k)) / 30).astype(np.float16)
    b = rng.standard_normal((n, m)).astype(np.float16)
    xd, _ = dev_array(x, row_stride=k + 16)
    wd, _ = dev_array(w, row_stride=k + 8)
    bd, _ = dev_array(b, row_stride=m + 6)
    outs = []
    for _ in range(2):
        od, obase = dev_array(np.zeros((n, m), np.float16))
        r = hipskinny.skinny_gemm(xd, wd, bd, out=od)
        assert r is od
        outs.append(read(obase, (n, m)))
    res[n] = {{"err_over_scale": err_over_scale(outs[0], x, w, b),
               "repeat_equal": bool((outs[0].view(np.uint16) == outs[1].view(np.uint16)).all()),
               "kernel": runtime.device.last_launch_stats.kernel}}

pool = scratch.pool(hip_device(0), 0)
if pool.capacity("skinny_gemm.counters"):
    cnt = np.frombuffer(ctypes.string_at(pool.buffer("skinny_gemm.counters", 4), pool.capacity("skinny_gemm.counters")),
                        np.uint32)
    res["counters_zero"] = bool((cnt == 0).all())
    res["shards"] = True

x, w = rng.standard_normal((24, 1036)).astype(np.float16), rng.standard_normal((8, 1036)).astype(np.float16)
o = np.zeros((24, 8), np.float16)
res["k_tail"] = outcome(lambda: hipskinny.skinny_gemm(dev_array(x, 1040)[0], dev_array(w, 1040)[0],
                                                      out=dev_array(o)[0]))
res["misaligned"] = outcome(lambda: hipskinny.skinny_gemm(dev_array(x[:, :1032])[0],
                                                          dev_array(w[:, :1032], offset=8)[0], out=dev_array(o)[0]))
res["host_mix"] = outcome(lambda: hipskinny.skinny_gemm(x[:, :1032], dev_array(w[:, :1032])[0]))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_device_tensors_in_place(fakehip_run, arch):
    run = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "4"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    # fp32 accumulation of K = 1040 products and the bias, one rounding to fp16 (see
    # tests/skinny_gemm/test_skinny_gemm.py): relative to sum |x w| + |b| at most (K + 1) 2**-24 + 2**-10.
    for n, kernel in (("4", "skinny_gemm_f16_n4_"), ("24", "skinny_gemm_splitk_f16_t2")):
        assert res[n]["err_over_scale"] <= 1041 * 2.0**-24 + 2.0**-10, n
        assert res[n]["repeat_equal"], n
        assert res[n]["kernel"].startswith(kernel), res[n]["kernel"]
    assert res.get("shards") and res["counters_zero"]        # the split-K call used counters, left zero
    assert res["k_tail"].startswith("InputValueError") and "multiple of 8" in res["k_tail"]
    assert "N = 1..128" in res["k_tail"]
    assert res["misaligned"].startswith("InputValueError") and "16-byte aligned" in res["misaligned"]
    assert res["host_mix"].startswith("DeviceMismatchError")
