"""fused_moe on GPU-resident operands through HipDevice on the fake HIP runtime (launches run on
the emulator): the prepared int4 stacks, x with padded rows and out in place as DLPack device
arrays; and a HIP-graph capture with torch tensors (the test seam) replayed after the routing
changed on the device, which must give the new routing's result: nothing of a call's routing
is decided on the host."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import paths
import pytest
from test_fused_moe import _experts16, _routing, _stack, assert_moe

TESTS = str(paths.TESTS)

DLPACK = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from device_arrays import dev_array, dev_nd, outcome, read
from fakehip.emulated import install
from test_fused_moe import _stack, _routing
from hipskinny.ops import fused_moe as op

runtime = install()
e, k, h, i, n = 8, 2, 128, 64, 3
_, p13, _ = _stack(e, 2 * i, h, 64, "awq", False, False, np.float16, seed=1)
_, p2, _ = _stack(e, h, i, 32, "gptq", True, True, np.float16, seed=2)
d13, d2 = p13.map(lambda a: dev_nd(a)[0]), p2.map(lambda a: dev_nd(a)[0])
x = np.random.default_rng(3).standard_normal((n, h)).astype(np.float16)
tw, ids = _routing(n, k, e, seed=4)
xd = dev_array(x, row_stride=h + 16)[0]
twd, idd = dev_nd(tw)[0], dev_nd(ids)[0]
res = {{"y": []}}
for _ in range(2):
    od, obase = dev_array(np.zeros((n, h), np.float16))
    assert hipskinny.moe.fused_moe(xd, d13, d2, twd, idd, out=od) is od
    res["y"].append(read(obase, (n, h)).view(np.uint16).tolist())
res["kernels"] = [s.kernel for s in list(runtime.device.launches)[-3:]]
res["misaligned"] = outcome(lambda: hipskinny.moe.fused_moe(dev_array(x, row_stride=h + 16, offset=8)[0], d13, d2,
                                                            twd, idd, out=dev_array(np.zeros((n, h), np.float16))[0]))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def test_device_operands_in_place(fakehip_run):
    run = fakehip_run(DLPACK.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx1201", "FAKEHIP_CU_COUNT": "3"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    assert res["kernels"] == ["fused_moe_route", "fused_moe_gemm1_f16_w4_n2", "fused_moe_gemm2_f16_w4_n2_s2"]
    assert res["y"][0] == res["y"][1]
    e, k, h, i, n = 8, 2, 128, 64, 3
    w13, _, _ = _stack(e, 2 * i, h, 64, "awq", False, False, np.float16, seed=1)
    w2, _, _ = _stack(e, h, i, 32, "gptq", True, True, np.float16, seed=2)
    x = np.random.default_rng(3).standard_normal((n, h)).astype(np.float16)
    tw, ids = _routing(n, k, e, seed=4)
    y = np.array(res["y"][0], np.uint16).view(np.float16)
    assert_moe(y, x, w13, w2, tw, ids, int4=(True, True))
    assert "16-byte aligned" in res["misaligned"]
    assert not run.calls("hipMemcpyAsync", "hipMemcpy")     # GPU operands: nothing staged


CAPTURE = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, hipskinny
from hip import hip
from fakehip.emulated import install
from test_fused_moe import _experts16
from fakehip.scenario import ok
from fakehip.torch_seam import Capture, dev

cap = Capture()
runtime = install()
e, k, h, i, n = 8, 2, 64, 32, 4
w13, w2 = _experts16(e, h, i, np.float16, seed=5)
x = np.random.default_rng(6).standard_normal((n, h)).astype(np.float16)
tw = np.random.default_rng(7).uniform(0.1, 1, (n, k)).astype(np.float32)
ids_a = np.array([[0, 1], [2, 3], [0, 4], [5, 1]], np.int32)
ids_b = np.array([[7, 6], [6, 6], [-1, 3], [7, 2]], np.int32)
tx, t13, t2, ttw, tids, tout = dev(x), dev(w13), dev(w2), dev(tw), dev(ids_a), dev(np.zeros((n, h), np.float16))
cap.current = cap.stream
hipskinny.moe.fused_moe(tx, t13, t2, ttw, tids, out=tout)            # warm-up on the capture stream
ok(hip.hipStreamSynchronize(cap.stream))
eager_a = tout.numpy().copy()
tout.zero_()
graph = cap.capture(lambda: hipskinny.moe.fused_moe(tx, t13, t2, ttw, tids, out=tout))
res = {{"captured_not_run": bool(float(tout.abs().max()) == 0)}}
cap.replay(graph)
res["replay_a_equal"] = bool((tout.numpy().view(np.uint16) == eager_a.view(np.uint16)).all())
tids.copy_(torch.from_numpy(ids_b))                                   # new routing, same graph
cap.replay(graph)
res["y_b"] = tout.numpy().view(np.uint16).tolist()
cap.current = 0
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def test_captured_call_follows_the_routing_on_replay(fakehip_run):
    run = fakehip_run(CAPTURE.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    assert res["captured_not_run"] and res["replay_a_equal"]
    e, k, h, i, n = 8, 2, 64, 32, 4
    w13, w2 = _experts16(e, h, i, np.float16, seed=5)
    x = np.random.default_rng(6).standard_normal((n, h)).astype(np.float16)
    tw = np.random.default_rng(7).uniform(0.1, 1, (n, k)).astype(np.float32)
    ids_b = np.array([[7, 6], [6, 6], [-1, 3], [7, 2]], np.int32)
    y = np.array(res["y_b"], np.uint16).view(np.float16)
    assert_moe(y, x, w13.astype(np.float64), w2.astype(np.float64), tw, ids_b)


BAD_LISTS = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from device_arrays import dev_array, dev_nd, outcome, read
from fakehip.emulated import install
from test_fused_moe_hip_path import bad_lists
from hipskinny.ops import fused_moe as op

runtime = install()
x, p13, p2, tw, ids = bad_lists()[:5]
d13, d2 = p13.map(lambda a: dev_nd(a)[0]), p2.map(lambda a: dev_nd(a)[0])
od, obase = dev_array(np.zeros(x.shape, np.float16))
res = {{"outcome": outcome(lambda: hipskinny.moe.fused_moe(dev_array(x)[0], d13, d2, dev_nd(tw)[0], dev_nd(ids)[0],
                                                          out=od))}}
res["y"] = read(obase, x.shape).view(np.uint16).tolist()
res["invalid"] = op.invalid_slots()
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def bad_lists():
    """x, int4 act-order stacks whose perm rows hold entries outside [0, K) for the routed experts
    1 and 2, topk weights, ids with four outside [0, E); and the float64 weights the documented
    rule amounts to (an entry outside [0, K) reads column K - 1 of x / act)."""
    e, k, h, i, n = 4, 2, 64, 64, 3
    dense, prepared = [], []
    for rows, kdim, seed, breaks in ((2 * i, h, 41, {1: {0: -1, 5: h, 9: 2**30}, 2: {3: -(2**31), 40: 2**31 - 1}}),
                                     (h, i, 42, {1: {2: i, 63: -5}, 2: {1: 2**30}})):
        w, p, _ = _stack(e, rows, kdim, 32, "gptq", False, True, np.float16, seed=seed)
        perm = p.perm.copy()
        for ex, entries in breaks.items():
            perm[ex, list(entries)] = list(entries.values())
        eff = np.zeros_like(w)
        for ex in range(e):
            # prepared column j carries checkpoint column p.perm[ex, j] and multiplies x[clamp(perm[ex, j])]
            np.add.at(eff[ex].T, np.minimum(perm[ex].view(np.uint32), kdim - 1), w[ex][:, p.perm[ex]].T)
        dense.append(eff)
        prepared.append(dataclasses.replace(p, perm=perm))
    x = np.random.default_rng(43).standard_normal((n, h)).astype(np.float16)
    tw = np.random.default_rng(44).uniform(0.1, 1, (n, k)).astype(np.float32)
    ids = np.array([[1, -1], [e, 2], [2**30, -(2**31)]], np.int32)
    return x, prepared[0], prepared[1], tw, ids, dense[0], dense[1]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"])
def test_device_bad_perm_and_ids_do_not_fault(fakehip_run, arch):
    """GPU-resident lists are not checked (no sync): ids outside [0, E) are skipped and counted,
    perm entries outside [0, K) clamped to K - 1, and nothing is read outside a buffer."""
    run = fakehip_run(BAD_LISTS.format(tests=TESTS), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == [], res["errors"][0]
    assert res["outcome"] == "ok" and res["invalid"] == 4
    x, _, _, tw, ids, w13, w2 = bad_lists()
    y = np.array(res["y"], np.uint16).view(np.float16)
    assert np.all(y[2] == 0)
    assert_moe(y, x, w13, w2, tw, ids, int4=(True, True))
