"""matmul_4bit on GPU-resident operands through HipDevice: the fake libamdhip64 carries out the
launches on the emulator, so the in-place path (the state's arrays in place, x's row stride,
the dequantize route's pooled weights and its two launches, the layout rules) runs with real
results."""

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
from hipskinny import scratch
from hipskinny.devices import hip_device
from fakehip.emulated import install
from hipskinny import bnb
from hipskinny.ops.matmul_4bit import dequantize_exact, matmul_4bit_reference

runtime = install()
rng = np.random.default_rng(5)
res = {{}}


def on_device(st):
    s2 = st.state2
    d = lambda a: dev_array(np.asarray(a).reshape(-1))[0]
    return bnb.QuantState(d(st.absmax), st.shape, d(st.code), st.blocksize, st.quant_type, st.dtype,
                          None if s2 is None else d(st.offset),
                          None if s2 is None else bnb.QuantState(d(s2.absmax), None, d(s2.code), 256, None, None))


# (name, N, M, K, blocksize): fused (lane-split, split-K); K not a multiple of the blocksize
# (route, small N); N = 70 (route, split-K); "direct": N = 40 with the split-K kernels' _direct
# variant where built (forced), K = 544 (its last group's lanes past K), x's row padding all inf
# (read by those lanes, it would make every output NaN).
for name, n, m, k, bs in (("fused", 4, 40, 512, 64), ("fused_splitk", 24, 40, 512, 64), ("route_k", 3, 30, 200, 64),
                          ("route_n", 70, 40, 256, 64), ("direct", 40, 130, 544, 32)):
    _splitk.DIRECT_TRIPS = 0 if name == "direct" else 16
    w = rng.standard_normal((m, k)).astype(np.float32)
    packed, st = bnb.quantize_4bit(w, blocksize=bs, quant_type="nf4", compress_statistics=True)
    x = rng.standard_normal((n, k)).astype(np.float16)
    bias = rng.standard_normal(m).astype(np.float16)
    (xd, xbase), pad = dev_array(x, row_stride=k + 8), np.full(8, np.inf, np.float16)
    for r in range(n - 1):
        ctypes.memmove(xbase + 2 * (r * (k + 8) + k), pad.ctypes.data, 16)
    std, wd, bd = on_device(st), dev_array(packed)[0], dev_array(bias)[0]
    outs = []
    for _ in range(2):
        od, obase = dev_array(np.zeros((n, m), np.float16))
        assert bnb.matmul_4bit(xd, wd, std, bd, out=od) is od
        outs.append(read(obase, (n, m)))
    exact = matmul_4bit_reference(x, packed, st, bias)
    s = np.abs(x.astype(np.float64)) @ np.abs(dequantize_exact(packed, st)).T + np.abs(bias.astype(np.float64))
    # fp16 weights (the route: 2**-11 relative each), fp32 sums and decoding ((K + 10) * 2**-24),
    # half an fp16 ulp of the result.
    bound = (2.0**-11 + (k + 10) * 2.0**-24) * s + 2.0**-11 * np.abs(exact) + 2.0**-25
    res[name] = {{"err": float(np.max(np.abs(outs[0] - exact) / bound)),
                  "repeat_equal": bool((outs[0].view(np.uint16) == outs[1].view(np.uint16)).all()),
                  "kernels": [s.kernel for s in list(runtime.device.launches)[-2:]]}}

pool = scratch.pool(hip_device(0), 0)
size = pool.capacity("matmul_4bit.counters")
counters = np.frombuffer(ctypes.string_at(pool.buffer("matmul_4bit.counters", 4), size), np.uint32) if size else None
res["counters_zero"] = counters is not None and bool((counters == 0).all())

m, k = 16, 100
w = rng.standard_normal((m, k)).astype(np.float32)
packed, st = bnb.quantize_4bit(w, blocksize=64, quant_type="fp4", compress_statistics=False)
std, wd = on_device(st), dev_array(packed)[0]
x = rng.standard_normal((200, k)).astype(np.float16)
res["k_not_8"] = outcome(lambda: bnb.matmul_4bit(dev_array(x[:12], row_stride=104)[0], wd, std,
                                                 out=dev_array(np.zeros((12, m), np.float16))[0]))
