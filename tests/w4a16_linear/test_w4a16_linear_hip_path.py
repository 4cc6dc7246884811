"""w4a16_linear on GPU-resident operands through HipDevice: the fake libamdhip64 carries out the
launches on the emulator, so the in-place path (the prepared arrays in place, x's row stride, the
dequantize route's pooled weights and its two launches, the layout rules) runs with real
results."""

from __future__ import annotations

import json

import paths
import pytest

TESTS = str(paths.TESTS)

SCENARIO = """
import ctypes, dataclasses, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from hipskinny.ops import _splitk; _splitk.PARTIAL_SHARE = 1e9   # small shapes keep their shards
from device_arrays import dev_array, outcome, read
from hipskinny import scratch, w4a16
from hipskinny.devices import hip_device
from fakehip.emulated import install
from hipskinny.ops.w4a16_linear import w4a16_linear_reference

runtime = install()
rng = np.random.default_rng(5)
res = {{}}


def layer(m, k, g, fmt, symmetric, act_order):
    gs = k if g == -1 else g
    codes = rng.integers(0, 16, (m, k))
    lo = 1 if fmt == "gptq" else 0
    zeros = None if symmetric else rng.integers(lo, lo + 16, (m, k // gs))
    scales = rng.uniform(-0.02, 0.02, (m, k // gs)).astype(np.float16)
    g_idx = (rng.permutation(k) // gs).astype(np.int32) if act_order else None
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt=fmt, group_size=g, g_idx=g_idx)
    return ckpt, w4a16.prepare(**ckpt, fmt=fmt, group_size=g)


def on_device(p):
    d = lambda a: None if a is None else dev_array(a)[0]
    return dataclasses.replace(p, qweight=d(p.qweight), scales=d(p.scales), zeros=d(p.zeros), perm=d(p.perm))


# (name, N, M, K, group size, fmt, symmetric, act-order): fused (lane-split, N <= 8; split-K with
# act-order and shards, N = 24); the route at N = 70 with act-order (split-K, shards), and at N = 3
# with per-channel scales of a K that is no power of two.
for name, n, m, k, g, fmt, sym, act in (("fused", 4, 40, 512, 128, "gptq", False, True),
                                        ("fused_splitk", 24, 40, 1024, 64, "gptq_v2", False, True),
                                        ("route_n", 70, 40, 2048, 64, "gptq", False, True),
                                        ("route_k", 3, 24, 200, -1, "awq", False, False)):
    ckpt, p = layer(m, k, g, fmt, sym, act)
    pd = on_device(p)
    x = rng.standard_normal((n, k)).astype(np.float16)
    bias = rng.standard_normal(m).astype(np.float16)
    xd, bd = dev_array(x, row_stride=k + 8)[0], dev_array(bias)[0]
    outs = []
    for _ in range(2):
        od, obase = dev_array(np.zeros((n, m), np.float16))
        assert w4a16.linear(xd, pd, bd, out=od) is od
        outs.append(read(obase, (n, m)))
    exact = w4a16_linear_reference(x, **ckpt, fmt=fmt, group_size=g, bias=bias)
    w = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=g)
    s = np.abs(x.astype(np.float64)) @ np.abs(w).T + np.abs(bias.astype(np.float64))
    # fp16 weights (the route: 2**-11 relative each), fp32 sums ((K + 10) * 2**-24), half an fp16
    # ulp of the result; the fused kernel is well inside it.
    bound = (2.0**-11 + (k + 10) * 2.0**-24) * s + 2.0**-11 * np.abs(exact) + 2.0**-25
    res[name] = {{"err": float(np.max(np.abs(outs[0] - exact) / bound)),
                  "repeat_equal": bool((outs[0].view(np.uint16) == outs[1].view(np.uint16)).all()),
                  "kernels": [s.kernel for s in list(runtime.device.launches)[-2:]]}}

pool = scratch.pool(hip_device(0), 0)
for slot in ("w4a16_linear.counters", "skinny_gemm.counters"):
    size = pool.capacity(slot)
    counters = np.frombuffer(ctypes.string_at(pool.buffer(slot, 4), size), np.uint32) if size else None
    res[slot] = counters is not None and bool((counters == 0).all())

ckpt, p = layer(16, 256, 64, "gptq_v2", True, False)
pd = on_device(p)
x = rng.standard_normal((200, 256)).astype(np.float16)
res["n_200"] = outcome(lambda: w4a16.linear(dev_array(x)[0], pd, out=dev_array(np.zeros((200, 16), np.float16))[0]))
res["misaligned"] = outcome(lambda: w4a16.linear(dev_array(x[:12], row_stride=264, offset=8)[0], pd,
                                                 out=dev_array(np.zeros((12, 16), np.float16))[0]))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx950", "gfx1151"])
def test_device_operands_in_place(fakehip_run, arch):
    run = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "4"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    for name, kernels in (("fused", ["w4a16_linear_f16_n4"]), ("fused_splitk", ["w4a16_linear_splitk_f16_t2"]),
                          ("route_n", ["w4a16_linear_dequantize_f16", "skinny_gemm_splitk_f16_t8"]),
                          ("route_k", ["w4a16_linear_dequantize_f16", "skinny_gemm_f16_n3"])):
        r = res[name]
        # err: |y - exact| over a bound that holds for both (the emulated tests bound each exactly).
        assert r["err"] <= 1.0, (name, r)
        assert r["repeat_equal"], name
        assert all(got.startswith(want) for got, want in zip(r["kernels"][-len(kernels):], kernels, strict=True)), r
    # the split-K calls (fused and the route's skinny_gemm) left their counters ready for the next
    assert res["w4a16_linear.counters"] and res["skinny_gemm.counters"]
    assert res["n_200"].startswith("InputValueError") and "N = 1..128" in res["n_200"]
    assert res["misaligned"].startswith("InputValueError") and "16-byte aligned" in res["misaligned"]


TORCH_SCENARIO = """
import dataclasses, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, hipskinny
from fakehip.emulated import install
from fakehip.torch_seam import dev, empty
from hipskinny import operands, w4a16
from hipskinny.ops.w4a16_linear import w4a16_linear_reference

