"""Torch tensors over the fake runtime's device memory, for scenarios run inside `fakehip_run`
subprocesses: host values copied into hipMalloc memory and seen as CPU torch tensors, which the
test seam `operands.present_cpu_torch_as_gpu` presents to hipskinny as GPU tensors; outputs
allocated there too (one hipMalloc each, or a bump pool over one hipMalloc for captures); and the
capture stream torch reports as current.

    sys.path.insert(0, TESTS)
    from fakehip.torch_seam import Capture, dev

    cap = Capture()                      # hipskinny now takes CPU torch tensors for GPU ones
    x, w, o = (dev(np.ones(shape, np.float16)) for shape in ((4, 64), (8, 64), (4, 8)))
    cap.current = cap.stream             # torch's current stream: warm up on the capture stream
    hipskinny.skinny_gemm(x, w, out=o)
    graph = cap.capture(lambda: hipskinny.skinny_gemm(x, w, out=o))
    cap.replay(graph)                    # o holds the result again
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import torch
from hip import hip

from fakehip.scenario import instantiate, ok
from hipskinny import operands

# numpy dtype name -> the torch dtype a device tensor gets (uint32 seen as int32).
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32,
         "uint8": torch.uint8, "uint32": torch.int32}
# torch dtype -> the numpy dtype of the zeros `empty` puts on the device.
NUMPY = {torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
         torch.float32: np.dtype(np.float32), torch.int32: np.dtype(np.int32), torch.uint8: np.dtype(np.uint8)}


def dev(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    """``a`` copied into fake-device memory (one hipMalloc), as a CPU torch tensor over that memory
    with ``a``'s shape; a torch tensor keeps its dtype, a numpy array gets ``TORCH[a.dtype.name]``."""
    if isinstance(a, torch.Tensor):
        return dev(a.numpy()).view(a.dtype).view(a.shape)
    a = np.ascontiguousarray(a)
    ptr = int(ok(hip.hipMalloc(max(a.nbytes, 4))))
    ctypes.memmove(ptr, a.ctypes.data, a.nbytes)
    raw = (ctypes.c_uint8 * max(a.nbytes, 4)).from_address(ptr)
    return torch.frombuffer(raw, dtype=torch.uint8)[:a.nbytes].view(TORCH[a.dtype.name]).view(a.shape)


def empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed device tensor: the output allocator for `operands.present_cpu_torch_as_gpu`."""
    return dev(np.zeros(shape, NUMPY[dtype]))


class Pool:
    """torch's allocator during a capture hands out blocks of the graph's own pool (no hipMalloc):
    a bump allocator over one allocation made before the capture stands in for it (``empty`` is
    the seam's output allocator; each block zeroed, 256-byte aligned)."""

    def __init__(self, nbytes: int) -> None:
        self.base, self.size, self.used = int(ok(hip.hipMalloc(nbytes))), nbytes, 0

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        n = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
        at, self.used = self.base + self.used, self.used + (n + 255) // 256 * 256
        assert self.used <= self.size
        ctypes.memset(at, 0, n)
        raw = (ctypes.c_uint8 * max(n, 1)).from_address(at)
        return torch.frombuffer(raw, dtype=torch.uint8)[:n].view(dtype).view(shape)


class Capture:
    """A stream to capture on; CPU torch tensors count as GPU tensors whose current stream is
    ``current`` (set it to ``stream`` around the calls that should go to the capture stream),
    outputs allocated by ``empty`` (None: torch's CPU allocator, not fake-device memory)."""

    def __init__(self, empty: Callable[[Sequence[int], torch.dtype], torch.Tensor] | None = None) -> None:
        self.stream = int(ok(hip.hipStreamCreate()))
        self.current = 0
        operands.present_cpu_torch_as_gpu(0, self.torch_stream, empty)

    def torch_stream(self, ordinal: Any) -> int:
        """What torch reports as the current stream of GPU ``ordinal``."""
        return self.current

    def capture(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` captured on ``stream`` (a global-mode capture, torch's current stream ``stream``
        meanwhile; the capture ended even when ``fn`` raises): the instantiated graph."""
        ok(hip.hipStreamBeginCapture(self.stream, hip.hipStreamCaptureMode.hipStreamCaptureModeGlobal))
        before, self.current = self.current, self.stream
        try:
            fn()
        finally:
            self.current = before
            graph = ok(hip.hipStreamEndCapture(self.stream))
        return instantiate(graph)

    def replay(self, graph: Any) -> None:
        """Launch the instantiated ``graph`` on ``stream`` and wait for it."""
        ok(hip.hipGraphLaunch(graph, self.stream))
        ok(hip.hipStreamSynchronize(self.stream))