res["n_200"] = outcome(lambda: bnb.matmul_4bit(dev_array(x, row_stride=104)[0], wd, std,
                                               out=dev_array(np.zeros((200, m), np.float16))[0]))
res["misaligned"] = outcome(lambda: bnb.matmul_4bit(dev_array(x[:2], row_stride=104, offset=8)[0], wd, std,
                                                    out=dev_array(np.zeros((2, m), np.float16))[0]))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1201"])
def test_device_operands_in_place(fakehip_run, arch):
    run = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "4"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    direct = "matmul_4bit_splitk_f16_t4_s2_direct" if arch == "gfx942" else "matmul_4bit_splitk_f16_t4"
    for name, kernels in (("fused", ["matmul_4bit_f16_n4"]), ("fused_splitk", ["matmul_4bit_splitk_f16_t2"]),
                          ("route_k", ["dequantize_4bit_f16", "skinny_gemm_f16_n3"]),
                          ("route_n", ["dequantize_4bit_f16", "skinny_gemm_splitk_f16_t8"]), ("direct", [direct])):
        r = res[name]
        # err: |y - exact| over a bound that holds for both (the emulated tests bound each exactly).
        assert r["err"] <= 1.0, (name, r)
        assert r["repeat_equal"], name
        assert all(got.startswith(want) for got, want in zip(r["kernels"][-len(kernels):], kernels, strict=True)), r
    assert res["counters_zero"]      # the split-K call left its counters ready for the next
    assert res["k_not_8"].startswith("InputValueError") and "nor of 8" in res["k_not_8"]
    assert res["n_200"].startswith("InputValueError") and "N = 1..128" in res["n_200"]
    assert res["misaligned"].startswith("InputValueError") and "16-byte aligned" in res["misaligned"]


TORCH_SCENARIO = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, hipskinny
from fakehip.emulated import install
from fakehip.torch_seam import dev, empty
from hipskinny import bnb, operands
from hipskinny.ops.matmul_4bit import dequantize_exact, matmul_4bit_reference

runtime = install()
operands.present_cpu_torch_as_gpu(0, None, empty)
rng = np.random.default_rng(7)
n, m, k = 130, 24, 192
w = rng.standard_normal((m, k)).astype(np.float32)
packed, st = bnb.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
x = rng.standard_normal((n, k)).astype(np.float16)
bias = rng.standard_normal((n, m)).astype(np.float16)
y = torch.ops.hipskinny.matmul_4bit(dev(x), dev(packed), dev(st.absmax), dev(st.code), 64, [m, k],
                                    absmax2=dev(st.state2.absmax), code2=dev(st.state2.code),
                                    offset=dev(np.asarray(st.offset, np.float32).reshape(1)), bias=dev(bias))
exact = matmul_4bit_reference(x, packed, st, bias)
s = np.abs(x.astype(np.float64)) @ np.abs(dequantize_exact(packed, st)).T + np.abs(bias.astype(np.float64))
# fp16 weights, torch's CPU fp16 matmul (fp32 sums), half an fp16 ulp of the result
bound = (2.0**-11 + (k + 10) * 2.0**-24) * s + 2.0**-11 * np.abs(exact) + 2.0**-25
res = {{"err": float(np.max(np.abs(y.numpy().astype(np.float64) - exact) / bound)), "shape": list(y.shape),
        "kernels": [l.kernel for l in runtime.device.launches], "errors": runtime.errors}}
print("RES", json.dumps(res))
"""


def test_torch_tensors_above_128_tokens_take_f_linear(fakehip_run):
    """N > 128 on torch ROCm tensors (CPU tensors over fake device memory, through the test
    seam): the dequantize kernel, then torch.nn.functional.linear."""
    run = fakehip_run(TORCH_SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx1100", "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == [] and res["shape"] == [130, 24]
    assert res["kernels"] == ["dequantize_4bit_f16"]
    assert res["err"] <= 1.0, res
