"""HIP-level helpers for scenarios run against the fake runtime (inside `run_with_fakehip` /
`fakehip_run` subprocesses): hip-python result codes, graph instantiation across hip-python
generations, and the fake library's own entry points (the launch hook, its live allocations).

Only ctypes and hip-python: scenarios that pin the fake itself down import this without torch or
hipskinny. A scenario finds it by putting the tests directory first on ``sys.path``:

    import sys
    sys.path.insert(0, TESTS)            # the tests/ directory, passed in by the test
    from fakehip.scenario import ok, instantiate

Torch tensors over fake device memory and the capture stream are in `fakehip.torch_seam`.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from hip import hip

# The fake's launch hook (fakehip_set_launch_hook): kernel name, code object image and size, grid
# (3), block (3), shared bytes, stream, kernarg and its size, user data; returns a hipError_t.
LAUNCH_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                               *([ctypes.c_uint] * 7), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_void_p)


def code(result: Any) -> int:
    """A hip-python call's error code (the call returns a tuple, or the bare code)."""
    result = result if isinstance(result, tuple) else (result,)
    return int(result[0])


def ok(result: Any) -> Any:
    """A hip-python call's values after asserting its error code is hipSuccess: the one value, or
    the tuple of them (empty when the call returns only the code)."""
    result = result if isinstance(result, tuple) else (result,)
    assert code(result) == 0, result
    return result[1] if len(result) == 2 else result[1:]


def graph_instantiate(graph: Any) -> Any:
    """hipGraphInstantiate's result, unchecked, with either generation's signature."""
    try:
        return hip.hipGraphInstantiate(graph, 0)             # hip-python 10.x: (graph, bufferSize)
    except TypeError:
        return hip.hipGraphInstantiate(graph, None, 0)       # 7.x: (graph, pLogBuffer, bufferSize)


def instantiate(graph: Any) -> Any:
    """The executable graph of ``graph``, asserting hipGraphInstantiate succeeded."""
    result = graph_instantiate(graph)
    assert code(result) == 0, result
    return result[1]


def fake_library() -> ctypes.CDLL:
    """The fake libamdhip64 the subprocess's hip-python opened (dlopen returns the loaded handle)."""
    lib = ctypes.CDLL(os.path.join(os.environ["ROCM_PATH"], "lib", "libamdhip64.so"))
    lib.fakehip_allocations.restype = ctypes.c_size_t
    return lib


def live_allocations(lib: ctypes.CDLL) -> list[tuple[int, int]]:
    """(address, size) of every hipMalloc allocation not yet freed, from the fake at ``lib``."""
    n = lib.fakehip_allocations(None, None, 0)
    ptrs, sizes = (ctypes.c_size_t * n)(), (ctypes.c_size_t * n)()
    n = lib.fakehip_allocations(ptrs, sizes, n)
    return [(ptrs[i], sizes[i]) for i in range(n)]
