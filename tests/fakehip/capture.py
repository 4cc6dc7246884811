"""Helpers for HIP-graph capture scenarios on the fake runtime (run inside `fakehip_run`
subprocesses): hip-python result unpacking, graph instantiation across hip-python
generations, device memory seen as torch tensors, and the capture stream torch reports."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import torch
from hip import hip

from hipskinny import operands

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32,
         "uint8": torch.uint8}


def ok(result: Any) -> Any:
    """A hip-python call's values after asserting its error code is hipSuccess."""
    result = result if isinstance(result, tuple) else (result,)
    assert int(result[0]) == 0, result
    return result[1] if len(result) == 2 else result[1:]


def instantiate(graph: Any) -> Any:
    """hipGraphInstantiate with either generation's signature."""
    try:
        result = hip.hipGraphInstantiate(graph, 0)
    except TypeError:
        result = hip.hipGraphInstantiate(graph, None, 0)
    assert int(result[0]) == 0, result
    return result[1]


def dev(a: np.ndarray) -> torch.Tensor:
    """``a`` copied into fake-device memory, as a CPU torch tensor over that memory (which the
    seam below presents to hipskinny as a GPU tensor)."""
    a = np.ascontiguousarray(a)
    ptr = int(ok(hip.hipMalloc(max(a.nbytes, 4))))
    ctypes.memmove(ptr, a.ctypes.data, a.nbytes)
    raw = (ctypes.c_uint8 * max(a.nbytes, 4)).from_address(ptr)
    return torch.frombuffer(raw, dtype=torch.uint8)[:a.nbytes].view(TORCH[a.dtype.name]).view(a.shape)


class Capture:
    """A stream to capture on; CPU torch tensors count as GPU tensors whose current stream is
    ``current`` (set it to ``stream`` around the calls that should go to the capture stream)."""

    def __init__(self) -> None:
        self.stream = int(ok(hip.hipStreamCreate()))
        self.current = 0
        operands.present_cpu_torch_as_gpu(0, lambda ordinal: self.current, None)
