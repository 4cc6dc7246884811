"""fp8_linear on GPU-resident operands through HipDevice: the fake libamdhip64 carries out the
launches on the emulator, so the in-place path (strides, alignment, the GPU layout rules,
scales in place, scratch from the pool) is exercised with real results."""

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
from hipskinny import fp8, scratch
from hipskinny.devices import hip_device
from hipskinny.ops.fp8_linear import fp8_linear_exact

runtime = install()
rng = np.random.default_rng(5)
res = {{}}
m, k = 50, 1040
w = rng.standard_normal((m, k)).astype(np.float32)
for gran in ("channel", "block"):
    w8, ws = fp8.quantize(w, granularity=gran, flavor="ocp")
    wd, _ = dev_array(w8, row_stride=k + 16)
    wsd, _ = dev_array(ws)
    for n in (4, 24):
        x = rng.standard_normal((n, k)).astype(np.float16)
        xd, _ = dev_array(x, row_stride=k + 8)
        outs = []
        for _ in range(2):
            od, obase = dev_array(np.zeros((n, m), np.float16))
            assert hipskinny.fp8_linear(xd, wd, wsd, out=od) is od
            outs.append(read(obase, (n, m)))
        exact = fp8_linear_exact(x, w8, ws)
        res[gran + str(n)] = {{"err": float(np.max(np.abs(outs[0] - exact) / (np.abs(exact) + 1))),
                               "repeat_equal": bool((outs[0].view(np.uint16) == outs[1].view(np.uint16)).all()),
                               "kernel": runtime.device.last_launch_stats.kernel}}

pool = scratch.pool(hip_device(0), 0)
if pool.capacity("fp8_linear.counters"):
    cnt = np.frombuffer(ctypes.string_at(pool.buffer("fp8_linear.counters", 4), pool.capacity("fp8_linear.counters")),
                        np.uint32)
    res["counters_zero"] = bool((cnt == 0).all())

w8, ws = fp8.quantize(w, granularity="channel", flavor="ocp")
x = rng.standard_normal((4, k)).astype(np.float16)
o = dev_array(np.zeros((4, m), np.float16))[0]
wsd = dev_array(ws)[0]
res["k_not_16"] = outcome(lambda: hipskinny.fp8_linear(dev_array(x[:, :1032], 1040)[0],
                                                       dev_array(w8[:, :1032], 1040)[0], wsd, out=o))
res["w_stride"] = outcome(lambda: hipskinny.fp8_linear(dev_array(x)[0], dev_array(w8, k + 8)[0], wsd, out=o))
res["misaligned"] = outcome(lambda: hipskinny.fp8_linear(dev_array(x)[0], dev_array(w8, offset=8)[0], wsd, out=o))
res["host_scale"] = outcome(lambda: hipskinny.fp8_linear(dev_array(x)[0], dev_array(w8)[0], ws, out=o))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_device_operands_in_place(fakehip_run, arch):
    run = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "4"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    for gran in ("channel", "block"):
        for n, kernel in (("4", "fp8_linear_f16_ocp"), ("24", "fp8_linear_splitk_f16_ocp")):
            r = res[gran + n]
            # Half an fp16 ulp of the result (<= 2**-11 relative) plus the fp32 sums' error, well
            # below 2**-10 of |exact| + 1 at K = 1040 (the emulated tests bound it exactly).
            assert r["err"] <= 2.0**-10, (gran, n, r)
            assert r["repeat_equal"], (gran, n)
            assert r["kernel"].startswith(kernel + ("_block" if gran == "block" else "")), r["kernel"]
    assert res["counters_zero"]
    assert res["k_not_16"].startswith("InputValueError") and "K must be a multiple of 16" in res["k_not_16"]
    assert res["w_stride"].startswith("InputValueError")
    assert "w's row stride must be a multiple of 16" in res["w_stride"]
    assert res["misaligned"].startswith("InputValueError") and "16-byte aligned" in res["misaligned"]
    assert res["host_scale"].startswith("DeviceMismatchError")
