"""sparse_mla (as `hipskinny.mla.sparse_decode`, its first name) on GPU-resident operands through HipDevice
on the fake HIP runtime (launches run on
the emulator): q with padded head and token strides, caches with padded block strides, out and
lse written in place, as DLPack device arrays; and a HIP-graph capture with torch tensors (the
test seam) replayed after the lists changed on the device (other lengths, other slots), which must
give the new lists' result: the split count and everything else the launch fixes come from host
shapes only."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import paths
import pytest
from test_sparse_mla import _case, assert_close

TESTS = str(paths.TESTS)
BF16 = np.dtype(ml_dtypes.bfloat16)

DLPACK = """
import ctypes, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, ml_dtypes, hipskinny
from device_arrays import dev_alloc, dev_nd, dev_strided, dev_strided_at, outcome, strided_span
from fakehip.emulated import install
from test_sparse_mla import _case

# The allocator's order, made deterministic: the two cache blocks come lower address first
# ("ascending", glibc's usual order) or higher first ("descending", which it does at times).
_alloc, _pending = dev_alloc, []


def dev_alloc(size):
    if not _pending:
        _pending.extend(sorted((_alloc(size) for _ in range(2)), reverse={heap!r} == "ascending"))
    return _pending.pop()


runtime = install()
rng = np.random.default_rng(21)
q, c0, i0, p0, kw = _case(rng, "v4", 3, 18, [40, 0, 70], [9, 33, 1], bs0=61, pad=80, fp8=("fnuz", "ocp"), sink=True)
t, h = 3, 18
qpad = np.zeros((t, h + 1, 528), q.dtype)
qpad[:, :h, :512] = q
qd = dev_strided(qpad[:, :h, :512])[0]
# the extra cache below the SWA cache (rows are addressed from the lower of the two), whatever
# order the allocator hands out addresses in
blocks = [dev_alloc(max(strided_span(c0), strided_span(kw["extra_cache"]))) for _ in range(2)]
lo, hi = sorted(blocks)
c1d, c1addr = dev_strided_at(kw["extra_cache"], lo)
c0d, c0addr = dev_strided_at(c0, hi)
res0 = {{"extra_below": c1addr < c0addr, "heap": "ascending" if blocks[0] < blocks[1] else "descending"}}
i0d, p0d = dev_nd(i0)[0], dev_nd(p0)[0]
i1d, p1d = dev_nd(kw["extra_indices"])[0], dev_nd(kw["extra_indptr"])[0]
sd = dev_nd(kw["sink"])[0]
res = {{"o": [], "lse": [], **res0}}
for _ in range(2):
    od, obase = dev_nd(np.zeros((t, h, 512), ml_dtypes.bfloat16))
    ld, lbase = dev_nd(np.zeros((t, h), np.float32))
    got = hipskinny.mla.sparse_decode(qd, c0d, i0d, p0d, extra_cache=c1d, extra_indices=i1d, extra_indptr=p1d,
                                      sink=sd, scale=512 ** -0.5, fp8=("fnuz", "ocp"), out=(od, ld), return_lse=True)
    assert got[0] is od and got[1] is ld
    res["o"].append(np.frombuffer(ctypes.string_at(obase, 2 * t * h * 512), np.uint16).tolist())
    res["lse"].append(np.frombuffer(ctypes.string_at(lbase, 4 * t * h), np.float32).tolist())
res["kernels"] = [s.kernel for s in list(runtime.device.launches)[-1:]]
mis = dev_strided(qpad[:, :h, :512], offset=8)[0]
res["misaligned"] = outcome(lambda: hipskinny.mla.sparse_decode(
    mis, c0d, i0d, p0d, scale=0.1, out=dev_nd(np.zeros((t, h, 512), ml_dtypes.bfloat16))[0]))
c1mis = dev_strided(kw["extra_cache"], offset=8)[0]
res["misaligned_extra"] = outcome(lambda: hipskinny.mla.sparse_decode(
    qd, c0d, i0d, p0d, extra_cache=c1mis, extra_indices=i1d, extra_indptr=p1d, scale=0.1,
    out=dev_nd(np.zeros((t, h, 512), ml_dtypes.bfloat16))[0]))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


