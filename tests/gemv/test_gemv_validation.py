"""gemv rejects bad input with the package's own errors, before touching any device."""

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from hipskinny import InputTypeError, InputValueError


def _ok(m=8, k=16, dtype=np.float16):
    return np.ones((1, k), dtype), np.ones((m, k), dtype)


@pytest.mark.parametrize("bad_dtype", [np.float32, np.int8, np.float64])
def test_wrong_dtype(bad_dtype):
    x, w = _ok()
    with pytest.raises(InputTypeError, match="supported: float16, bfloat16"):
        hipskinny.gemv(x.astype(bad_dtype), w.astype(bad_dtype))


def test_mixed_dtypes():
    x, w = _ok()
    with pytest.raises(InputTypeError, match="share one dtype"):
        hipskinny.gemv(x, w.astype(ml_dtypes.bfloat16))
    with pytest.raises(InputTypeError, match="share one dtype"):
        hipskinny.gemv(x, w, np.zeros(8, ml_dtypes.bfloat16))


def test_type_errors_are_also_builtin_type_errors():
    x, w = _ok()
    with pytest.raises(TypeError):
        hipskinny.gemv(x.astype(np.float32), w)
    with pytest.raises(TypeError):
        hipskinny.gemv([1.0, 2.0], w)


def test_mismatched_k():
    x, w = _ok(k=16)
    with pytest.raises(InputValueError, match="K=24 but w is"):
        hipskinny.gemv(np.ones((1, 24), np.float16), w)


@pytest.mark.parametrize("shape", [(2, 16), (1, 1, 16), ()])
def test_x_must_be_one_token(shape):
    _, w = _ok()
    with pytest.raises(InputValueError, match=r"\[K\] or \[1, K\]"):
        hipskinny.gemv(np.ones(shape, np.float16), w)


def test_w_must_be_2d():
    x, _ = _ok()
    with pytest.raises(InputValueError, match="2-D"):
        hipskinny.gemv(x, np.ones(16, np.float16))
    with pytest.raises(ValueError):
        hipskinny.gemv(x, np.ones((1, 8, 16), np.float16))


@pytest.mark.parametrize("bshape", [(7,), (2, 8), (8, 1)])
def test_bias_shape(bshape):
    x, w = _ok()
    with pytest.raises(InputValueError, match=r"bias must be \[M\] or \[1, M\]"):
        hipskinny.gemv(x, w, np.ones(bshape, np.float16))
