"""The vLLM plugin's torch ops and switches, without vLLM (tests/integrations/test_vllm.py runs them in it).

``torch.ops.hipskinny_vllm.{linear, fused_moe, topk_softmax}`` serve a call with hipskinny's op or
hand it to the kernel registered for the layer (its fallback index): served results must be the
direct hipskinny call's, bit for bit (the kernels' own accuracy is tested per family; one bound
check here ties the op to the float64 result), declined calls the fallback's. Their fakes must
check shapes so torch.compile refuses a broken graph at trace time. Pairing as in the
transformers tests: bf16 on gfx942 (wave64, MFMA), fp16 on gfx1100 (wave32, WMMA).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import paths
import pytest
import torch
from test_skinny_gemm import assert_bound

import hipskinny
from hipskinny.integrations import vllm as plugin

PAIRS = [pytest.param(torch.bfloat16, "gfx942", id="bf16-gfx942"),
         pytest.param(torch.float16, "gfx1100", id="fp16-gfx1100")]
K, M = 256, 96
TESTS = str(paths.TESTS)


@pytest.fixture(scope="module")
def ops():
    plugin._define_ops(torch)
    return torch.ops.hipskinny_vllm


def _fallback(tag):
    """A fallback that records its calls and answers with a marker."""
    calls = []

    def fallback(*args):
        calls.append(args)
        first = args[0]
        if tag == "topk":
            n = first.shape[0]
            return torch.full((n, 2), -1.0), torch.full((n, 2), -1, dtype=torch.int32)
        return torch.full((*first.shape[:-1], args[1].shape[0] if tag == "linear" else first.shape[-1]), 7.0,
                          dtype=first.dtype)

    plugin._fallbacks.append(fallback)
    return len(plugin._fallbacks) - 1, calls


def _numpy(t):
    return t.float().numpy().astype(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


def _linear_inputs(dtype, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, K, generator=g).to(dtype)
    w = (torch.randn(M, K, generator=g) / K ** 0.5).to(dtype)
    b = torch.randn(M, generator=g).to(dtype)
    return x, w, b


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_linear_serves_decode_as_hipskinny_does(ops, dtype, arch):
    index, calls = _fallback("linear")
    with hipskinny.on_device(f"emulator:{arch}:1"):
        for n in (1, 5, 128):
            x, w, b = _linear_inputs(dtype, n, seed=n)
            before = plugin.served()
            y = ops.linear(x, w, b, index)
            assert torch.equal(y, hipskinny.skinny_gemm(x, w, b))
            assert plugin.served().get("skinny_gemm", 0) == before.get("skinny_gemm", 0) + 1
        assert_bound(_numpy(y), _numpy(x), _numpy(w), _numpy(b))
        x3 = x[:6].reshape(2, 3, K)                 # leading dimensions are the tokens
        assert torch.equal(ops.linear(x3, w, None, index), hipskinny.skinny_gemm(x[:6], w).view(2, 3, M))
    assert calls == []


@pytest.mark.parametrize("dtype,arch", PAIRS[:1])
def test_linear_hands_prefill_and_other_dtypes_to_vllm(ops, dtype, arch):
    index, calls = _fallback("linear")
    with hipskinny.on_device(f"emulator:{arch}:1"):
        x, w, b = _linear_inputs(dtype, plugin.MAX_TOKENS + 1)
        before = plugin.declined().get("skinny_gemm", 0)
        assert (ops.linear(x, w, b, index) == 7).all()                       # prefill
        assert (ops.linear(x[:2].float(), w.float(), None, index) == 7).all()   # fp32
        assert (ops.linear(x[:2], w, b.float(), index) == 7).all()           # a widened bias
        assert plugin.declined()["skinny_gemm"] == before + 3
    assert [c[0].shape[0] for c in calls] == [plugin.MAX_TOKENS + 1, 2, 2]
    assert ops.linear(x[:2], w, b, 0).shape == (2, M)   # index 0: torch.nn.functional.linear
    assert torch.equal(ops.linear(x[:2].float(), w.float(), b.float(), 0),
                       torch.nn.functional.linear(x[:2].float(), w.float(), b.float()))


def test_fakes_check_shapes_at_trace_time(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(4, K, dtype=torch.bfloat16), torch.empty(M, K, dtype=torch.bfloat16)
        assert ops.linear(x, w, None, 0).shape == (4, M)
        with pytest.raises(RuntimeError, match="last dimension 128 != weight's K 256"):
            ops.linear(torch.empty(4, 128, dtype=torch.bfloat16), w, None, 0)
        with pytest.raises(RuntimeError, match=r"bias must be \[96\]"):
            ops.linear(x, w, torch.empty(3, dtype=torch.bfloat16), 0)
        with pytest.raises(RuntimeError, match="no fallback"):
            ops.linear(x, w, None, 10**6)
        w13, w2 = torch.empty(4, 64, K, dtype=torch.bfloat16), torch.empty(4, K, 32, dtype=torch.bfloat16)
        ids, weights = torch.empty(4, 2, dtype=torch.int32), torch.empty(4, 2)
        assert ops.fused_moe(x, w13, w2, weights, ids, 0).shape == (4, K)
        with pytest.raises(RuntimeError, match="do not agree"):
            ops.fused_moe(x, w13, torch.empty(4, K, 16, dtype=torch.bfloat16), weights, ids, 0)
        a, b = torch.empty(17, K, dtype=torch.float8_e4m3fn), torch.empty(M, K, dtype=torch.float8_e4m3fn).t()
        y = ops.fp8_linear(a, b, torch.empty(1), torch.empty(1), None, torch.bfloat16, [2, 2, M], 0)
        assert (y.shape, y.dtype) == ((2, 2, M), torch.bfloat16)        # padded rows: output_shape rules
        with pytest.raises(RuntimeError, match="must be \\[rows, K\\] and \\[K, M\\]"):
            ops.fp8_linear(a, b.t(), torch.empty(1), torch.empty(1), None, torch.bfloat16, [2, M], 0)
        with pytest.raises(RuntimeError, match="no prepared layer"):
            ops.w4a16_linear(x, None, M, 10**6)
        tw, ti = ops.topk_softmax(torch.empty(4, 8), 2, True, 0)
        assert (tw.shape, tw.dtype, ti.shape, ti.dtype) == ((4, 2), torch.float32, (4, 2), torch.int32)
        with pytest.raises(RuntimeError, match="k=9 of 8 experts"):
            ops.topk_softmax(torch.empty(4, 8), 9, True, 0)


def test_compiled_graph_holds_one_opaque_node(ops):
    """torch.compile traces the layer's GEMM into a single call of the plugin's op."""
    from torch._dynamo.testing import CompileCounterWithBackend

    index, calls = _fallback("linear")
    gemm = plugin._gemm_for(lambda layer, x, w, b: torch.nn.functional.linear(x, w, b))
    layer = torch.nn.Module()
    x, w, _ = _linear_inputs(torch.float32, 3)          # fp32: declined, so no emulated launch is needed
    layer._hipskinny = (index, w, None)
    removed = torch.empty(0)                            # the weight vLLM's CPU platform leaves on the layer
    backend = CompileCounterWithBackend("eager")
    compiled = torch.compile(lambda t: gemm(layer, t, removed, None), backend=backend, fullgraph=True)
    assert (compiled(x) == 7).all()
    (graph,) = backend.graphs
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert targets == ["hipskinny_vllm.linear.default"]
    assert len(calls) == 1


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_moe_ops_serve_as_hipskinny_does(ops, dtype, arch):
    e, h, i, k = 4, 64, 32, 2
    g = torch.Generator().manual_seed(3)
    w13 = (torch.randn(e, 2 * i, h, generator=g) / h ** 0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=g) / i ** 0.5).to(dtype)
    moe_index, moe_calls = _fallback("moe")
    topk_index, topk_calls = _fallback("topk")
    with hipskinny.on_device(f"emulator:{arch}:1"):
        for n in (1, 6):
            x = torch.randn(n, h, generator=g).to(dtype)
            logits = torch.randn(n, e, generator=g).to(dtype)
            tw, ti = ops.topk_softmax(logits, k, True, topk_index)
            want_w, want_i = hipskinny.moe.topk_softmax(logits, k, True)
            assert torch.equal(tw, want_w) and torch.equal(ti, want_i)
            y = ops.fused_moe(x, w13, w2, tw, ti, moe_index)
            assert torch.equal(y, hipskinny.moe.fused_moe(x, w13, w2, tw, ti))
        big = plugin.MAX_TOKENS + 1
        tw, ti = ops.topk_softmax(torch.randn(big, e).to(dtype), k, True, topk_index)
        assert (ti == -1).all()
        assert (ops.fused_moe(torch.randn(big, h).to(dtype), w13, w2, tw.abs(), ti.abs(), moe_index) == 7).all()
    assert (len(moe_calls), len(topk_calls)) == (1, 1)


def test_gemm_eager_path_is_the_ops_path(ops):
    """Eager calls skip torch's dispatcher and run the op's own function: same result, same counts."""
    gemm = plugin._gemm_for(lambda layer, x, w, b: pytest.fail("a layer the plugin adopted went to vLLM directly"))
    layer = torch.nn.Module()
    x, w, b = _linear_inputs(torch.bfloat16, 2)
    layer._hipskinny = (0, w, None)
    with hipskinny.on_device("emulator:gfx942:1"):
        before = plugin.served().get("skinny_gemm", 0)
        y = gemm(layer, x, torch.empty(0), b)
        assert torch.equal(y, ops.linear(x, w, b, 0))
        assert plugin.served()["skinny_gemm"] == before + 2


def _register_in_subprocess(env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPSKINNY_VLLM")}
    env.update(env_extra)
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
            "from hipskinny.integrations import vllm as v; v.register(); v.register(); "
            "print('STATUS', v.status()['device'], '|', v.status()['why']); "
            "print('VLLM', 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_register_switched_off_touches_nothing():
    out = _register_in_subprocess({"HIPSKINNY_VLLM": "0"})
    assert "STATUS None | HIPSKINNY_VLLM=0" in out
    assert "VLLM False" in out                         # vLLM is not even imported
    assert out.count("hipskinny: not serving vLLM in this process: HIPSKINNY_VLLM=0") == 1     # idempotent


@pytest.mark.skipif("vllm" in sys.modules or __import__("importlib").util.find_spec("vllm") is not None,
                    reason="vLLM is installed here: its absence cannot be tested")
def test_register_without_vllm_logs_why_and_does_not_raise():
    out = _register_in_subprocess({})
    assert "STATUS None | ModuleNotFoundError: No module named 'vllm'" in out
    assert out.count("hipskinny: not serving vLLM in this process") == 1


CAPTURE = r"""
import json, sys
from contextlib import contextmanager
sys.path.insert(0, TESTS_DIR)
import torch, hipskinny
from fakehip.emulated import install
from fakehip.torch_seam import Capture, Pool, dev
from hipskinny.integrations import vllm as plugin

