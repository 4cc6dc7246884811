"""torch.ops.hipskinny.*: registration without importing torch (either import order, from any thread),
schemas and fake tensors, eager calls identical to the Python functions, torch.compile without graph
breaks and with the same bits as eager (CPU tensors, the emulator as the device), torch's opcheck."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import paths
import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import hipskinny
from hipskinny import torch_ops
from hipskinny.devices import parse_device

ROOT = paths.REPO
OPS = ("gemv", "gemv_out", "skinny_gemm", "skinny_gemm_out", "fp8_linear", "fp8_linear_out", "matmul_4bit",
       "matmul_4bit_out", "w4a16_linear", "w4a16_linear_out", "fused_moe", "fused_moe_out", "topk_softmax",
       "topk_softmax_out", "sparse_mla", "sparse_mla_out", "sparse_mla_decode", "sparse_mla_decode_out",
       "linear_grad_x", "moe_grad")


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def test_import_hipskinny_does_not_import_torch():
    _python("import hipskinny, sys; assert 'torch' not in sys.modules")


@pytest.mark.parametrize("probe", ["importlib.util.find_spec('torch')", "import transformers"],
                         ids=["find_spec", "transformers"])
def test_ops_registered_when_torch_is_only_looked_for_before_its_import(probe):
    """A library that asks whether torch is there before anyone imports it (transformers does, with
    ``importlib.util.find_spec``) must not make the import hook step out without registering."""
    _python(f"""import importlib.util, sys