@pytest.mark.parametrize("heap", ["ascending", "descending"])
def test_device_operands_strided_and_in_place(fakehip_run, heap):
    """Issue 55: the extra cache must lie below the SWA cache whichever order the allocator hands
    out addresses in (placing them in allocation order failed when it handed out the higher first);
    both orders are forced here, so neither depends on the heap."""
    run = fakehip_run(DLPACK.format(tests=TESTS, heap=heap), env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "3"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["heap"] == heap
    assert res["errors"] == [] and res["kernels"] == ["sparse_mla_v4_wide"] and res["extra_below"]
    assert res["o"][0] == res["o"][1] and res["lse"][0] == res["lse"][1]
    rng = np.random.default_rng(21)
    q, c0, i0, p0, kw = _case(rng, "v4", 3, 18, [40, 0, 70], [9, 33, 1], bs0=61, pad=80, fp8=("fnuz", "ocp"),
                              sink=True)
    o = np.array(res["o"][0], np.uint16).view(BF16).reshape(3, 18, 512)
    lse = np.array(res["lse"][0], np.float32).reshape(3, 18)
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", ("fnuz", "ocp"))
    assert "q and the caches must start at 16-byte aligned addresses" in res["misaligned"]
    assert "q and the caches must start at 16-byte aligned addresses" in res["misaligned_extra"]
    assert not run.calls("hipMemcpyAsync", "hipMemcpy")     # GPU operands: nothing staged


WRONG_INDPTR = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from device_arrays import dev_nd, dev_strided, outcome
from fakehip.emulated import install
from test_sparse_mla import _case

runtime = install()
rng = np.random.default_rng(9)
q, c0, i0, p0, kw = _case(rng, "v4", 2, 3, [5, 5], [2, 3])
qd, c0d, i0d = dev_nd(q)[0], dev_strided(c0)[0], dev_nd(i0)[0]
c1d, i1d, p1 = dev_strided(kw["extra_cache"])[0], dev_nd(kw["extra_indices"])[0], kw["extra_indptr"]


def call(swa_indptr, extra_indptr=p1):
    return outcome(lambda: hipskinny.mla.sparse_decode(qd, c0d, i0d, dev_nd(swa_indptr)[0], extra_cache=c1d,
                                                       extra_indices=i1d, extra_indptr=dev_nd(extra_indptr)[0],
                                                       scale=0.1))


res = {{"short": call(p0[:-1]), "long": call(np.append(p0, p0[-1]).astype(np.int32)), "2-d": call(p0.reshape(-1, 1)),
        "extra_short": call(p0, p1[:-1]), "float32": call(p0.astype(np.float32)),
        "launches": len(runtime.device.launches), "errors": runtime.errors}}
print("RES", json.dumps(res))
"""


def test_device_resident_indptr_of_wrong_length_is_a_value_error(fakehip_run):
    """Issue 55: a GPU-resident int32 indptr that is not [T + 1] is refused with InputValueError (it
    was InputTypeError), before any launch; a wrong dtype stays an InputTypeError."""
    run = fakehip_run(WRONG_INDPTR.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx942"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["launches"] == 0 and res["errors"] == []
    for case, ptr, shape in (("short", "swa", "(2,)"), ("long", "swa", "(4,)"), ("2-d", "swa", "(3, 1)"),
                             ("extra_short", "extra", "(2,)")):
        assert res[case] == (f"InputValueError: sparse_mla: {ptr}_indptr must be int32 [T + 1] = [3]; "
                             f"got int32 {shape}"), (case, res[case])
    assert res["float32"].startswith("InputTypeError: sparse_mla: swa_indptr must be int32 [T + 1] = [3]; "
                                     "got float32"), res["float32"]


CAPTURE = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, torch, hipskinny
from hip import hip
from fakehip.emulated import install
from test_sparse_mla import _case
from fakehip.scenario import ok
from fakehip.torch_seam import Capture, dev

cap = Capture()
runtime = install()
rng = np.random.default_rng(31)
q, c0, i0, p0, kw = _case(rng, "v4", 2, 16, [150, 60], bs0=64)
c0 = np.ascontiguousarray(c0)                 # torch.frombuffer: a contiguous cache
i0_b = np.concatenate([i0[:3], i0[3 + 150:], i0[3:3 + 150][::-1]]).astype(np.int32)   # token 0 <-> 1
p0_b = np.array([3, 63, 213], np.int32)
tq, tc, ti, tp = dev(q), dev(c0), dev(i0), dev(p0)
tout = dev(np.zeros((2, 16, 512), q.dtype))
cap.current = cap.stream
# 3 splits (split_count picks 1 at this size): the merge and its counters replay too
hipskinny.mla.sparse_decode(tq, tc, ti, tp, scale=0.05, out=tout, splits=3)   # warm-up on the capture stream
ok(hip.hipStreamSynchronize(cap.stream))
eager_a = tout.view(torch.int16).numpy().copy()
tout.zero_()
graph = cap.capture(lambda: hipskinny.mla.sparse_decode(tq, tc, ti, tp, scale=0.05, out=tout, splits=3))
res = {{"captured_not_run": bool(float(tout.float().abs().max()) == 0)}}
cap.replay(graph)
res["replay_a_equal"] = bool((tout.view(torch.int16).numpy() == eager_a).all())
ti.copy_(torch.from_numpy(i0_b))                                             # new lists, same graph
tp.copy_(torch.from_numpy(p0_b))
cap.replay(graph)
res["o_b"] = tout.view(torch.int16).numpy().astype(np.uint16).tolist()
cap.current = 0
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def test_captured_call_follows_the_lists_on_replay(fakehip_run):
    run = fakehip_run(CAPTURE.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx1151", "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    assert res["captured_not_run"] and res["replay_a_equal"]
    rng = np.random.default_rng(31)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 16, [150, 60], bs0=64)
    i0_b = np.concatenate([i0[:3], i0[3 + 150:], i0[3:3 + 150][::-1]]).astype(np.int32)
    p0_b = np.array([3, 63, 213], np.int32)
    o = np.array(res["o_b"], np.uint16).view(BF16).reshape(2, 16, 512)
    assert_close(o, None, q, np.ascontiguousarray(c0), i0_b, p0_b, kw, "v4", scale=0.05)


BAD_LISTS = """
import ctypes, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, ml_dtypes, hipskinny
from device_arrays import dev_nd, dev_strided
from fakehip.emulated import install
from test_sparse_mla import _case

runtime = install()
rng = np.random.default_rng(41)
q, c0, i0, p0, kw = _case(rng, "v4", 3, 4, [20, 9, 30], [5, 6, 7], bs0=16)
res = {{"o": []}}
for p0_bad, p1_bad in {cases!r}:
    od, obase = dev_nd(np.zeros((3, 4, 512), ml_dtypes.bfloat16))
    hipskinny.mla.sparse_decode(dev_strided(q)[0], dev_strided(c0)[0], dev_nd(i0)[0],
                                dev_nd(np.array(p0_bad, np.int32))[0], extra_cache=dev_strided(kw["extra_cache"])[0],
                                extra_indices=dev_nd(kw["extra_indices"])[0],
                                extra_indptr=dev_nd(np.array(p1_bad, np.int32))[0], scale=0.05, out=od)
    res["o"].append(np.frombuffer(ctypes.string_at(obase, 2 * 3 * 4 * 512), np.uint16).tolist())
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def _clipped(idx: np.ndarray, ptr: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The lists the kernel reads from a device-resident indptr: each range clipped to [0, len(idx)]."""
    clip = [min(max(p, 0), len(idx)) for p in ptr]
    parts = [idx[a:max(a, b)] for a, b in zip(clip[:-1], clip[1:], strict=True)]
    lens = np.cumsum([0] + [len(p) for p in parts])
    return np.concatenate(parts).astype(np.int32), lens.astype(np.int32)


@pytest.mark.parametrize("arch", ["gfx950", "gfx1201"])
def test_device_lists_that_leave_their_buffers_are_clipped(fakehip_run, arch):
    """indptr entries before the index array, past its end and decreasing, on the GPU (unchecked by the
    host): the kernel clips each token's range to the array and never reads outside it (the emulator
    bounds-checks every access), giving the clipped lists' result."""
    rng = np.random.default_rng(41)
    q, c0, i0, p0, kw = _case(rng, "v4", 3, 4, [20, 9, 30], [5, 6, 7], bs0=16)
    n0, n1 = len(i0), len(kw["extra_indices"])
    cases = [([-4, 2, 9, n0 + 1000], [0, 5, 11, 18]),                  # before the start, past the end
             ([-2**31, -7, 2**31 - 1, 2**31 - 1], [n1 + 3, 2, -1, n1])]   # extremes, decreasing
    run = fakehip_run(BAD_LISTS.format(tests=TESTS, cases=cases), env={"FAKEHIP_ARCH": arch, "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    for (p0_bad, p1_bad), o in zip(cases, res["o"], strict=True):
        i0c, p0c = _clipped(i0, p0_bad)
        i1c, p1c = _clipped(kw["extra_indices"], p1_bad)
        kwc = {**kw, "extra_indices": i1c, "extra_indptr": p1c}
        o = np.array(o, np.uint16).view(BF16).reshape(3, 4, 512)
        assert_close(o, None, q, c0, i0c, p0c, kwc, "v4", scale=0.05)