runtime = install()
pool = Pool(1 << 22)            # outputs from one allocation made before the capture, as torch's graph pool
cap = Capture(pool.empty)
plugin._define_ops(torch)
torch.manual_seed(0)
H, I, E, TOP_K, VOCAB = 256, 128, 4, 2, 512
w_qkv, w_gate, w_head = (dev(torch.randn(m, H, dtype=torch.float16) / 16) for m in (384, E, VOCAB))
w13 = dev(torch.randn(E, 2 * I, H, dtype=torch.float16) / 16)
w2 = dev(torch.randn(E, H, I, dtype=torch.float16) / 16)
xs = {n: dev(torch.randn(n, H, dtype=torch.float16)) for n in (1, 16)}

def step(n):
    # a decode step's served ops, called as vLLM's layers call them (eager: the ops' own functions)
    x = xs[n]
    logits = plugin._linear(x, w_gate, None, 0)
    weights, ids = plugin._topk_softmax(logits, TOP_K, True, 0)
    return [plugin._linear(x, w_qkv, None, 0), plugin._fused_moe(x, w13, w2, weights, ids, 0),
            plugin._linear(x, w_head, None, 0)]

@contextmanager
def graph_capture(device=None):     # the part of vLLM's that matters here: a context holding the capture stream
    class Context:
        stream = cap.stream
    yield Context()

