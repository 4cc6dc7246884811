"""The numpy reference of gemv against numpy's own matmul."""

import ml_dtypes
import numpy as np
import pytest

from hipskinny import gemv_reference

DTYPES = [np.float16, ml_dtypes.bfloat16]


def _inputs(dtype, m, k, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, k)).astype(dtype)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, k", [(1, 1), (7, 13), (64, 4096), (300, 9000)])
def test_reference_matches_matmul(dtype, m, k):
    x, w, b = _inputs(dtype, m, k)
    ref = gemv_reference(x, w, b)
    assert ref.dtype == np.dtype(dtype) and ref.shape == (1, m)
    # np.matmul in float32: its own error is at most K * 2**-24 * sum|w x| (recursive or
    # pairwise summation); the reference differs from the exact value by at most half an
    # output ulp, plus one more ulp on bf16's float32 double-rounding ties.
    exact = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    mm = (np.matmul(x.astype(np.float32), w.astype(np.float32).T) + b.astype(np.float32)).astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T + np.abs(b.astype(np.float64))
    assert np.all(np.abs(mm - exact) <= k * 2.0**-24 * scale + 1e-30)
    eps = float(ml_dtypes.finfo(dtype).eps)
    ulp = np.maximum(np.abs(exact), float(ml_dtypes.finfo(dtype).smallest_normal)) * eps
    assert np.all(np.abs(ref.astype(np.float64) - exact) <= ulp)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_shapes_and_bias_forms(dtype):
    x, w, b = _inputs(dtype, 5, 16)
    y1 = gemv_reference(x.reshape(-1), w)
    assert y1.shape == (5,)
    np.testing.assert_array_equal(gemv_reference(x, w, b.reshape(1, 5)), gemv_reference(x, w, b))
    np.testing.assert_array_equal(gemv_reference(np.zeros_like(x), w, b), b.reshape(1, 5))


def test_reference_rounds_once_to_nearest_even():
    # 1 + 2**-11 is halfway between two float16 values: RNE keeps the even one (1.0);
    # 1 + 3 * 2**-11 rounds up to 1 + 2**-9 (also even).
    x = np.array([[1.0, 1.0]], np.float16)
    w = np.array([[1.0, 2.0**-11], [1.0, 3 * 2.0**-11]], np.float16)
    assert gemv_reference(x, w).tolist() == [[1.0, 1.0 + 2.0**-9]]


def test_nan_propagates_to_its_row_only():
    x, w, _ = _inputs(np.float16, 4, 32)
    w[2, 5] = np.nan
    y = gemv_reference(x, w)
    assert np.isnan(y[0, 2]) and not np.isnan(np.delete(y, 2)).any()
