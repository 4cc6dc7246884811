"""Python-side cost of one call, measured through `HipDevice` on the fake HIP runtime.

The scenario runs in a fresh Python bound to tests/fakehip's libamdhip64 (real hip-python, a
HIP runtime whose launch and copies do no GPU work, its call log off), so every HIP call a
real call makes is made -- device checks, the launch through hip-python -- and what is
timed is the frontend: signature lookup, pointers, stream, output, argument packing and the
hip-python call. GPU-resident torch tensors cannot exist without a GPU; the torch path is
measured with torch CPU tensors whose memory is the fake runtime's device memory, presented
to hipskinny as GPU tensors by the test seam `operands.present_cpu_torch_as_gpu`, so they take
exactly the code path a ROCm tensor takes except for the stream lookup (a Python lambda here,
``torch._C._cuda_getCurrentRawStream`` on ROCm torch) and ``torch.empty_strided`` (the CPU allocator
here, torch's caching GPU allocator on ROCm). A bare torch op is measured in the same run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

SCENARIO = r'''
import cProfile, ctypes, io, json, pstats, sys, time
sys.path.insert(0, {tests!r})
import numpy as np
import torch
import hipskinny
from hip import hip
from hipskinny import operands
from dlpack_helpers import DL_ROCM, HandMade

SECONDS = {seconds!r}
ROUNDS = 9
N1, M, K, N16 = 1, 256, 4096, 16


def calibrate(fn):
    """Calls per round so that a round takes about SECONDS / ROUNDS."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt > SECONDS / 100 or n > 1 << 20:
            return max(1, int(n * (SECONDS / ROUNDS) / max(dt, 1e-9)))
        n *= 2


