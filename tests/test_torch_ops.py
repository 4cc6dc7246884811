"""torch.ops.hipskinny.*: registration without importing torch (either import order, from any thread),
schemas and fake tensors, eager calls identical to the Python functions, torch.compile without graph
breaks and with the same bits as eager (CPU tensors, the emulator as the device), torch's opcheck."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import hipskinny
from hipskinny import torch_ops
from hipskinny.emulator import EmulatedDevice

ROOT = Path(__file__).resolve().parent.parent
OPS = ("gemv", "gemv_out", "skinny_gemm", "skinny_gemm_out", "fp8_linear", "fp8_linear_out", "matmul_4bit",
       "matmul_4bit_out")


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def test_import_hipskinny_does_not_import_torch():
    _python("import hipskinny, sys; assert 'torch' not in sys.modules")


@pytest.mark.parametrize("order", ["import hipskinny, torch", "import torch, hipskinny"])
def test_ops_exist_in_either_import_order(order):
    out = _python(f"""{order}
import sys
from hipskinny import torch_ops
assert torch_ops.registered()
assert all(hasattr(torch.ops.hipskinny, n) for n in {OPS!r})
assert not any(isinstance(f, torch_ops._RegisterAfterTorch) for f in sys.meta_path)  # the hook left
torch_ops.register(); torch_ops.install()                                           # idempotent
print(torch.ops.hipskinny.skinny_gemm.default._schema)
""")
    assert out.strip() == ("hipskinny::skinny_gemm(Tensor x, Tensor w, Tensor? bias=None, *, "
                           "bool deterministic=True) -> Tensor")


def test_register_from_a_thread_while_another_imports_torch():
    # Thread A imports torch (the hook registers when that completes) while thread B calls register():
    # both must finish, registering once.
    out = _python("""
import faulthandler, sys, threading, time
faulthandler.dump_traceback_later(60, exit=True)
import hipskinny
from hipskinny import torch_ops

def importer():
    import torch  # noqa: F401

a = threading.Thread(target=importer)
a.start()
while "torch" not in sys.modules:            # torch is being executed by thread A
    time.sleep(0.0005)
others = [threading.Thread(target=torch_ops.register) for _ in range(4)]
for t in others:
    t.start()
for t in [a, *others]:
    t.join()
import torch
print(torch_ops.registered(), hasattr(torch.ops.hipskinny, "gemv_out"))
""")
    assert out.split() == ["True", "True"]


def test_a_failed_registration_leaves_nothing_and_does_not_break_import_torch():
    out = _python("""
import hipskinny
from hipskinny import torch_ops
good = torch_ops.ops
torch_ops.ops = lambda: [*good(), torch_ops.TorchOp("broken(Tensor x -> Tensor", print)]
import torch                                           # the hook's registration fails: logged, not raised
assert not torch_ops.registered() and not hasattr(torch.ops.hipskinny, "gemv")
try:
    torch_ops.register()
except RuntimeError as e:
    kept = e                                           # its traceback keeps register()'s frame alive
