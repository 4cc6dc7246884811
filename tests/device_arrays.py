"""Helpers for fake-runtime scenarios (run in the child process that installs the fake
libamdhip64): host arrays copied into hipMalloc memory and exposed through DLPack, results read
back, and an op's outcome as a string."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
from dlpack_helpers import DL_ROCM, HandMade
from hip import hip

import hipskinny

# DLPack (type code, bits) of the dtypes the scenarios put on the device.
CODES = {"float16": (2, 16), "float32": (2, 32), "float8_e4m3fn": (10, 8), "uint8": (1, 8), "int32": (0, 32),
         "bfloat16": (4, 16), "uint32": (1, 32)}


def dev_array(a: np.ndarray, row_stride: int | None = None, offset: int = 0) -> tuple[HandMade, int]:
    """``a`` (1-D or 2-D) copied into device memory ``offset`` bytes past an allocation's start,
    rows ``row_stride`` elements apart: (its DLPack producer, its address)."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    rows, cols = a2.shape
    stride = row_stride or cols
    size = a.dtype.itemsize
    err, ptr = hip.hipMalloc(size * ((rows - 1) * stride + cols) + offset)
    base = int(ptr) + offset
    for r in range(rows):
        ctypes.memmove(base + size * r * stride, a2[r].ctypes.data, size * cols)
    code, bits = CODES[a.dtype.name]
    strides = (1,) if a.ndim == 1 else (stride, 1)
    return HandMade(None, base, a.shape, strides, code=code, bits=bits, device=(DL_ROCM, 0)), base


def dev_nd(a: np.ndarray) -> tuple[HandMade, int]:
    """``a`` (any rank) copied contiguously into device memory: (its DLPack producer, its address)."""
    a = np.ascontiguousarray(a)
    err, ptr = hip.hipMalloc(max(a.nbytes, 4))
    ctypes.memmove(int(ptr), a.ctypes.data, a.nbytes)
    code, bits = CODES[a.dtype.name]
    strides = tuple(s // a.dtype.itemsize for s in a.strides)
    return HandMade(None, int(ptr), a.shape, strides, code=code, bits=bits, device=(DL_ROCM, 0)), int(ptr)


def read(base: int, shape: tuple[int, int]) -> np.ndarray:
    """A contiguous fp16 [R, C] result at ``base``."""
    return np.frombuffer(ctypes.string_at(base, 2 * shape[0] * shape[1]), np.float16).reshape(shape)


def outcome(f: Callable[[], Any]) -> str:
    """"ok", or the hipskinny error ``f`` raised, as "ErrorType: message"."""
    try:
        f()
        return "ok"
    except hipskinny.HipSkinnyError as e:
        return type(e).__name__ + ": " + str(e)


def dev_strided(a: np.ndarray, offset: int = 0) -> tuple[HandMade, int]:
    """``a`` copied into device memory ``offset`` bytes past an allocation's start, with its own
    strides (padding between rows or blocks kept as zeros): (its DLPack producer, its address)."""
    err, ptr = hip.hipMalloc(max(strided_span(a) + offset, 4))
    return dev_strided_at(a, int(ptr) + offset)


def dev_alloc(size: int) -> int:
    """The address of ``size`` fresh bytes of device memory."""
    err, ptr = hip.hipMalloc(max(size, 4))
    return int(ptr)


def strided_span(a: np.ndarray) -> int:
    """Bytes from ``a``'s first element to the end of its last, with its strides."""
    return sum((d - 1) * s for d, s in zip(a.shape, a.strides, strict=True)) + a.dtype.itemsize


def dev_strided_at(a: np.ndarray, base: int) -> tuple[HandMade, int]:
    """``a`` with its strides copied to device address ``base`` (memory the caller allocated)."""
    span = strided_span(a)
    host = np.zeros(span, np.uint8)
    np.lib.stride_tricks.as_strided(host.view(a.dtype), a.shape, a.strides)[...] = a
    ctypes.memmove(base, host.ctypes.data, span)
    code, bits = CODES[a.dtype.name]
    strides = tuple(s // a.dtype.itemsize for s in a.strides)
    return HandMade(None, base, a.shape, strides, code=code, bits=bits, device=(DL_ROCM, 0)), base
