"""hipskinny.moe.topk_softmax on the emulator for every shipped arch, against the numpy reference.

Ids must equal the reference's exactly: the logits are drawn without replacement from values at
least 1e-3 apart (so the probabilities of two experts differ by a factor >= e**1e-3, far beyond
the rounding below), except in the tests of exact ties, where equal logits give bitwise equal
probabilities in kernel and reference alike.

Weight tolerance (derived, not tuned), relative to the exact softmax of the fp32-widened logits,
u = 2**-24, d_i = x_i - max, D = max |d_j| over the row's finite d_j:
  fl(x_i - max) is off by |d_i| u relative, which exp turns into |d_i| u relative; expf itself is
  within 2 ulp (4 u); the fp32 sum of E non-negative terms in any order is within (E - 1) u plus
  the terms' own errors (<= (D + 4) u); the division adds u:
      p_i within (|d_i| + D + E + 8) u, taken as c_i = (|d_i| + D + E + 10) u (second-order slack).
  Renormalized: the sum of the k picks adds (k - 1) u and its terms' errors (<= max c), the
  division u: w_j within c_j + max_sel c + (k + 2) u.
"""

from __future__ import annotations

import functools
import json

import ml_dtypes
import numpy as np
import paths
import pytest

import hipskinny
from hipskinny import InputTypeError, InputValueError
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import topk_softmax as op

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
DTYPES = [F16, BF16, F32]
IDS = ["f16", "bf16", "f32"]
U = 2.0**-24
FULL_ARCH = "gfx1201"           # the whole matrix; the other archs a subset (below)
ES, KS, NS = (8, 16, 60, 128, 257, 512), (1, 2, 4, 8, 16), (1, 3, 33)
TESTS = str(paths.TESTS)


@functools.cache
def _dev(arch: str, cus: int = 2, seed: int | None = None) -> EmulatedDevice:
    return EmulatedDevice(arch, cus, seed=seed)