assert not hasattr(torch.ops.hipskinny, "gemv")
torch_ops.ops = good
torch_ops.register()                                   # the retry starts from a clean namespace
print(torch_ops.registered(), hasattr(torch.ops.hipskinny, "skinny_gemm_out"))
""")
    assert out.split() == ["True", "True"]


def test_schemas_declare_what_is_mutated():
    torch_ops.register()
    assert torch_ops.registered()
    for name in ("gemv", "skinny_gemm"):
        functional = getattr(torch.ops.hipskinny, name).default._schema
        into = getattr(torch.ops.hipskinny, f"{name}_out").default._schema
        assert not functional.is_mutable and into.is_mutable
        assert [a.name for a in into.arguments if a.alias_info is not None and a.alias_info.is_write] == ["out"]
        assert len(into.returns) == 0
        assert [a.name for a in functional.arguments] == [a.name for a in into.arguments if a.name != "out"]


def test_a_declaration_is_all_a_new_op_needs():
    def toy(x, w, bias=None, *, out=None, fast=False):
        return out

    functional, into = torch_ops.declare("toy", "Tensor x, Tensor w, Tensor? bias=None", toy,
                                         lambda x, w, bias=None: x, options="bool fast=False")
    assert functional.name == "toy" and into.name == "toy_out"
    assert functional.schema == "toy(Tensor x, Tensor w, Tensor? bias=None, *, bool fast=False) -> Tensor"
    assert into.schema == "toy_out(Tensor x, Tensor w, Tensor? bias, Tensor(a!) out, *, bool fast=False) -> ()"
    assert functional.impl is toy and into.out_shape is None
    assert into.impl(1, 2, None, "o", fast=True) is None        # calls toy(1, 2, None, out="o", fast=True)
    assert {op.name for op in torch_ops.ops()} == set(OPS)


@pytest.fixture(scope="module")
def dev():
    return EmulatedDevice("gfx1201", 2)


def _inputs(n, m, k, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, k), generator=g).to(dtype)
    w = (torch.randn((m, k), generator=g) / 8).to(dtype)
    b = torch.randn((m,), generator=g).to(dtype)
    return x, w, b


@pytest.mark.parametrize("device", ["fake", "meta"])
def test_fake_tensors_infer_shapes(device):
    from torch._subclasses.fake_tensor import FakeTensorMode

    def check():
        kw = {"device": "meta"} if device == "meta" else {}
        x = torch.empty((3, 5, 64), dtype=torch.bfloat16, **kw)
        w = torch.empty((40, 64), dtype=torch.bfloat16, **kw)
        y = torch.ops.hipskinny.skinny_gemm(x, w, deterministic=False)
        assert y.shape == (3, 5, 40) and y.dtype == torch.bfloat16 and y.device == x.device
        assert torch.ops.hipskinny.gemv(x[0, 0], w).shape == (40,)
        assert torch.ops.hipskinny.gemv(x[0, :1], w).shape == (1, 40)
        assert torch.ops.hipskinny.skinny_gemm_out(x, w, None, y) is None
        assert torch.ops.hipskinny.gemv_out(x[0, 0], w, None, y[0, 0]) is None

    if device == "fake":
        with FakeTensorMode():
            check()
    else:
        check()


def test_eager_ops_are_the_python_functions(dev):
    x, w, b = _inputs(16, 64, 256, seed=5)
    with hipskinny.on_device(dev):
        for det in (True, False):
            want = hipskinny.skinny_gemm(x, w, b, deterministic=det)
            assert torch.equal(_bits(torch.ops.hipskinny.skinny_gemm(x, w, b, deterministic=det)), _bits(want))
            out = torch.empty_like(want)
            assert torch.ops.hipskinny.skinny_gemm_out(x, w, b, out, deterministic=det) is None
            assert torch.equal(_bits(out), _bits(want))
        want = hipskinny.gemv(x[:1], w, b)
        assert torch.equal(_bits(torch.ops.hipskinny.gemv(x[:1], w, b)), _bits(want))
        out = torch.empty_like(want)
        torch.ops.hipskinny.gemv_out(x[:1], w, b, out)
        assert torch.equal(_bits(out), _bits(want))
        with pytest.raises(hipskinny.InputValueError):          # hipskinny's own errors come through
            torch.ops.hipskinny.skinny_gemm(x, w[:, :128])


def _model(x, w, b, out, gout):
    y = torch.ops.hipskinny.skinny_gemm(x * 2, w, b)
    torch.ops.hipskinny.skinny_gemm_out(x, w, None, out, deterministic=True)
    g = torch.ops.hipskinny.gemv(x[0], w)
    torch.ops.hipskinny.gemv_out(x[:1], w, b, gout)
    return torch.relu(y) + out, g.sigmoid() - gout[0]


@pytest.mark.parametrize("n", [4, 16])          # n=16: the split-K kernel
def test_compile_fullgraph_same_bits_as_eager(dev, n):
    m, k = 64, 256
    x, w, b = _inputs(n, m, k, seed=n)
    out, gout = torch.empty((n, m), dtype=torch.float16), torch.empty((1, m), dtype=torch.float16)

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with hipskinny.on_device(dev):
        eout, egout = out.clone(), gout.clone()
        eager = _model(x, w, b, eout, egout)
        got = torch.compile(_model, fullgraph=True, backend=counter)(x, w, b, out, gout)
    assert counter.frame_count == 1                      # one graph, no breaks (fullgraph would raise)
    called = {str(node.target).removesuffix(".default") for node in counter.graphs[0].graph.nodes}
    assert {f"hipskinny.{name}" for name in OPS[:4]} <= called     # the 16-bit ops this function calls
    for e, g in zip((*eager, eout, egout), (*got, out, gout), strict=True):
        assert torch.equal(_bits(e), _bits(g))
    with hipskinny.on_device(dev):                       # and the out ops wrote what the functions compute
        direct = hipskinny.skinny_gemm(x.numpy(), w.numpy())
    assert np.array_equal(out.numpy().view(np.int16), direct.view(np.int16))


def test_explain_finds_no_graph_breaks():
    x, w, b = _inputs(4, 64, 256)        # explain traces with fake tensors: no kernel runs
    explained = torch._dynamo.explain(_model)(x, w, b, torch.empty((4, 64), dtype=torch.float16),
                                              torch.empty((1, 64), dtype=torch.float16))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_compile_dynamic_shapes(dev):
    m, k = 64, 256
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(_model, fullgraph=True, backend=counter, dynamic=True)
    for n in (3, 5):
        x, w, b = _inputs(n, m, k, seed=n)
        bufs = torch.empty((n, m), dtype=torch.float16), torch.empty((1, m), dtype=torch.float16)
        with hipskinny.on_device(dev):
            eager = _model(x, w, b, *(t.clone() for t in bufs))
            got = compiled(x, w, b, *bufs)
        for e, g in zip(eager, got, strict=True):
            assert torch.equal(_bits(e), _bits(g))
    assert counter.frame_count == 1                      # one graph for both N: fake shapes are symbolic


def test_opcheck(dev):
    x, w, b = _inputs(2, 24, 64, seed=3)
    cases = [
        (torch.ops.hipskinny.skinny_gemm.default, (x, w, b), {"deterministic": True}),
        (torch.ops.hipskinny.skinny_gemm_out.default, (x, w, None, torch.empty((2, 24), dtype=torch.float16)), {}),
        (torch.ops.hipskinny.gemv.default, (x[0], w, b), {}),
        (torch.ops.hipskinny.gemv_out.default, (x[:1], w, None, torch.empty((1, 24), dtype=torch.float16)), {}),
    ]
    with hipskinny.on_device(dev):
        for op, args, kwargs in cases:   # all of opcheck's tests: schema, autograd registration, fake, AOT dynamic
            # test_schema is left out: its checker multiplies the inputs, which CPU torch cannot do
            # for float8 ("mul_cpu_reduced_float" not implemented); the other three run.
            torch.library.opcheck(op, args, kwargs, test_utils=("test_faketensor", "test_autograd_registration",
                                                                "test_aot_dispatch_dynamic"))


def _fp8_model(x, w8, ws, x8, xs, out):
    y = torch.ops.hipskinny.fp8_linear(x * 2, w8, ws)                                  # W8A16
    z = torch.ops.hipskinny.fp8_linear(x8, w8, ws, x_scale=xs, out_dtype=torch.bfloat16)   # W8A8
    torch.ops.hipskinny.fp8_linear_out(x, w8, ws, out)
    return torch.relu(y) + out, z.float().sigmoid()


@pytest.mark.parametrize("n", [4, 16])
def test_fp8_linear_compiles_fullgraph_same_bits_and_passes_opcheck(dev, n):
    from hipskinny import fp8

    m, k = 64, 256
    x, w, _ = _inputs(n, m, k, seed=n)
    w8, ws = fp8.quantize(w.float(), granularity="channel", flavor="ocp")
    x8, xs = fp8.quantize(x.float(), granularity="token", flavor="ocp")
    assert w8.dtype == torch.float8_e4m3fn and ws.dtype == torch.float32
    out = torch.empty((n, m), dtype=torch.float16)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with hipskinny.on_device(dev):
        eout = out.clone()
        eager = _fp8_model(x, w8, ws, x8, xs, eout)
        got = torch.compile(_fp8_model, fullgraph=True, backend=counter)(x, w8, ws, x8, xs, out)
        assert eager[1].shape == (n, m)
        for e, g in zip((*eager, eout), (*got, out), strict=True):
            assert torch.equal(e.view(torch.int16) if e.dtype == torch.float16 else e,
                               g.view(torch.int16) if g.dtype == torch.float16 else g)
        assert counter.frame_count == 1
        called = {str(node.target).removesuffix(".default") for node in counter.graphs[0].graph.nodes}
        assert {"hipskinny.fp8_linear", "hipskinny.fp8_linear_out"} <= called
        for op, args, kwargs in [
            (torch.ops.hipskinny.fp8_linear.default, (x, w8, ws), {}),
            (torch.ops.hipskinny.fp8_linear.default, (x8, w8, ws), {"x_scale": xs, "out_dtype": torch.float16}),
            (torch.ops.hipskinny.fp8_linear_out.default, (x, w8, ws, torch.empty((n, m), dtype=torch.float16)), {}),
        ]:
            # test_schema is left out: its checker multiplies the inputs, which CPU torch cannot do
            # for float8 ("mul_cpu_reduced_float" not implemented); the other three run.
            torch.library.opcheck(op, args, kwargs, test_utils=("test_faketensor", "test_autograd_registration",
                                                                "test_aot_dispatch_dynamic"))


def _nf4_model(x, packed, st, out):
    s2 = st.state2
    nested = {"absmax2": s2.absmax, "code2": s2.code, "offset": st.offset}
    y = torch.ops.hipskinny.matmul_4bit(x * 2, packed, st.absmax, st.code, st.blocksize, list(st.shape), **nested)
    torch.ops.hipskinny.matmul_4bit_out(x, packed, st.absmax, st.code, st.blocksize, list(st.shape), out, **nested)
    return torch.relu(y) + out


def test_matmul_4bit_compiles_fullgraph_same_bits_and_passes_opcheck(dev):
    from hipskinny import bnb

    n, m, k = 3, 64, 256
    x, w, _ = _inputs(n, m, k, seed=5)
    packed, st = bnb.quantize_4bit(w.float(), blocksize=64, quant_type="nf4", compress_statistics=True)
    out = torch.empty((n, m), dtype=torch.float16)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with hipskinny.on_device(dev):
        eout = out.clone()
        eager = _nf4_model(x, packed, st, eout)
        got = torch.compile(_nf4_model, fullgraph=True, backend=counter)(x, packed, st, out)
        assert torch.equal(eager.view(torch.int16), got.view(torch.int16))
        assert torch.equal(eout.view(torch.int16), out.view(torch.int16))
        assert torch.equal(eout.view(torch.int16), bnb.matmul_4bit(x, packed, st).view(torch.int16))
        assert counter.frame_count == 1
        called = {str(node.target).removesuffix(".default") for node in counter.graphs[0].graph.nodes}
        assert {"hipskinny.matmul_4bit", "hipskinny.matmul_4bit_out"} <= called
        nested = {"absmax2": st.state2.absmax, "code2": st.state2.code, "offset": st.offset}
        head = (x, packed, st.absmax, st.code, st.blocksize, list(st.shape))
        for op, args, kwargs in [
            (torch.ops.hipskinny.matmul_4bit.default, head, nested),
            (torch.ops.hipskinny.matmul_4bit_out.default, (*head, torch.empty((n, m), dtype=torch.float16)), nested),
        ]:
            torch.library.opcheck(op, args, kwargs)