import hipskinny
{probe}
assert 'torch' not in sys.modules
import torch
from hipskinny import torch_ops
assert torch_ops.registered() and hasattr(torch.ops.hipskinny, "skinny_gemm")
assert not any(isinstance(f, torch_ops._RegisterAfterTorch) for f in sys.meta_path)  # the hook left
""")


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
    two, two_out = torch_ops.declare("pair", "Tensor x, int k, bool flag=False", toy, lambda x, k, flag=False: (x, x),
                                     outs=("a", "b"))
    assert two.schema == "pair(Tensor x, int k, bool flag=False) -> (Tensor, Tensor)" and two.results == 2
    assert two_out.schema == "pair_out(Tensor x, int k, bool flag, Tensor(a!) a, Tensor(b!) b) -> ()"
    seen = []
    torch_ops.declare("pair", "Tensor x", lambda x, *, out=None: seen.append(out), lambda x: (x, x),
                      outs=("a", "b"))[1].impl(1, "a", "b")
    assert seen == [("a", "b")]                                      # several outs reach the function as a tuple


@pytest.fixture(scope="module")
def dev():
    # the cached device of this spec: test_torch_ops_autograd shares its loaded code objects
    return parse_device("emulator:gfx1201:2")


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
    torch.ops.hipskinny.fp8_linear_out(x, w8, ws, None, None, out)
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
            (torch.ops.hipskinny.fp8_linear_out.default,
             (x, w8, ws, None, None, torch.empty((n, m), dtype=torch.float16)), {}),
        ]:
            # test_schema is left out: its checker multiplies the inputs, which CPU torch cannot do
            # for float8 ("mul_cpu_reduced_float" not implemented); the other three run.
            torch.library.opcheck(op, args, kwargs, test_utils=("test_faketensor", "test_autograd_registration",
                                                                "test_aot_dispatch_dynamic"))


def _nf4_model(x, packed, st, out):
    s2 = st.state2
    head = (packed, st.absmax, st.code, st.blocksize, list(st.shape))
    y = torch.ops.hipskinny.matmul_4bit(x * 2, *head, absmax2=s2.absmax, code2=s2.code, offset=st.offset)
    torch.ops.hipskinny.matmul_4bit_out(x, *head, None, s2.absmax, s2.code, st.offset, out)
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
        nested = (None, st.state2.absmax, st.state2.code, st.offset)
        head = (x, packed, st.absmax, st.code, st.blocksize, list(st.shape))
        for op, args, kwargs in [
            (torch.ops.hipskinny.matmul_4bit.default, (*head, *nested), {}),
            (torch.ops.hipskinny.matmul_4bit_out.default, (*head, *nested, torch.empty((n, m), dtype=torch.float16)),
             {}),
        ]:
            torch.library.opcheck(op, args, kwargs)


# ----------------------------------------------------------------------------------------------
# w4a16_linear, fused_moe, topk_softmax, sparse_mla; fake tensors validated by the ops' rules


def _prepared(m, k, g, seed, *, experts=None, symmetric=False):
    """A prepared int4 weight (or expert stack) of fp16 scales as torch CPU tensors."""
    from hipskinny import w4a16

    rng = np.random.default_rng(seed)
    lead = () if experts is None else (experts,)
    codes = rng.integers(0, 16, (*lead, m, k))
    zeros = None if symmetric else rng.integers(0, 16, (*lead, m, k // g))
    scales = (rng.uniform(0.002, 0.02, (*lead, m, k // g)) * rng.choice([-1, 1], (*lead, m, k // g))).astype(np.float16)
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt="awq", group_size=g)
    return w4a16.prepare(**ckpt, fmt="awq", group_size=g, dtype=np.float16).map(torch.from_numpy)


def _moe_inputs(n=2, h=32, i=32, e=3, k=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, h), generator=g).half()
    w13 = (torch.randn((e, 2 * i, h), generator=g) * 0.1).half()
    w2 = (torch.randn((e, h, i), generator=g) * 0.1).half()
    logits = torch.randn((n, e), generator=g)
    return x, w13, w2, logits


def _mla_inputs(t=1, h=2, seed=0):
    from hipskinny import mla

    rng = np.random.default_rng(seed)
    cache = torch.from_numpy(mla.pack_cache(rng.standard_normal((16, 512)), layout="v4", block_size=16))
    indices = torch.from_numpy(rng.integers(0, 16, 8 * t).astype(np.int32))
    indptr = torch.arange(0, 8 * t + 1, 8, dtype=torch.int32)
    q = (torch.randn((t, h, 512), generator=torch.Generator().manual_seed(seed)) * 0.5).bfloat16()
    return q, cache, indices, indptr


def test_new_ops_eager_match_the_python_functions_and_pass_opcheck(dev):
    x, w13, w2, logits = _moe_inputs()
    p = _prepared(24, 64, 32, seed=1)
    xw = torch.randn((2, 64), generator=torch.Generator().manual_seed(2)).half()
    q, cache, indices, indptr = _mla_inputs()
    hs = torch.ops.hipskinny
    with hipskinny.on_device(dev):
        tw, ids = hs.topk_softmax(logits, 2, True)
        want = hipskinny.moe.topk_softmax(logits, 2, True)
        assert torch.equal(tw, want[0]) and torch.equal(ids, want[1]) and ids.dtype == torch.int32
        moe = hs.fused_moe(x, w13, w2, tw, ids)
        assert torch.equal(_bits(moe), _bits(hipskinny.moe.fused_moe(x, w13, w2, tw, ids)))
        y = hs.w4a16_linear(xw, p.qweight, p.scales, 32, None, p.zeros)
        assert torch.equal(_bits(y), _bits(hipskinny.w4a16_linear(xw, p)))
        o = hs.sparse_mla(q, cache, indices, indptr, scale=0.04)
        assert torch.equal(_bits(o), _bits(hipskinny.sparse_mla(q, cache, indices, indptr, scale=0.04)))
        assert torch.equal(_bits(o), _bits(hs.sparse_mla_decode(q, cache, indices, indptr, scale=0.04)))  # first name
        cases = [
            (hs.topk_softmax.default, (logits, 2, True), {}),
            (hs.topk_softmax_out.default,
             (logits, 2, False, torch.empty((2, 2)), torch.empty((2, 2), dtype=torch.int32)), {}),
            (hs.fused_moe.default, (x, w13, w2, tw, ids), {}),
            (hs.fused_moe_out.default, (x, w13, w2, tw, ids, *[None] * 6, torch.empty_like(x)), {}),
            (hs.w4a16_linear.default, (xw, p.qweight, p.scales, 32, None, p.zeros), {}),
            (hs.w4a16_linear_out.default, (xw, p.qweight, p.scales, 32, None, p.zeros, None, torch.empty_like(y)), {}),
            (hs.sparse_mla.default, (q, cache, indices, indptr), {"scale": 0.04}),
            (hs.sparse_mla_out.default, (q, cache, indices, indptr, None, None, None, None, torch.empty_like(o)),
             {"scale": 0.04}),
        ]
        for op, args, kwargs in cases:
            # test_schema left out: its checker multiplies every input, which CPU torch cannot do for uint32
            torch.library.opcheck(op, args, kwargs, test_utils=("test_faketensor", "test_autograd_registration",
                                                                "test_aot_dispatch_dynamic"))


def _moe_block(x, w13, w2, logits, qweight, scales, zeros, q, cache, indices, indptr, tw_out, ids_out):
    tw, ids = torch.ops.hipskinny.topk_softmax(logits, 2, True)
    h = torch.ops.hipskinny.fused_moe(x, w13, w2, tw, ids)
    y = torch.ops.hipskinny.w4a16_linear(torch.cat([h, h], 1), qweight, scales, 32, None, zeros)
    torch.ops.hipskinny.topk_softmax_out(logits * 2, 2, False, tw_out, ids_out)
    o = torch.ops.hipskinny.sparse_mla(q, cache, indices, indptr, scale=0.04)
    return y.float().relu() + tw.sum(), o.float().sum()


def test_compile_fullgraph_over_the_moe_and_mla_ops(dev):
    x, w13, w2, logits = _moe_inputs(seed=3)
    p = _prepared(24, 64, 32, seed=4)
    q, cache, indices, indptr = _mla_inputs(seed=5)
    args = (x, w13, w2, logits, p.qweight, p.scales, p.zeros, q, cache, indices, indptr)
    outs = torch.empty((2, 2)), torch.empty((2, 2), dtype=torch.int32)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with hipskinny.on_device(dev):
        eager_outs = tuple(t.clone() for t in outs)
        eager = _moe_block(*args, *eager_outs)
        got = torch.compile(_moe_block, fullgraph=True, backend=counter)(*args, *outs)
    assert counter.frame_count == 1
    called = {str(node.target).removesuffix(".default") for node in counter.graphs[0].graph.nodes}
    assert {"hipskinny.topk_softmax", "hipskinny.fused_moe", "hipskinny.w4a16_linear", "hipskinny.topk_softmax_out",
            "hipskinny.sparse_mla"} <= called
    for e, g in zip((*eager, *eager_outs), (*got, *outs), strict=True):
        assert torch.equal(e, g)


def _bad_calls():
    """(torch op, args, kwargs) whose shapes or dtypes break one of the op's rules."""
    hs = torch.ops.hipskinny
    x = torch.zeros((2, 64), dtype=torch.float16)
    w = torch.zeros((24, 64), dtype=torch.float16)
    w8 = torch.zeros((24, 64), dtype=torch.float8_e4m3fn)
    s = torch.ones((24,))
    p = _prepared(24, 64, 32, seed=0)
    mx, w13, w2, logits = _moe_inputs()
    tw, ids = torch.ones((2, 2)), torch.zeros((2, 2), dtype=torch.int64)
    q, cache, indices, indptr = _mla_inputs()
    packed = torch.zeros((24 * 32,), dtype=torch.uint8)
    absmax, code = torch.ones((24,)), torch.linspace(-1, 1, 16)
    return [
        (hs.gemv, (x[:1], w[:, :32]), {}),
        (hs.skinny_gemm, (x, w, torch.zeros((3, 24), dtype=torch.float16)), {}),
        (hs.skinny_gemm_out, (x, w, None, torch.empty((2, 25), dtype=torch.float16)), {}),
        (hs.fp8_linear, (x, w8, s, None, torch.ones(())), {}),
        (hs.matmul_4bit, (x.float(), packed, absmax, code, 64, [24, 64]), {}),
        (hs.w4a16_linear, (x, p.qweight, p.scales.bfloat16(), 32, None, p.zeros), {}),
        (hs.fused_moe, (mx, w13, w2, tw, ids), {}),
        (hs.topk_softmax, (logits, 4), {}),
        (hs.topk_softmax_out, (logits, 2, False, torch.empty((2, 2)), torch.empty((2, 2))), {}),
        (hs.sparse_mla_decode, (q.half(), cache, indices, indptr), {"scale": 0.04}),
        (hs.sparse_mla_decode, (q, cache, indices, indptr), {"scale": 0.04, "layout": "v5"}),
    ]