@functools.cache
def _pool(dt: np.dtype) -> np.ndarray:
    """Values of dt (fp32: those of fp16) in [-6, 6], at least 1e-3 apart."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    with np.errstate(invalid="ignore"):
        v = np.unique(bits.view(F16 if dt == F32 else dt).astype(np.float64))
    v = v[np.isfinite(v) & (np.abs(v) <= 6)]
    keep, last = [], -np.inf
    for x in v:
        if x - last >= 1e-3:
            keep.append(x)
            last = x
    return np.array(keep)


def logits(n: int, e: int, dt: np.dtype, seed: int) -> np.ndarray:
    """[n, e] of dt, each row E distinct pool values in random order."""
    rng = np.random.default_rng(seed)
    pool = _pool(dt)
    return np.stack([rng.choice(pool, e, replace=False) for _ in range(n)]).astype(dt)


def run(arch: str, x, k: int, renorm: bool, **kw):
    with hipskinny.on_device(kw.pop("dev", None) or _dev(arch)):
        return hipskinny.moe.topk_softmax(x, k, renorm, **kw)


def assert_topk(x, k: int, renorm: bool, w, ids) -> None:
    """ids equal the reference's; weights within the bound of the module docstring (NaN rows: NaN
    weights, ids 0..k-1)."""
    n, e = x.shape
    assert w.shape == ids.shape == (n, k) and w.dtype == F32 and ids.dtype == np.int32
    assert w.flags.c_contiguous and ids.flags.c_contiguous
    rw, ri = op.topk_softmax_reference(x, k, renorm)
    np.testing.assert_array_equal(ids, ri)
    assert ((ids >= 0) & (ids < e)).all()
    x64 = np.asarray(x).astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = x64 - x64.max(axis=1, keepdims=True)
    nan_row = np.isnan(d).any(axis=1)
    assert np.isnan(w[nan_row]).all() and (ids[nan_row] == np.arange(k)).all()
    ok = ~nan_row
    d, w, ids = d[ok], w[ok].astype(np.float64), ids[ok]
    ex = np.exp(d)
    p = ex / ex.sum(axis=1, keepdims=True)
    ad = np.where(np.isfinite(d), np.abs(d), 0.0)
    c = (ad + ad.max(axis=1, keepdims=True) + e + 10) * U
    exact, cs = np.take_along_axis(p, ids, axis=1), np.take_along_axis(c, ids, axis=1)
    if renorm:
        exact = exact / exact.sum(axis=1, keepdims=True)
        cs = cs + cs.max(axis=1, keepdims=True) + (k + 2) * U
    bad = ~(np.abs(w - exact) <= cs * exact)
    assert not bad.any(), f"{bad.sum()} off, first at {np.argwhere(bad)[0]}: {w[bad][0]} vs {exact[bad][0]}"


def _matrix():
    """Every (dtype, E, k <= E), with N and renormalize cycling so that each dtype meets every
    (N, renormalize) pair."""
    cases, i = [], 0
    for dt in DTYPES:
        for e in ES:
            for k in KS:
                if k <= e:
                    cases.append((dt, e, k, NS[i % 3], bool(i // 3 % 2)))
                    i += 1
    return cases


def test_full_matrix_on_one_arch():
    for i, (dt, e, k, n, renorm) in enumerate(_matrix()):
        x = logits(n, e, dt, seed=i)
        w, ids = run(FULL_ARCH, x, k, renorm)
        assert_topk(x, k, renorm, w, ids)


# (dtype, E, k, N, renormalize) on the other archs: the E that change V on wave64 (and wave32),
# k = 1 and 16, both N regimes (one group and several), both renormalize modes, every dtype.
SUBSET = [(F16, 8, 8, 3, True), (BF16, 60, 4, 33, False), (F32, 128, 16, 1, True),
          (BF16, 257, 2, 3, True), (F16, 512, 16, 33, False), (F32, 512, 1, 3, False)]


@pytest.mark.parametrize("arch", [a for a in SHIPPED_ARCHS if a != FULL_ARCH])
def test_subset_on_other_archs(arch):
    for i, (dt, e, k, n, renorm) in enumerate(SUBSET):
        x = logits(n, e, dt, seed=100 + i)
        w, ids = run(arch, x, k, renorm)
        assert_topk(x, k, renorm, w, ids)
        info = op.plan_info(_dev(arch), dt, n, e, k)
        wave = ARCHS[arch].wave_size
        assert info["kernel"] == f"topk_softmax_{op._TAG[dt]}_v{op.values_per_lane(e, wave)}"
        assert info["grid"] == -(-n // (256 // wave))


def special_rows(e: int, dt: np.dtype) -> np.ndarray:
    """Rows: all equal; a tie of the maximum at ids 7, 33, e - 10 and of the next value at 40, 5, 2;
    only three finite logits; a NaN; all -inf; a +inf; plain distinct values."""
    x = logits(7, e, dt, seed=e).astype(np.float64)
    x[0] = 0.0
    x[1, [e - 10, 7, 33]] = 7.0
    x[1, [40, 5, 2]] = 6.5
    x[2] = -np.inf
    x[2, [40, 5, e - 1]] = [1.0, 3.0, -2.0]
    x[3, 11] = np.nan
    x[4] = -np.inf
    x[5, e // 2] = np.inf
    return x.astype(dt)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_ties_and_non_finite(arch):
    e, k = 60, 8
    for j, renorm in enumerate((False, True)):
        dt = DTYPES[(SHIPPED_ARCHS.index(arch) + j) % 3]
        x = special_rows(e, dt)
        w, ids = run(arch, x, k, renorm)
        assert_topk(x, k, renorm, w, ids)
        # The rules spelled out (the reference follows them too):
        assert (ids[0] == np.arange(k)).all() and (w[0] == np.float32(1 / k if renorm else 1 / e)).all()
        assert list(ids[1, :3]) == [7, 33, e - 10] and w[1, 0] == w[1, 1] == w[1, 2]
        assert list(ids[1, 3:6]) == [2, 5, 40] and w[1, 3] == w[1, 4] == w[1, 5] < w[1, 0]
        assert list(ids[2]) == [5, 40, e - 1, 0, 1, 2, 3, 4] and (w[2, 3:] == 0).all() and (w[2, :3] > 0).all()
        for r in (3, 4, 5):                                      # NaN, all -inf, +inf: no softmax
            assert np.isnan(w[r]).all() and (ids[r] == np.arange(k)).all()
        assert not np.isnan(w[[0, 1, 2, 6]]).any()


def test_ties_and_non_finite_wide_rows():
    for arch in ("gfx942", "gfx1151"):                  # E = 512: V = 8 (wave64), 16 (wave32)
        x = special_rows(512, F32)
        w, ids = run(arch, x, 16, True)
        assert_topk(x, 16, True, w, ids)
        assert list(ids[1, :6]) == [7, 33, 502, 2, 5, 40] and list(ids[2, :5]) == [5, 40, 511, 0, 1]


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_bitwise_reproducible(arch):
    x = logits(33, 257, BF16, seed=7)
    outs = []
    for cus, seed in ((1, None), (3, 3)):                # different CU counts, a shuffled wave schedule
        dev = EmulatedDevice(arch, cus, seed=seed)
        for _ in range(2):
            w, ids = run(arch, x, 16, True, dev=dev)
            outs.append((w.view(np.uint32).copy(), ids.copy()))
    for w, ids in outs[1:]:
        np.testing.assert_array_equal(w, outs[0][0])
        np.testing.assert_array_equal(ids, outs[0][1])


def test_out_pair_and_strided_host_rows():
    base = logits(5, 140, F16, seed=3)
    x = base[::2, 4:132]                                 # [3, 128], rows 280 apart: staged contiguous
    w_out, i_out = np.full((3, 4), -1.0, F32), np.full((3, 4), -1, np.int32)
    w, ids = run("gfx1100", x, 4, False, out=(w_out, i_out))
    assert w is w_out and ids is i_out
    assert_topk(np.ascontiguousarray(x), 4, False, w, ids)
    w0, i0 = run("gfx1100", np.zeros((0, 16), F32), 2, True)   # no rows: empty results
    assert w0.shape == i0.shape == (0, 2) and w0.dtype == F32 and i0.dtype == np.int32


def test_bad_input_messages():
    x = np.zeros((2, 16), F16)
    with hipskinny.on_device(_dev("gfx1100")):
        f = hipskinny.moe.topk_softmax
        with pytest.raises(InputTypeError, match="router_logits has dtype float64; supported: float16, bfloat16, "
                                                 "float32"):
            f(x.astype(np.float64), 2)
        with pytest.raises(InputValueError, match=r"router_logits must be 2-D \[N, E\]; got shape \(16,\)"):
            f(x[0], 2)
        with pytest.raises(InputValueError, match=r"E=513 experts; supported: E = 1..512"):
            f(np.zeros((1, 513), F16), 2)
        with pytest.raises(InputValueError, match=r"E=0 experts; supported: E = 1..512"):
            f(np.zeros((1, 0), F16), 1)
        with pytest.raises(InputValueError, match=r"k=0; supported: k = 1..min\(16, E\) = 1..16"):
            f(x, 0)
        with pytest.raises(InputValueError, match=r"k=17; supported: k = 1..min\(16, E\) = 1..16"):
            f(np.zeros((2, 40), F16), 17)
        with pytest.raises(InputValueError, match=r"k=9; supported: k = 1..min\(16, E\) = 1..8"):
            f(np.zeros((2, 8), F16), 9)
        with pytest.raises(InputTypeError, match="router_logits is None; expected an"):
            f(None, 2)
        with pytest.raises(InputTypeError, match="router_logits: expected a numpy array"):
            f([[1.0, 2.0]], 1)
        with pytest.raises(InputTypeError, match="k must be an int; got float"):
            f(x, 2.0)
        with pytest.raises(InputTypeError, match="k must be an int; got bool"):
            f(x, True)
        with pytest.raises(InputTypeError, match="renormalize must be a bool; got int"):
            f(x, 2, 1)
        with pytest.raises(InputTypeError, match="out must be a pair"):
            f(x, 2, out=np.zeros((2, 2), F32))
        with pytest.raises(InputTypeError, match="out must be a pair"):
            f(x, 2, out=(np.zeros((2, 2), F32), None))
        with pytest.raises(InputValueError, match=r"out\[0\] \(topk_weights\) must be a writable contiguous "
                                                  r"float32 array of shape \(2, 2\); got float16 \(2, 2\)"):
            f(x, 2, out=(np.zeros((2, 2), F16), np.zeros((2, 2), np.int32)))
        with pytest.raises(InputValueError, match=r"out\[1\] \(topk_ids\) must be a writable contiguous int32 "
                                                  r"array of shape \(2, 2\); got int32 \(2, 3\)"):
            f(x, 2, out=(np.zeros((2, 2), F32), np.zeros((2, 3), np.int32)))
        with pytest.raises(InputValueError, match=r"out\[1\] \(topk_ids\) must be .* got int64"):
            f(x, 2, out=(np.zeros((2, 2), F32), np.zeros((2, 2), np.int64)))
        ro = np.zeros((2, 2), np.int32)
        ro.flags.writeable = False
        with pytest.raises(InputValueError, match=r"\(read-only\)"):
            f(x, 2, out=(np.zeros((2, 2), F32), ro))
        # numpy scalars are accepted as k / renormalize
        w, ids = f(x, np.int64(2), np.bool_(True))
        assert ids.tolist() == [[0, 1], [0, 1]] and (w == np.float32(0.5)).all()


SCENARIO = """
import ctypes, json, sys
sys.path.insert(0, {tests!r})
import numpy as np, ml_dtypes, hipskinny
from device_arrays import dev_array, outcome
from dlpack_helpers import DL_ROCM, HandMade
from fakehip.emulated import install

