"""The production call path through HipDevice on the fake HIP runtime: torch tensors taking the GPU
path (the test seam `operands.present_cpu_torch_as_gpu`, their memory the fake runtime's device
memory), HIP-graph capture, and two GPUs of different archs driven from several threads.

Launches run on the CPU emulator through the fake's launch hook where results are checked, and
replayed graphs run there too, with the kernel arguments captured at capture time: a scratch
buffer freed or moved after the capture would fault or give wrong results.
"""

from __future__ import annotations

import json

import paths
import pytest
from fakehip import fnv1a64

from hipskinny import registry

TESTS = str(paths.TESTS)

COMMON = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, hipskinny
from hip import hip
from fakehip.scenario import ok
from fakehip.torch_seam import Capture, dev, empty

def device_tensor(a):
    # a torch CPU tensor over fake-runtime device memory holding a's values (fp16)
    return dev(np.asarray(a, np.float16))

def exact(x, w):
    return x.astype(np.float64) @ w.astype(np.float64).T

def err_over_scale(y, x, w):
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    return float(np.max(np.abs(y.numpy().astype(np.float64) - exact(x, w)) / scale))

def bound(k):
    # fp32 accumulation of K exact products, one rounding to fp16 (tests/skinny_gemm/test_skinny_gemm.py)
    return (k + 1) * 2.0**-24 + 2.0**-10

cap = Capture(empty)          # torch tensors take the GPU path, outputs in fake-device memory
print("MARK start", flush=True)
"""


def _code(template, **values):
    """The scenario with ``{name!r}`` / ``{name}`` filled (scenarios are full of braces, so no str.format)."""
    for name, value in values.items():
        template = template.replace("{" + name + "!r}", repr(value)).replace("{" + name + "}", str(value))
    return template


def _split(records, marker_fn="hipStreamBeginCapture", end_fn="hipStreamEndCapture"):
    begins = [i for i, r in enumerate(records) if r["fn"] == marker_fn]
    ends = [i for i, r in enumerate(records) if r["fn"] == end_fn]
    return [records[b + 1:e] for b, e in zip(begins, ends, strict=True)]


TORCH_PATH = COMMON + """
from fakehip.emulated import install
runtime = install()
rng = np.random.default_rng(1)
res = {}
for n, m, k in ((1, 40, 136), (4, 33, 264), (24, 150, 1024)):
    x = rng.standard_normal((n, k)).astype(np.float16)
    w = (rng.standard_normal((m, k)) / 16).astype(np.float16)
    xt, wt, ot = device_tensor(x), device_tensor(w), device_tensor(np.zeros((n, m)))
    y1 = hipskinny.skinny_gemm(xt, wt, out=ot)
    assert y1 is ot
    y2 = hipskinny.skinny_gemm(xt, wt)
    res[n] = {"err": err_over_scale(ot, x, w), "bound": bound(k), "same": bool(torch.equal(ot, y2)),
              "kernel": runtime.device.last_launch_stats.kernel, "type": type(y2).__name__}
xg = rng.standard_normal((1, 72)).astype(np.float16)
wg = rng.standard_normal((9, 72)).astype(np.float16)
yg = hipskinny.gemv(device_tensor(xg[0]), device_tensor(wg))
gscale = (np.abs(xg.astype(np.float64)) @ np.abs(wg.astype(np.float64)).T)[0]
res["gemv"] = {"err": float(np.max(np.abs(yg.numpy() - exact(xg, wg)[0]) / gscale)), "bound": bound(72)}
bad = device_tensor(np.zeros((1, 137)))[:, 1:]
try:
    hipskinny.skinny_gemm(bad, device_tensor(np.zeros((8, 136))))
    res["misaligned"] = "ok"