@pytest.mark.parametrize("device", ["fake", "meta"])
def test_fake_tensors_raise_the_ops_own_errors(device):
    """Every op's fake implementation applies the op's rules: the same exception type and message as
    the eager op (which raises them before any launch: no device needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    for op, args, kwargs in _bad_calls():
        with pytest.raises(hipskinny.HipSkinnyError) as eager:
            op(*args, **kwargs)
        mode = FakeTensorMode()
        moved = [a.to("meta") if device == "meta" and isinstance(a, torch.Tensor) else
                 mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(type(eager.value)) as faked:
            if device == "fake":
                with mode:
                    op(*moved, **kwargs)
            else:
                op(*moved, **kwargs)
        assert str(faked.value) == str(eager.value), op


def test_fake_validation_keeps_shapes_symbolic(dev):
    """Valid calls under dynamic shapes: one graph for two token counts (the rules check the example
    sizes and never specialize them)."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")

    def f(x, w13, w2, logits):
        tw, ids = torch.ops.hipskinny.topk_softmax(logits, 2)
        return torch.ops.hipskinny.fused_moe(x, w13, w2, tw, ids)

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    with hipskinny.on_device(dev):
        for n in (2, 3):                                 # (torch specializes sizes 0 and 1)
            args = _moe_inputs(n=n, seed=n)
            assert torch.equal(_bits(compiled(*args)), _bits(f(*args)))
    assert counter.frame_count == 1