runtime = install()

def fetch(base, shape, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(ctypes.string_at(base, n), dtype).reshape(shape).copy()

rng = np.random.default_rng(4)
res = {{}}
for name, dt, e, k, renorm in (("f32", np.float32, 257, 8, True), ("bf16", ml_dtypes.bfloat16, 60, 16, False)):
    n = 5
    x = (rng.permutation(n * e).reshape(n, e) * 1e-2 - 3).astype(dt)    # distinct, 0.01 apart before rounding
    xd, _ = dev_array(x, row_stride=e + 13)                              # strided rows on the device
    runs = []
    for _ in range(2):
        wd, wbase = dev_array(np.zeros((n, k), np.float32))
        idd, ibase = dev_array(np.zeros((n, k), np.int32))
        w, ids = hipskinny.moe.topk_softmax(xd, k, renorm, out=(wd, idd))
        assert w is wd and ids is idd
        runs.append((fetch(wbase, (n, k), np.float32), fetch(ibase, (n, k), np.int32)))
    (w0, i0), (w1, i1) = runs
    res[name] = {{"x": x.astype(np.float32).tolist(), "k": k, "renorm": renorm, "w": w0.tolist(), "ids": i0.tolist(),
                 "repeat_equal": bool((w0.view(np.uint32) == w1.view(np.uint32)).all() and (i0 == i1).all()),
                 "kernel": runtime.device.last_launch_stats.kernel}}
_, base = dev_array(np.zeros((16, 3), np.float32))
res["no_out"] = outcome(lambda: hipskinny.moe.topk_softmax(dev_array(np.zeros((3, 16), np.float32))[0], 2))
columns = HandMade(None, base, (3, 16), (1, 3), code=2, bits=32, device=(DL_ROCM, 0))   # the transpose
res["column_stride"] = outcome(lambda: hipskinny.moe.topk_softmax(columns, 2))
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def test_device_tensors_in_place(fakehip_run):
    """GPU-resident logits with strided rows and out= pairs through HipDevice on the fake runtime."""
    run_ = fakehip_run(SCENARIO.format(tests=TESTS), env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "2"})
    res = json.loads(run_.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    for name, kernel in (("f32", "topk_softmax_f32_v8"), ("bf16", "topk_softmax_bf16_v1")):
        r = res[name]
        assert r["repeat_equal"] and r["kernel"] == kernel, (name, r["kernel"])
        assert_topk(np.array(r["x"], F32), r["k"], r["renorm"], np.array(r["w"], F32), np.array(r["ids"], np.int32))
    assert res["no_out"].startswith("InputTypeError") and "pass a preallocated out=" in res["no_out"]
    assert res["column_stride"].startswith("InputValueError") and "contiguous along E" in res["column_stride"]