runtime = install()


def on_device(a):
    return None if a is None else dev(a)         # absent arrays (symmetric: no zeros) stay absent


operands.present_cpu_torch_as_gpu(0, None, empty)
rng = np.random.default_rng(7)
n, m, k, g = 130, 24, 256, 64
codes = rng.integers(0, 16, (m, k))
zeros = rng.integers(1, 17, (m, k // g))
scales = rng.uniform(-0.02, 0.02, (m, k // g)).astype(np.float16)
g_idx = (rng.permutation(k) // g).astype(np.int32)
ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt="gptq", group_size=g, g_idx=g_idx)
p = w4a16.prepare(**ckpt, fmt="gptq", group_size=g)
pd = dataclasses.replace(p, qweight=on_device(p.qweight.view(np.int32)), scales=on_device(p.scales),
                         zeros=on_device(p.zeros), perm=on_device(p.perm))
x = rng.standard_normal((n, k)).astype(np.float16)
bias = rng.standard_normal((n, m)).astype(np.float16)
y = w4a16.linear(on_device(x), pd, on_device(bias))
exact = w4a16_linear_reference(x, **ckpt, fmt="gptq", group_size=g, bias=bias)
w = w4a16.dequantize_checkpoint(**ckpt, fmt="gptq", group_size=g)
s = np.abs(x.astype(np.float64)) @ np.abs(w).T + np.abs(bias.astype(np.float64))
# fp16 weights, torch's CPU fp16 matmul (fp32 sums), half an fp16 ulp of the result
bound = (2.0**-11 + (k + 10) * 2.0**-24) * s + 2.0**-11 * np.abs(exact) + 2.0**-25
res = {{"err": float(np.max(np.abs(y.numpy().astype(np.float64) - exact) / bound)), "shape": list(y.shape),
        "kernels": [l.kernel for l in runtime.device.launches], "errors": runtime.errors}}
print("RES", json.dumps(res))
"""


def test_torch_tensors_above_128_tokens_take_f_linear(fakehip_run):
    """N > 128 on torch ROCm tensors (CPU tensors over fake device memory, through the test
    seam): the dequantize kernel (act-order undone), then torch.nn.functional.linear."""
    run = fakehip_run(TORCH_SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx1201", "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == [] and res["shape"] == [130, 24]
    assert res["kernels"] == ["w4a16_linear_dequantize_f16"]
    assert res["err"] <= 1.0, res


BAD_PERM = """
import dataclasses, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from device_arrays import dev_array, outcome, read
from hipskinny import w4a16
from fakehip.emulated import install

runtime = install()
rng = np.random.default_rng(11)
m, k, g = 16, 256, 64
codes = rng.integers(0, 16, (m, k))
zeros = rng.integers(1, 17, (m, k // g))
scales = rng.uniform(-0.02, 0.02, (m, k // g)).astype(np.float16)
g_idx = (rng.permutation(k) // g).astype(np.int32)
ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt="gptq", group_size=g, g_idx=g_idx)
p = w4a16.prepare(**ckpt, fmt="gptq", group_size=g)
bad = p.perm.copy()
bad[[0, 5, 9, 17, 30, 200]] = [-1, k, 2**30, -(2**31), 2**31 - 1, -7]
d = lambda a: dev_array(a)[0]
pd = dataclasses.replace(p, qweight=d(p.qweight), scales=d(p.scales), zeros=d(p.zeros), perm=d(bad))
wp = w4a16.dequantize_checkpoint(**ckpt, fmt="gptq", group_size=g)[:, p.perm]   # prepared column order
res = {{"errors_before": list(runtime.errors)}}
for name, n, fused in (("lane_split", 2, None), ("splitk", 12, None), ("route", 3, False)):
    x = rng.standard_normal((n, k)).astype(np.float16)
    od, obase = dev_array(np.zeros((n, m), np.float16))
    got = outcome(lambda: w4a16.linear(dev_array(x, row_stride=k + 8)[0], pd, out=od, fused=fused))
    y = read(obase, (n, m)).astype(np.float64)
    # the documented rule: an entry outside [0, K) reads column K - 1
    xg = x[:, np.minimum(bad.view(np.uint32), k - 1)].astype(np.float64)
    want = xg @ wp.T
    # as above: split-K rounds each weight to fp16, fp32 sums, half an fp16 ulp of the result
    bound = (2.0**-11 + (k + 10) * 2.0**-24) * (np.abs(xg) @ np.abs(wp).T) + 2.0**-11 * np.abs(want) + 2.0**-25
    launched = list(runtime.device.launches)
    res[name] = {{"outcome": got, "kernel": launched[-1].kernel if launched else None,
                  "err": float(np.max(np.abs(y - want) / bound))}}
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"])
def test_device_perm_out_of_range_is_clamped_not_faulting(fakehip_run, arch):
    """A GPU-resident perm is not checked (no sync): every kernel clamps an entry outside [0, K)
    to K - 1 (negative ones too), so nothing reads or writes outside x or the pooled weights.
    The fused kernels then read x's column K - 1 for it; the route's result is unspecified."""
    run = fakehip_run(BAD_PERM.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == [], res["errors"][0]
    for name, kernel in (("lane_split", "w4a16_linear_f16_n2"), ("splitk", "w4a16_linear_splitk_f16_t1"),
                         ("route", "skinny_gemm_f16_n3")):
        assert res[name]["outcome"] == "ok" and res[name]["kernel"].startswith(kernel), (name, res[name])
    assert res["lane_split"]["err"] <= 1.0 and res["splitk"]["err"] <= 1.0, res