res = {"errors": [], "refused": None}
with torch.no_grad():
    if MODE == "no warm-up":
        try:
            with plugin.reserving(graph_capture)() as context:
                cap.capture(lambda: step(16))
        except hipskinny.CaptureError as e:
            res["refused"] = str(e)
    else:
        res["warmed_at"] = plugin.warm_up_for_capture(step, [1, 2, 4, 8, 16, 64 * 4])
        print("MARK capture", flush=True)
        captured, graphs = {}, {}
        with plugin.reserving(graph_capture)() as context:
            for n in (16, 1):    # as vLLM: largest first, each size run once on the capture stream first
                cap.current = cap.stream
                step(n)
                cap.current = 0
                graphs[n] = cap.capture(lambda n=n: captured.__setitem__(n, step(n)))
        print("MARK replay", flush=True)
        for g in graphs.values():
            cap.replay(g)
        eager = {n: [y.clone() for y in step(n)] for n in captured}
        res["equal"] = {n: all(torch.equal(a, b) for a, b in zip(captured[n], eager[n])) for n in captured}
res["errors"] = runtime.errors
print("RES", json.dumps(res))
"""


def _capture_run(fakehip_run, mode):
    run = fakehip_run(CAPTURE.replace("TESTS_DIR", repr(TESTS)).replace("MODE", repr(mode)),
                      env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "2"}, timeout=600)
    return run, json.loads(run.stdout.split("RES ", 1)[1])


def test_warm_up_and_reserve_make_decode_steps_capturable(fakehip_run):
    """Before vLLM captures HIP graphs the plugin runs a step at the largest captured size it serves
    (here 16 of 1..16 and 256) and reserves hipskinny's scratch on the capture stream. Then, as vLLM
    does (sizes largest first, each run once on the capture stream, then captured), every decode
    step's served ops (router gate, top-k, experts, qkv, lm_head; split-K with scratch at 16)
    are captured as kernel launches only, nothing is allocated after the first capture began, and
    the graphs replay the eager bits (fake runtime, kernels run on the emulator)."""
    run, res = _capture_run(fakehip_run, "warm")
    assert res["errors"] == [] and res["warmed_at"] == 16
    # Scratch sized once: nothing is allocated or freed from the first capture on (a regrown buffer
    # would leave the graphs captured before it pointing at freed memory).
    first = next(i for i, r in enumerate(run.records) if r["fn"] == "hipStreamBeginCapture")
    assert not [r["fn"] for r in run.records[first:] if "Malloc" in r["fn"] or "Free" in r["fn"]]
    begin = [i for i, r in enumerate(run.records) if r["fn"] == "hipStreamBeginCapture"]
    end = [i for i, r in enumerate(run.records) if r["fn"] == "hipStreamEndCapture"]
    assert len(begin) == len(end) == 2
    kernels = []
    for b, e in zip(begin, end, strict=True):
        inside = run.records[b + 1:e]
        assert inside and {r["fn"] for r in inside} == {"hipModuleLaunchKernel"}, [r["fn"] for r in inside]
        assert all(r.get("captured") and r["ret"] == 0 for r in inside)
        kernels.append([r["kernel"] for r in inside])
    assert any("splitk" in k for k in kernels[0]) and not any("splitk" in k for k in kernels[1]), kernels
    assert res["equal"] == {"16": True, "1": True}


def test_capture_without_warm_up_is_refused_not_corrupted(fakehip_run):
    """The control: reserving alone, with no warm-up, leaves the scratch unsized, and the capture is
    refused with hipskinny's CaptureError rather than allocating inside it."""
    _, res = _capture_run(fakehip_run, "no warm-up")
    assert res["errors"] == []
    assert res["refused"] and "capture" in res["refused"].lower()