except hipskinny.InputValueError as e:
    res["misaligned"] = str(e)
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("arch", ["gfx950", "gfx1151"])
def test_torch_tensors_take_the_gpu_path(fakehip_run, arch):
    run = fakehip_run(_code(TORCH_PATH, tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "4"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    for n, kernel in (("1", "skinny_gemm_f16_n1_"), ("4", "skinny_gemm_f16_n4_"), ("24", "skinny_gemm_splitk_f16_t2")):
        assert res[n]["err"] <= res[n]["bound"], n
        assert res[n]["same"] and res[n]["type"] == "Tensor", n
        assert res[n]["kernel"].startswith(kernel), res[n]["kernel"]
    assert res["gemv"]["err"] <= res["gemv"]["bound"]
    assert "16-byte aligned" in res["misaligned"]
    launches = run.calls("hipModuleLaunchKernel")
    assert {r["stream"] for r in launches} == {0}
    assert not run.calls("hipMemcpyAsync", "hipMemcpy")       # GPU operands: nothing staged


CAPTURE = COMMON + """
from fakehip.emulated import install
runtime = install()
from hipskinny.ops import _splitk; _splitk.PARTIAL_SHARE = 1e9   # small shapes keep their shards
rng = np.random.default_rng(2)
def case(n, m, k):
    x = rng.standard_normal((n, k)).astype(np.float16)
    w = (rng.standard_normal((m, k)) / 16).astype(np.float16)
    return x, w, device_tensor(x), device_tensor(w), device_tensor(np.zeros((n, m)))

small = [case(1, 40, 264), case(4, 24, 128), case(20, 140, 640)]
gx, gw = rng.standard_normal(96).astype(np.float16), rng.standard_normal((12, 96)).astype(np.float16)
gxt, gwt, got = device_tensor(gx), device_tensor(gw), device_tensor(np.zeros(12))

def every_op(cases):
    for x, w, xt, wt, ot in cases:
        hipskinny.skinny_gemm(xt, wt, out=ot)
        hipskinny.skinny_gemm(xt, wt, deterministic=False, out=ot)
    hipskinny.gemv(gxt, gwt, out=got)

def results(cases):
    return [err_over_scale(ot, x, w) <= bound(x.shape[1]) for x, w, xt, wt, ot in cases]

def zero(cases):
    for *_, ot in cases:
        ot.zero_()
    got.zero_()

def run_scenario(scenario):
    if scenario == "replay":
        cap.current = cap.stream
        every_op(small)                                  # warm-up on the capture stream
        cap.current = 0
        zero(small)
        print("MARK capture", flush=True)
        g = cap.capture(lambda: every_op(small))
        print("MARK replay", flush=True)
        res["before_replay"] = [bool(float(ot.abs().max()) == 0) for *_, ot in small]
        cap.replay(g)
        res["after_replay"] = results(small)
    if scenario == "grow":
        cap.current = cap.stream
        every_op(small[:1])
        cap.current = 0
        big = [case(24, 160, 1024)]                      # split-K: needs partials
        ok(hip.hipStreamBeginCapture(cap.stream, hip.hipStreamCaptureMode.hipStreamCaptureModeGlobal))
        cap.current = cap.stream
        try:
            hipskinny.skinny_gemm(big[0][2], big[0][3], out=big[0][4])
            res["grow"] = "no error"
        except hipskinny.CaptureError as e:
            res["grow"] = str(e)
        cap.current = 0
        graph = ok(hip.hipStreamEndCapture(cap.stream))  # the capture was not broken by the refusal
        print("MARK reserve", flush=True)
        every_op(big)                                    # warm-up on the default stream ...
        res["reserved"] = hipskinny.reserve(cap.stream)               # ... then reserve the capture stream
        zero(big)
        g = cap.capture(lambda: every_op(big))
        cap.replay(g)
        res["after_reserve"] = results(big)
    if scenario == "two_sizes":
        cap.current = cap.stream
        every_op(small)
        cap.current = 0
        g1 = cap.capture(lambda: every_op(small))
        print("MARK grow", flush=True)
        bigger = small[:2] + [case(30, 200, 1024)]       # twice the partials of small[2]
        cap.current = cap.stream
        every_op(bigger)                                 # grows the partials: the old slot is retired
        cap.current = 0
        g2 = cap.capture(lambda: every_op(bigger))
        print("MARK replay", flush=True)
        zero(small)
        cap.replay(g1)
        res["g1"] = results(small)
        zero(bigger)
        cap.replay(g2)
        res["g2"] = results(bigger)


res = {}
for scenario in ("replay", "grow", "two_sizes"):
    cap.stream = int(ok(hip.hipStreamCreate()))     # each scenario captures on a stream of its own
    run_scenario(scenario)
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.fixture(scope="module", params=["10", "7"], ids=lambda gen: f"hip-python{gen}")
def captured(request, fakehip_run):
    """The three capture scenarios, run in one process per hip-python generation (each on a
    capture stream of its own): each scenario's part of the call log, and the results."""
    if request.param == "7":
        request.getfixturevalue("hip_python7")
    run = fakehip_run(_code(CAPTURE, tests=TESTS), hip_python=request.param,
                      env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "4"}, timeout=300)
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    begins = [i for i, r in enumerate(run.records) if r["fn"] == "hipStreamBeginCapture"]
    assert len(begins) == 5                           # replay 1, grow 2, two sizes 2
    parts = {"replay": run.records[:begins[1]], "grow": run.records[begins[1]:begins[3]],
             "two_sizes": run.records[begins[3]:], "all": run.records}
    return parts, res


def _live(records, ptr):
    """Is ``ptr`` inside an allocation that was made and never freed?"""
    allocs = {r["ptr"]: r["size"] for r in records if r["fn"] == "hipMalloc" and r["ret"] == 0}
    for r in records:
        if r["fn"] == "hipFree":
            allocs.pop(r["ptr"], None)
    return any(base <= ptr < base + size for base, size in allocs.items())


def test_capture_issues_only_launches_and_replays(captured):
    parts, res = captured
    (inside,) = _split(parts["replay"])
    assert inside and {r["fn"] for r in inside} == {"hipModuleLaunchKernel"}
    assert all(r.get("captured") and r["ret"] == 0 for r in inside)
    assert len(inside) == 3 * 2 + 1                   # every op of the warm-up, once each
    assert res["before_replay"] == [True, True, True]  # captured, not run
    assert res["after_replay"] == [True, True, True]


def test_growth_during_capture_is_a_clear_error(captured):
    parts, res = captured
    records = parts["grow"]
    assert "skinny_gemm.partials" in res["grow"] and "hipskinny.reserve" in res["grow"] and "warm up" in res["grow"]
    inside = _split(records)[0]
    assert not [r for r in inside if r["fn"] in ("hipMalloc", "hipFree", "hipMemsetAsync", "hipMemcpyAsync",
                                                 "hipStreamSynchronize", "hipDeviceSynchronize")]
    ends = [r for r in records if r["fn"] == "hipStreamEndCapture"]
    assert ends[0]["ret"] == 0
    assert res["reserved"]["skinny_gemm.partials"] > 0
    assert res["after_reserve"] == [True]
    second = _split(records)[1]
    assert {r["fn"] for r in second} == {"hipModuleLaunchKernel"}


def test_first_graph_scratch_survives_growth(captured):
    parts, res = captured
    first, second = _split(parts["two_sizes"])
    assert {r["fn"] for r in first} == {r["fn"] for r in second} == {"hipModuleLaunchKernel"}
    # The split-K launch of each graph: its partials and counters pointers (arguments 5 and 6).
    def scratch_of(records):
        splitk = [r for r in records if r["kernel"].startswith("skinny_gemm_splitk_f16_t2") and
                  not r["kernel"].endswith("_atomic")]
        kernarg = bytes.fromhex(splitk[-1]["kernarg"])
        return int.from_bytes(kernarg[32:40], "little"), int.from_bytes(kernarg[40:48], "little")
    p1, p2 = scratch_of(first), scratch_of(second)
    assert p1[0] != p2[0]                              # the second capture's partials slot grew
    assert all(_live(parts["all"], p) for p in (*p1, *p2))
    assert res["g1"] == [True, True, True] and res["g2"] == [True, True, True]


TWO_GPUS = """
import json, sys, threading
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from hip import hip
from dlpack_helpers import DL_ROCM, HandMade
from fakehip.scenario import ok

CALLS = {calls}

def on(ordinal, shape):
    ok(hip.hipSetDevice(ordinal))
    ptr = int(ok(hip.hipMalloc(2 * shape[0] * shape[1])))
    return HandMade(None, ptr, shape, (shape[1], 1), code=2, bits=16, device=(DL_ROCM, ordinal), version=(1, 0))

operands = {d: (on(d, (1, 256)), on(d, (64, 256)), on(d, (1, 64)), on(d, (16, 256)), on(d, (16, 64)))
            for d in (0, 1)}
ok(hip.hipSetDevice(0))
errors = []
start = threading.Barrier(4)

def gpu_worker(ordinal):
    x1, w, o1, x16, o16 = operands[ordinal]
    try:
        start.wait()
        for i in range(CALLS):
            if i % 4 == 3:
                hipskinny.skinny_gemm(x16, w, out=o16)
            else:
                hipskinny.skinny_gemm(x1, w, out=o1)
    except Exception as e:
        errors.append(repr(e))

def host_worker(ordinal):
    try:
        hipskinny.use_device(f"hip:{ordinal}")
        start.wait()
        for _ in range(20):
            hipskinny.gemv(np.ones(64, np.float16), np.ones((8, 64), np.float16))
    except Exception as e:
        errors.append(repr(e))

threads = [threading.Thread(target=gpu_worker, args=(d,)) for d in (0, 1)]
threads += [threading.Thread(target=host_worker, args=(d,)) for d in (0, 1)]
for t in threads: t.start()
for t in threads: t.join()
print("RES", json.dumps({"errors": errors, "current": int(ok(hip.hipGetDevice()))}))
"""


def test_two_gpus_many_threads(fakehip_run):
    calls = 1500
    run = fakehip_run(_code(TWO_GPUS, tests=TESTS, calls=calls),
                      env={"FAKEHIP_DEVICE_COUNT": "2", "FAKEHIP_ARCH": "gfx942,gfx1201", "FAKEHIP_CU_COUNT": "8,4"},
                      timeout=300)
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == [] and res["current"] == 0
    modules = {r["module"]: (r["device"], r["fnv1a64"]) for r in run.calls("hipModuleLoadData")}
    expect = {(d, fam): fnv1a64(registry.read_verified(arch, fam)[0])
              for d, arch in ((0, "gfx942"), (1, "gfx1201")) for fam in ("gemv", "skinny_gemm", "skinny_gemm_splitk")}
    launches = run.calls("hipModuleLaunchKernel")
    assert all(r["ret"] == 0 for r in launches)
    for d in (0, 1):
        mine = [r for r in launches if r["device"] == d]
        kernels = [r["kernel"] for r in mine]
        assert sum(k.startswith("skinny_gemm") for k in kernels) == calls          # none lost, none crossed
        assert sum(k.startswith("gemv") for k in kernels) == 20
        for r in mine:                   # every launch used a code object loaded on its own device
            dev, digest = modules[r["module"]]
            family = "skinny_gemm_splitk" if "splitk" in r["kernel"] else r["kernel"].split("_f16")[0]
            assert dev == d and digest == expect[(d, family)], r["kernel"]