def us_per_call(cases):
    """Median over ROUNDS rounds of the mean µs per call of each case, the cases' rounds interleaved
    (the machine is shared: a burst of other work then hits every case alike, not one)."""
    counts = {{name: calibrate(fn) for name, fn in cases.items()}}
    rounds = {{name: [] for name in cases}}
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            n = counts[name]
            t = time.perf_counter()
            for _ in range(n):
                fn()
            rounds[name].append((time.perf_counter() - t) / n * 1e6)
    return {{name: sorted(r)[len(r) // 2] for name, r in rounds.items()}}


def device_bytes(nbytes):
    err, ptr = hip.hipMalloc(nbytes)
    assert int(err) == 0
    return int(ptr)


def torch_on_device(shape):
    n = int(np.prod(shape)) * 2
    raw = (ctypes.c_uint8 * n).from_address(device_bytes(n))
    return torch.frombuffer(raw, dtype=torch.uint8).view(torch.float16).view(shape)


class Pre10(HandMade):
    """A producer from before DLPack 1.0: no max_version keyword, legacy capsules."""

    def __dlpack__(self, stream=None):
        return super().__dlpack__()


def dlpack_on_device(shape, version=(1, 0), kind=HandMade):
    ptr = device_bytes(int(np.prod(shape)) * 2)
    strides = (shape[1], 1) if len(shape) == 2 else (1,)
    return kind(None, ptr, shape, strides, code=2, bits=16, device=(DL_ROCM, 0), version=version)


res = {{"cases": {{}}}}
operands.present_cpu_torch_as_gpu(0)
x1, x16, w = torch_on_device((N1, K)), torch_on_device((N16, K)), torch_on_device((M, K))
xv, o1, o16 = torch_on_device((K,)), torch_on_device((N1, M)), torch_on_device((N16, M))
ov = torch_on_device((M,))
cases = {{
    "gemv_torch_out": lambda: hipskinny.gemv(xv, w, out=ov),
    "gemv_torch": lambda: hipskinny.gemv(xv, w),
    "skinny_gemm_torch_out": lambda: hipskinny.skinny_gemm(x1, w, out=o1),
    "skinny_gemm_torch": lambda: hipskinny.skinny_gemm(x1, w),
    "skinny_gemm_splitk_torch_out": lambda: hipskinny.skinny_gemm(x16, w, out=o16),
}}
if hasattr(torch.ops, "hipskinny") and hasattr(torch.ops.hipskinny, "skinny_gemm"):
    cases["torch_ops_skinny_gemm"] = lambda: torch.ops.hipskinny.skinny_gemm(x1, w)
dx, dw, do = dlpack_on_device((N1, K)), dlpack_on_device((M, K)), dlpack_on_device((N1, M))
cases["skinny_gemm_dlpack_out"] = lambda: hipskinny.skinny_gemm(dx, dw, out=do)
# The same with legacy 'dltensor' capsules: from a producer that takes max_version, and from one before DLPack 1.0.
lx, lw, lo = (dlpack_on_device(shape, version=None) for shape in ((N1, K), (M, K), (N1, M)))
cases["skinny_gemm_dlpack_legacy_out"] = lambda: hipskinny.skinny_gemm(lx, lw, out=lo)
px, pw, po = (dlpack_on_device(shape, version=None, kind=Pre10) for shape in ((N1, K), (M, K), (N1, M)))
cases["skinny_gemm_dlpack_pre10_out"] = lambda: hipskinny.skinny_gemm(px, pw, out=po)
# bitsandbytes' Linear4bit with `integrations.bitsandbytes` enabled (and through bitsandbytes' own forward),
# against hipskinny's direct call on the same
# weight (NF4, nested statistics, blocksize 64: bitsandbytes' defaults; output allocated in both).
try:
    import bitsandbytes
except ImportError:
    bitsandbytes = None
if bitsandbytes is not None:
    from hipskinny import bnb as hs_bnb
    from hipskinny.integrations import bitsandbytes as hs_integration

    def moved(t):
        out = torch.frombuffer((ctypes.c_uint8 * max(t.nbytes, 4)).from_address(device_bytes(max(t.nbytes, 4))),
                               dtype=torch.uint8)[:t.nbytes].view(t.dtype).view(t.shape)
        out.copy_(t)
        return out

    operands.present_cpu_torch_as_gpu(None)       # bitsandbytes quantizes on the host ...
    lin4 = bitsandbytes.nn.Linear4bit(K, M, bias=False, compute_dtype=torch.float16, quant_type="nf4")
    lin4.support_avx512bf16_for_cpu = False
    lin4 = lin4.to(torch.float16).to("cpu")
    qs = lin4.weight.quant_state
    lin4.weight.data = moved(lin4.weight.data)    # ... then its tensors move to device memory
    qs.code, qs.absmax, qs.offset = moved(qs.code), moved(qs.absmax), moved(qs.offset)
    qs.state2.absmax, qs.state2.code = moved(qs.state2.absmax), moved(qs.state2.code)
    operands.present_cpu_torch_as_gpu(0, None, lambda shape, dtype: moved(torch.empty(shape, dtype=dtype)))
    hs_state = hs_bnb.as_state(qs)
    hs_state = hs_bnb.QuantState(hs_state.absmax, hs_state.shape, moved(hs_state.code), hs_state.blocksize,
                                 hs_state.quant_type, hs_state.dtype, hs_state.offset, hs_state.state2)
    packed4 = lin4.weight.data
    hs_integration.enable("cpu")
    with torch.no_grad():
        lin4(x1)                                  # warm-up: the codebook goes to device memory
    operands.present_cpu_torch_as_gpu(0)          # outputs from torch's allocator again, as in every row
    cases["matmul_4bit_torch"] = lambda: hipskinny.matmul_4bit(x1, packed4, hs_state)
    no_grad = torch.no_grad()
    no_grad.__enter__()
    cases["linear4bit_bitsandbytes"] = lambda: lin4(x1)
    own_forward = bitsandbytes.nn.Linear4bit.forward.__wrapped__      # bitsandbytes' forward, under ours
    cases["linear4bit_bitsandbytes_ops"] = lambda: own_forward(lin4, x1)
# An nn.Linear served by hipskinny through transformers' integration (`accelerate`), against the direct call
# above ("skinny_gemm_torch": output allocated in both).
try:
    from hipskinny.integrations import transformers as hs_transformers
    import transformers  # noqa: F401
except ImportError:
    hs_transformers = None
if hs_transformers is not None:
    linear = torch.nn.Linear(K, M, bias=False, dtype=torch.float16)
    linear.weight = torch.nn.Parameter(w, requires_grad=False)
    hs_transformers.accelerate(linear)
    cases["linear_accelerated"] = lambda: linear(x1)
    if bitsandbytes is not None:                  # the same Linear4bit, its forward patched by accelerate
        import copy

        lin4_fast = hs_transformers.accelerate(copy.copy(lin4))
        cases["linear4bit_accelerated"] = lambda: lin4_fast(x1)
# A vLLM linear layer's GEMM with the vLLM plugin (hipskinny.integrations.vllm; vLLM itself is not needed:
# the layer is a module carrying what the plugin adopts at load), eager, against the direct call above
# ("skinny_gemm_torch", output allocated in both); and the plugin's op as a compiled graph calls it.
from hipskinny.integrations import vllm as hs_vllm
hs_vllm._define_ops(torch)
vllm_gemm = hs_vllm._gemm_for(None)
vllm_layer = torch.nn.Module()
vllm_layer._hipskinny = (0, w, None)
removed = torch.empty(0, dtype=torch.float16)
cases["vllm_linear_eager"] = lambda: vllm_gemm(vllm_layer, x1, removed, None)
vllm_op = torch.ops.hipskinny_vllm.linear.default
cases["vllm_linear_op"] = lambda: vllm_op(x1, w, None, 0)
hx, hw = np.ones((N1, K), np.float16), np.ones((M, K), np.float16)
cases["skinny_gemm_numpy"] = lambda: hipskinny.skinny_gemm(hx, hw)
cases["gemv_numpy"] = lambda: hipskinny.gemv(hx[0], hw)
# Floors measured in the same rounds: a bare torch op, torch.empty_strided of the output, and one hip-python
# launch of the same kernel with its arguments prepared (what the launch itself costs here).
a = torch.ones(1)
xs, ws = torch.ones((1, 8)), torch.ones((8, 8))
cases["torch_add"] = lambda: torch.add(a, a)
cases["torch_linear"] = lambda: torch.nn.functional.linear(xs, ws)
cases["torch_empty"] = lambda: torch.empty_strided((N1, M), (M, 1), dtype=torch.float16)
hipskinny.skinny_gemm(x1, w, out=o1)
bound = [c for c in (getattr(c, "bound", c) for c in hipskinny.ops.skinny_gemm._calls._calls.values())
         if getattr(c, "launches", None)][0]
launch = bound.launches[0]
zeros = [0] * len(launch.select)
cases["bare_launch"] = lambda: launch.dispatch(zeros, launch.tail, 0)

# The host path without its copies: the same calls with hipMemcpyAsync made a no-op on our side
# (another device object's copies, so the rows above keep theirs).
measured = us_per_call(cases)
dev = hipskinny.current_device()
copies = (dev.copy_to_device, dev.copy_to_host)
dev.copy_to_device = lambda *a, **k: None
dev.copy_to_host = lambda *a, **k: None
measured.update({{name + "_no_copies": us for name, us in us_per_call(
    {{"skinny_gemm_numpy": cases["skinny_gemm_numpy"], "gemv_numpy": cases["gemv_numpy"],
     "torch_add": cases["torch_add"]}}).items()}})
dev.copy_to_device, dev.copy_to_host = copies
for floor in ("torch_add", "torch_linear", "torch_empty", "bare_launch"):
    res[floor + "_us"] = measured.pop(floor)
res["torch_add_no_copies_round_us"] = measured.pop("torch_add_no_copies")
res["cases"] = measured
res["torch_version"] = torch.__version__

# Where the microseconds of the torch fast path go (cProfile; its own overhead inflates the total).
prof = cProfile.Profile()
fn = cases["skinny_gemm_torch_out"]
calls = max(1000, int(20000 * SECONDS))    # 20000 in a full run
prof.enable()
for _ in range(calls):
    fn()
prof.disable()
st = pstats.Stats(prof)
rows = []
for (file, line, func), (cc, nc, tt, ct, callers) in st.stats.items():
    rows.append({{"function": f"{{Path(file).name}}:{{func}}" if file != "~" else func,
                  "calls_per_call": nc / calls, "us_per_call": tt / calls * 1e6}})
rows.sort(key=lambda r: -r["us_per_call"])
res["profile"] = rows[:10]
res["profile_total_us"] = sum(r["us_per_call"] for r in rows)
print("RES", json.dumps(res))
'''


def start(seconds: float = 1.0) -> Any:
    """Start the scenario's subprocess (see the module docstring); `finish` collects it."""
    sys.path.insert(0, str(TESTS))
    try:
        from fakehip import start_with_fakehip
    finally:
        sys.path.remove(str(TESTS))
    code = SCENARIO.replace("from pathlib", "").replace("Path(file).name", "file.rsplit('/', 1)[-1]")
    return start_with_fakehip(code.format(tests=str(TESTS), seconds=seconds),
                              env={"FAKEHIP_LOG": None, "FAKEHIP_CU_COUNT": "304"})


def finish(started: Any, families: list[str]) -> dict[str, Any]:
    """µs per call on the fake HIP runtime from a `start`ed scenario; ``families`` is accepted for
    the report's interface, the cases cover the shipped ops."""
    run = started.wait(timeout=900)
    out = json.loads(run.stdout.split("RES ", 1)[1])
    out["shape"] = {"n": 1, "m": 256, "k": 4096, "n_splitk": 16}
    out["families"] = sorted(families)
    return out


def measure(families: list[str], seconds: float = 1.0) -> dict[str, Any]:
    """`start` and `finish` in one."""
    return finish(start(seconds), families)
