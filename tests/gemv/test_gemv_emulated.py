"""The GEMV code objects of every shipped arch, executed on the emulator, against exact math.

Tolerance (derived, not tuned). The kernel forms each 16-bit product exactly in fp32
and accumulates K of them (plus the bias) in fp32 in some fixed order. Each of the
<= K + 1 additions rounds once, so with u = 2**-24 the fp32 sum s satisfies
|s - exact| <= (K + 1) * u * S, where S = sum_k |x_k w_k| + |bias| (the standard
recursive-summation bound, whatever the order). The result is then rounded once to
the output type; two values within d of each other round to values at most
d + ulp_out apart. So |y - exact| <= (K + 1) * u * S + ulp_out(|exact| + (K + 1) * u * S).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import gemv as gemv_op

DTYPES = [np.float16, ml_dtypes.bfloat16]
U32 = 2.0**-24


def _ulp(dtype, mag):
    fi = ml_dtypes.finfo(dtype)
    exp = np.floor(np.log2(np.maximum(mag, float(fi.smallest_normal))))
    return 2.0 ** (exp - fi.nmant)


def assert_within_accumulation_bound(y, x, w, bias=None):
    x64, w64 = x.astype(np.float64).reshape(-1), w.astype(np.float64)
    exact = w64 @ x64
    scale = np.abs(w64) @ np.abs(x64)
    if bias is not None:
        b64 = bias.astype(np.float64).reshape(-1)
        exact, scale = exact + b64, scale + np.abs(b64)
    acc_err = (x64.size + 1) * U32 * scale
    tol = acc_err + _ulp(y.dtype, np.abs(exact) + acc_err)
    err = np.abs(y.astype(np.float64).reshape(-1) - exact)
    bad = np.flatnonzero(~(err <= tol))
    assert bad.size == 0, (f"{bad.size} of {err.size} outputs outside the bound; first row {bad[0]}: "
                           f"got {float(y.reshape(-1)[bad[0]])}, exact {exact[bad[0]]}, bound {tol[bad[0]]}")


def _inputs(dtype, m, k, seed=0, bias=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, k)).astype(dtype)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype) if bias else None
    return x, w, b


@pytest.fixture(params=SHIPPED_ARCHS)
def emulated(request):
    dev = EmulatedDevice(request.param)
    with hipskinny.on_device(dev):
        yield dev


# M below one tile, M not a multiple of any tile, K not a multiple of the 8-element
# chunk, K past 4096 (wave32 partial sums) and past 8192 (the old LLMM1 cap).
SHAPES = [(1, 8), (3, 13), (37, 1003), (64, 256), (130, 2048), (9, 8200)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("m, k", SHAPES)
def test_gemv_matches_exact_math(emulated, dtype, m, k):
    x, w, _ = _inputs(dtype, m, k, seed=m * 7919 + k)
    y = hipskinny.gemv(x, w)
    assert y.shape == (1, m) and y.dtype == np.dtype(dtype)
    assert_within_accumulation_bound(y, x, w)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_gemv_bias_and_1d_x(emulated, dtype):
    x, w, b = _inputs(dtype, 21, 520, bias=True)
    y = hipskinny.gemv(x.reshape(-1), w, b)
    assert y.shape == (21,)
    assert_within_accumulation_bound(y, x, w, b)
    np.testing.assert_array_equal(hipskinny.gemv(x, w, b.reshape(1, -1)).reshape(-1), y)


def test_zero_x_gives_exact_zero_or_bias(emulated):
    _, w, b = _inputs(np.float16, 40, 300, bias=True)
    x = np.zeros((1, 300), np.float16)
    assert not hipskinny.gemv(x, w).any()
    np.testing.assert_array_equal(hipskinny.gemv(x, w, b), b.reshape(1, -1))


def test_nan_in_a_weight_row_stays_in_that_row(emulated):
    x, w, _ = _inputs(np.float16, 24, 64)
    w[5, 17] = np.nan
    y = hipskinny.gemv(x, w)
    assert np.isnan(y[0, 5]) and not np.isnan(np.delete(y, 5)).any()


def test_every_row_variant_and_padded_stride(emulated):
    """Each rows-per-group kernel, with W rows padded well beyond K (stride K + 72)."""
    dev = emulated
    m, k, stride = 19, 200, 272
    x, w, _ = _inputs(np.float16, m, k)
    padded = np.full((m, stride), np.nan, np.float16)   # padding must never be read
    padded[:, :k] = w
    x_d, w_d, y_d = dev.alloc(k * 2), dev.alloc(padded.nbytes), dev.alloc(m * 2)
    dev.copy_to_device(x_d, x, k * 2)
    dev.copy_to_device(w_d, padded, padded.nbytes)
    from hipskinny import registry
    from hipskinny.launch import make_plan

    for r in gemv_op.ROWS_PER_GROUP:
        fn, meta = registry.load(dev, "gemv").kernel(f"gemv_f16_r{r}")
        plan = make_plan(fn, meta, (-(-m // r), 1, 1))
        dev.memset(y_d, 0xFF, m * 2)
        dev.dispatch(plan.function, plan.grid, plan.block, plan.kernarg((x_d, w_d, 0, y_d, m, k, stride)))
        y = np.empty(m, np.float16)
        dev.copy_to_host(y, y_d, m * 2)
        assert_within_accumulation_bound(y, x, w)


def test_deterministic_across_calls_and_schedules():
    x, w, _ = _inputs(ml_dtypes.bfloat16, 50, 3000)
    results = []
    for seed in (None, 1, 2):
        dev = EmulatedDevice("gfx1100", seed=seed)
        with hipskinny.on_device(dev):
            results += [hipskinny.gemv(x, w) for _ in range(2)]
    for r in results[1:]:
        np.testing.assert_array_equal(r.view(np.uint16), results[0].view(np.uint16))


def test_launch_stats_count_the_weights_once(emulated):
    m, k = 64, 1024
    x, w, _ = _inputs(np.float16, m, k)
    hipskinny.gemv(x, w)
    stats = emulated.last_launch_stats
    weights = m * k * 2
    assert stats.bytes_loaded["global"] >= weights
    # x is re-read by every workgroup: the traffic is W + groups * x + y.
    groups = stats.workgroups
    assert stats.bytes_loaded["global"] == weights + groups * k * 2
    assert stats.bytes_stored["global"] == m * 2
    assert stats.instructions["valu"] > 0 and stats.barriers == groups
