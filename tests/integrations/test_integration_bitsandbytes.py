"""hipskinny as bitsandbytes' 4-bit kernel (`hipskinny.integrations.bitsandbytes`), against the real
bitsandbytes: its own quantized weights and QuantState, its ``matmul_4bit``, ``Linear4bit`` and
autograd function, with hipskinny registered for torch's "cpu" device type and the emulator as the
device (each case on one of the five shipped archs, in turn).

Tolerance (derived, not tuned): the reference is float64 over bitsandbytes' own dequantized weight
in float32 (``code[q] * absmax``, exact products rounded once). hipskinny's lane-split kernel (N <=
8) multiplies by the unrounded codes; its split-K kernel (N >= 9) rounds each weight once to x's
dtype (unit roundoff u: 2**-11 fp16, 2**-8 bf16). Sums are fp32 (K + 10 roundings of 2**-24, the
decode of a nested absmax included), then one rounding to x's dtype: |y - ref| <= (u + (K + 10) *
2**-24) * sum|x w| + u * |ref| + the smallest subnormal.
"""

from __future__ import annotations

import functools
import json
import warnings

import paths
import pytest

torch = pytest.importorskip("torch")
bnbl = pytest.importorskip("bitsandbytes")

import hipskinny  # noqa: E402
from hipskinny.arch import SHIPPED_ARCHS  # noqa: E402
from hipskinny.emulator import EmulatedDevice  # noqa: E402
from hipskinny.integrations import bitsandbytes as hsbnb  # noqa: E402

F = bnbl.functional
K, M, BLOCKSIZE = 128, 48, 64
U = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@functools.cache
def _dev(arch: str) -> EmulatedDevice:
    return EmulatedDevice(arch, 2)


@pytest.fixture
def served():
    """hipskinny registered for "cpu" for the test, bitsandbytes' kernels back afterwards."""
    hsbnb.enable("cpu")
    try:
        yield
    finally:
        hsbnb.disable()


def _launched(dev: EmulatedDevice, since: object) -> list[str]:
    """Kernels the emulator ran after the launch record ``since`` (None: all it keeps)."""
    names = [s.kernel for s in dev.launches]
    ids = [id(s) for s in dev.launches]
    return names[ids.index(id(since)) + 1:] if since is not None and id(since) in ids else names


def _linear(n_in: int, n_out: int, dtype, quant_type: str, nested: bool, seed: int, bias: bool = True):
    torch.manual_seed(seed)
    lin = bnbl.nn.Linear4bit(n_in, n_out, bias=bias, compute_dtype=dtype, quant_type=quant_type,
                             compress_statistics=nested)
    lin.support_avx512bf16_for_cpu = False      # bitsandbytes' CPU packing would bypass its ops
    return lin.to(dtype).to("cpu")              # quantized by bitsandbytes on the move


def _bound(x, w32, bias, dtype):
    """(float64 reference, bound) for x @ w.T + bias with w bitsandbytes' float32 dequantized weight."""
    x64, w64 = x.double(), w32.double()
    ref = x64 @ w64.T + (0 if bias is None else bias.double())
    s = x64.abs() @ w64.abs().T + (0 if bias is None else bias.double().abs())
    u = U[dtype]
    return ref, (u + (x.shape[-1] + 10) * 2.0**-24) * s + u * ref.abs() + 2.0**-24


CASES = [(n, qt, nested, dt) for n in (1, 2, 8, 32, 64) for qt in ("nf4", "fp4") for nested in (False, True)
         for dt in (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("n, quant_type, nested, dtype", CASES,
                         ids=[f"n{n}-{qt}-{'nested' if ne else 'plain'}-{str(dt)[6:]}" for n, qt, ne, dt in CASES])
def test_forward_served_by_hipskinny(served, n, quant_type, nested, dtype):
    """bitsandbytes.matmul_4bit and Linear4bit's forward on hipskinny's kernels, within the bound of
    bitsandbytes' own dequantized weight."""
    arch = SHIPPED_ARCHS[(CASES.index((n, quant_type, nested, dtype))) % len(SHIPPED_ARCHS)]
    dev = _dev(arch)
    lin = _linear(K, M, dtype, quant_type, nested, seed=n)
    w, st = lin.weight, lin.weight.quant_state
    x = torch.randn(n, K, dtype=dtype)
    with hipskinny.on_device(dev), torch.no_grad():
        w32 = _dequantized_f32(w, st)
        since = dev.last_launch_stats
        y_fn = bnbl.matmul_4bit(x, w.t(), quant_state=st, bias=lin.bias)
        ran_fn = _launched(dev, since)
        since = dev.last_launch_stats
        y_mod = lin(x)
        ran_mod = _launched(dev, since)
    kernel = "matmul_4bit_" + ("splitk_" if n > 8 else "")
    assert len(ran_fn) == 1 and ran_fn[0].startswith(kernel), ran_fn
    assert len(ran_mod) == 1 and ran_mod[0].startswith(kernel), ran_mod
    assert y_fn.dtype == dtype and y_fn.shape == (n, M)
    assert torch.equal(y_fn, y_mod)
    ref, bound = _bound(x, w32, lin.bias, dtype)
    err = (y_fn.double() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())


def _dequantized_f32(w, st):
    """bitsandbytes' own dequantized weight in float32 (its CPU kernel: hipskinny serves 16-bit only)."""
    out = F.dequantize_4bit(w.data, st)          # in the weight's dtype, for the shape check
    assert out.shape == (M, K)
    absmax = st.absmax if not st.nested else F.dequantize_blockwise(st.absmax, st.state2) + st.offset
    return torch.ops.bitsandbytes.dequantize_4bit.default(w.data, absmax, st.blocksize, st.quant_type,
                                                           list(st.shape), torch.float32)


def test_codebooks_are_bitsandbytes():
    """gemm_4bit carries no codebook (its kernels hold NF4 and FP4): hipskinny's must be bitsandbytes'."""
    for qt, table in (("nf4", hipskinny.bnb.NF4), ("fp4", hipskinny.bnb.FP4)):
        assert torch.equal(torch.tensor(table), F.get_4bit_type(qt, device="cpu"))


@pytest.mark.parametrize("dtype, nested, arch", [(torch.float16, True, "gfx942"), (torch.bfloat16, False, "gfx1201")])
def test_qlora_backward(served, dtype, nested, arch):
    """The gradient w.r.t. the activations through bitsandbytes' autograd function (MatMul4Bit):
    forward on hipskinny's gemm kernel, backward dequantizing on hipskinny's kernel (bitsandbytes
    then multiplies with torch), against float64. Bound: the weight rounded once to x's dtype (u),
    torch's CPU matmul in fp32 sums (K + 10 roundings of 2**-24), one rounding of the result."""
    dev = _dev(arch)
    lin = _linear(K, M, dtype, "nf4", nested, seed=7)
    x = torch.randn(3, K, dtype=dtype, requires_grad=True)
    g = torch.randn(3, M, dtype=dtype)
    with hipskinny.on_device(dev):
        since = dev.last_launch_stats
        y = lin(x)
        y.backward(g)
        ran = _launched(dev, since)
    assert [r.split("_n")[0] for r in ran] == ["matmul_4bit_" + {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype],
                                               "dequantize_4bit_" + {torch.float16: "f16",
                                                                     torch.bfloat16: "bf16"}[dtype]], ran
    w32 = _dequantized_f32(lin.weight, lin.weight.quant_state)
    ref = g.double() @ w32.double()
    s = g.double().abs() @ w32.double().abs()
    u = U[dtype]
    bound = (2 * u + (M + 10) * 2.0**-24) * s + u * ref.abs() + 2.0**-24
    err = (x.grad.double() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert lin.weight.grad is None


def _bnb_own(fn, dequantize_as_its_fallback=False):
    """``fn()`` on bitsandbytes' own kernels (hipskinny's registration lifted for the call). With
    ``dequantize_as_its_fallback``, its CPU ``dequantize_4bit`` is the generic implementation that
    kernel itself falls back to (odd K, large blocks): see `_bnb_cpu_dequantize_is_right`."""
    hsbnb.disable()
    lib = None
    if dequantize_as_its_fallback:
        from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
        from bitsandbytes.backends.utils import _get_4bit_code

        def generic(A, absmax, blocksize, quant_type, shape, dtype):
            A = A if A.dtype == torch.uint8 else A.view(torch.uint8)
            return _dequantize_4bit_compute(A.reshape(-1), absmax, _get_4bit_code(quant_type, A.device), blocksize,
                                            shape, dtype)

        lib = torch.library.Library("bitsandbytes", "FRAGMENT")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)         # "overriding a previously registered kernel"
            lib.impl("dequantize_4bit", generic, "CPU")
    try:
        return fn()
    finally:
        if lib is not None:
            lib._destroy()
        hsbnb.enable("cpu")


@functools.cache
def _bnb_cpu_dequantize_is_right() -> bool:
    """Whether bitsandbytes' CPU ``dequantize_4bit`` agrees with its own generic implementation on a
    weight whose K is not a multiple of the blocksize. Its AVX512 kernel does not (bitsandbytes 0.50.2
    on an AVX512 machine: errors of 2.0 on N(0, 1) weights, the generic path 0.45), and hipskinny's
    kernel, which bitsandbytes' ``gemm_4bit`` calls, agrees with the generic one: the reference for
    such a call is then bitsandbytes with its CPU dequantize taking its own fallback."""
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    hsbnb.disable()
    try:
        w = torch.randn(8, 96, generator=torch.Generator().manual_seed(0), dtype=torch.float16)
        q, st = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
        generic = _dequantize_4bit_compute(q.view(torch.uint8).reshape(-1), st.absmax,
                                           _get_4bit_code("nf4", q.device), 64, st.shape, torch.float16)
        return bool(torch.equal(F.dequantize_4bit(q, st), generic))
    finally:
        hsbnb.enable("cpu")


def _fallback_cases():
    def lin(dtype=torch.float16, n_in=K, storage=torch.uint8):
        torch.manual_seed(3)
        m = bnbl.nn.Linear4bit(n_in, M, compute_dtype=dtype, quant_type="nf4", quant_storage=storage)
        m.support_avx512bf16_for_cpu = False
        return m.to(dtype).to("cpu")

    def forward(module, n, dtype):
        x = torch.randn(n, module.in_features, generator=torch.Generator().manual_seed(n), dtype=dtype)
        return lambda: module(x)

    f32, f16 = lin(torch.float32), lin()
    short_k = lin(n_in=96)                                    # K % blocksize != 0
    stored = lin(storage=torch.bfloat16)                      # quant_storage other than uint8
    x1 = torch.randn(1, K, dtype=torch.float32)
    st = f32.weight.quant_state
    return {
        "fp32 activations": forward(f32, 2, torch.float32),
        "N = 65": forward(f16, 65, torch.float16),
        "K not a multiple of the blocksize": forward(short_k, 2, torch.float16),
        "bf16 storage": forward(stored, 2, torch.float16),
        "gemv_4bit fp32": lambda: F.gemv_4bit(x1, f32.weight.t(), state=st),
        "gemv_4bit.out fp32 (no CPU kernel: functional, then copied)":
            lambda: F.gemv_4bit(x1, f32.weight.t(), out=torch.empty(1, M), state=st),
        "dequantize_4bit to fp32": lambda: F.dequantize_4bit(f32.weight.data, st),
        "dequantize_4bit.out to fp32 (no CPU kernel: functional, then copied)":
            lambda: F.dequantize_4bit(f32.weight.data, st, out=torch.empty(M, K)),
    }


# bitsandbytes registers no CPU kernel for the .out ops: their reference is the functional op's result.
FUNCTIONAL_TWIN = {"gemv_4bit.out fp32 (no CPU kernel: functional, then copied)": "gemv_4bit fp32",
                   "dequantize_4bit.out to fp32 (no CPU kernel: functional, then copied)": "dequantize_4bit to fp32"}


FALLBACKS = list(_fallback_cases())


class _Spy:
    """Stands in for a previous kernel: records that it was called, then calls it."""

    def __init__(self, kernel, op, calls):
        self.kernel, self.op, self.calls = kernel, op, calls

    def call_boxed(self, keyset, *args, **kwargs):
        self.calls.append(self.op)
        return self.kernel.call_boxed(keyset, *args, **kwargs)


@pytest.mark.parametrize("case", FALLBACKS)
def test_what_hipskinny_does_not_serve_reaches_bitsandbytes(served, case):
    """Each call hipskinny does not serve runs the kernel bitsandbytes had registered (a spy in
    front of it records the call; bitsandbytes' kernel may itself call an op hipskinny serves:
    its N > 64 path dequantizes through ``dequantize_4bit``), with the very bits bitsandbytes
    gives without hipskinny registered."""
    if case.startswith("gemv_4bit") and F.has_avx512bf16():
        pytest.skip(f"bitsandbytes {bnbl.__version__} on an AVX512-BF16 CPU registers a CPU gemv_4bit that takes "
                    "only its packed CPU weight format: on a plain weight it aborts the process ('Unexpected block "
                    "size'), as bitsandbytes' own call does without hipskinny")
    dev = _dev("gfx1100")
    cases = _fallback_cases()
    fn, reference = cases[case], cases[FUNCTIONAL_TWIN.get(case, case)]
    reg = hsbnb._registered["cpu"]
    calls: list[str] = []
    reg.previous = {op: k if k is None else _Spy(k, op, calls) for op, k in reg.previous.items()}
    with hipskinny.on_device(dev), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # bitsandbytes' "inner dimension not aligned"
        got = fn()
        want = _bnb_own(reference, dequantize_as_its_fallback=case == "K not a multiple of the blocksize"
                        and not _bnb_cpu_dequantize_is_right())
    op = "dequantize_4bit" if case.startswith("dequantize") else "gemv_4bit" if case.startswith("gemv") \
        else "gemm_4bit"
    assert calls and calls[0] == op, calls
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype, nested", [(torch.float16, False), (torch.bfloat16, True)])
def test_gemv_and_dequantize_served(served, dtype, nested):
    """bitsandbytes.functional.gemv_4bit (and .out) on the fused kernel; dequantize_4bit (and .out)
    on the dequantize kernel, bit for bit bitsandbytes' own result."""
    dev = _dev("gfx950")
    lin = _linear(K, M, dtype, "fp4", nested, seed=11)
    w, st = lin.weight, lin.weight.quant_state
    x = torch.randn(1, K, dtype=dtype)
    with hipskinny.on_device(dev), torch.no_grad():
        since = dev.last_launch_stats
        y = F.gemv_4bit(x, w.t(), state=st)
        out = torch.empty(1, M, dtype=dtype)
        assert F.gemv_4bit(x, w.t(), out=out, state=st) is out
        wd = F.dequantize_4bit(w.data, st)
        wd_out = torch.empty(M, K, dtype=dtype)
        F.dequantize_4bit(w.data, st, out=wd_out)
        ran = _launched(dev, since)
        own = _bnb_own(lambda: F.dequantize_4bit(w.data, st))
    tag = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    assert [r.split("_n")[0] for r in ran] == [f"matmul_4bit_{tag}"] * 2 + [f"dequantize_4bit_{tag}"] * 2, ran
    assert torch.equal(y, out)
    assert wd.dtype == dtype and torch.equal(wd, own) and torch.equal(wd_out, own)
    ref, bound = _bound(x, _dequantized_f32(w, st), None, dtype)
    assert bool(((y.double() - ref).abs() <= bound).all())


def test_served_counts_each_op(served):
    """``served()`` counts the calls hipskinny took per bitsandbytes op and Linear4bit's direct
    forward; what went to bitsandbytes' kernels (fp32 activations here) is not counted."""
    dev = _dev("gfx1201")
    lin = _linear(K, M, torch.float16, "nf4", False, seed=17)
    w, st = lin.weight, lin.weight.quant_state
    x = torch.randn(1, K, dtype=torch.float16)
    hsbnb.served(reset=True)
    with hipskinny.on_device(dev), torch.no_grad():
        lin(x)
        lin(x)                                  # the direct forward
        bnbl.matmul_4bit(x, w.t(), quant_state=st)
        F.gemv_4bit(x, w.t(), state=st)
        F.dequantize_4bit(w.data, st)
        F.dequantize_4bit(w.data, st, out=torch.empty(M, K, dtype=torch.float16))
        bnbl.matmul_4bit(x.float(), w.t(), quant_state=st)       # fp32: bitsandbytes' own kernels
    want = {"gemm_4bit": 1, "Linear4bit.forward": 2, "gemv_4bit": 1, "dequantize_4bit": 1,
            "dequantize_4bit.out": 1}
    assert hsbnb.served(reset=True) == want
    assert hsbnb.served() == {}


def test_enable_disable_and_state():
    """enable() on torch without ROCm says why; enable/disable/enabled; disable restores the very
    kernels bitsandbytes had; enable again works (the previous kernels captured afresh)."""
    assert not hsbnb.enabled()
    with pytest.raises(hipskinny.HipSkinnyError, match="not a ROCm build.*device_type='cpu'"):
        hsbnb.enable()
    with pytest.raises(hipskinny.HipSkinnyError, match="device_type must be 'cuda'.*or 'cpu'"):
        hsbnb.enable("xpu")
    dev = _dev("gfx1151")
    lin = _linear(K, M, torch.float16, "nf4", False, seed=5)
    x = torch.randn(1, K, dtype=torch.float16)
    with hipskinny.on_device(dev), torch.no_grad():
        own = lin(x)
        for _ in range(2):
            assert hsbnb.enable("cpu") == "cpu" and hsbnb.enable("cpu") == "cpu"
            assert hsbnb.enabled() and hsbnb.enabled("cpu") and not hsbnb.enabled("cuda")
            since = dev.last_launch_stats
            served_y = lin(x)
            assert [r.split("_n")[0] for r in _launched(dev, since)] == ["matmul_4bit_f16"]
            hsbnb.disable()
            assert not hsbnb.enabled()
            since = dev.last_launch_stats
            assert torch.equal(lin(x), own)
            assert _launched(dev, since) == []
    ref, bound = _bound(x, _dequantized_f32(lin.weight, lin.weight.quant_state), lin.bias, torch.float16)
    assert bool(((served_y.double() - ref).abs() <= bound).all())


def test_linear4bit_forward_goes_straight_to_hipskinny(served, monkeypatch):
    """While enabled, Linear4bit's decode forward calls hipskinny without bitsandbytes' Python
    (its matmul_4bit is never reached), with the bits of the path through bitsandbytes' forward and
    ops; the first call of a layer without a compute dtype (bitsandbytes' forward sets it) and a
    gradient-wanting call go through bitsandbytes' forward (non-uint8 storage: the fallback cases);
    a new weight is read afresh; disable puts bitsandbytes' own forward back."""
    dev = _dev("gfx942")
    through_bnb: list[int] = []
    own_matmul = bnbl.matmul_4bit
    monkeypatch.setattr(bnbl, "matmul_4bit", lambda *a, **k: through_bnb.append(1) or own_matmul(*a, **k))
    lin = _linear(K, M, torch.float16, "nf4", True, seed=13)
    other = _linear(K, M, torch.float16, "fp4", False, seed=14)
    x = torch.randn(2, K, dtype=torch.float16)
    own_forward = bnbl.nn.Linear4bit.forward.__wrapped__
    with hipskinny.on_device(dev):
        with torch.no_grad():
            since = dev.last_launch_stats
            fast = lin(x)
            assert not through_bnb and [r.split("_n")[0] for r in _launched(dev, since)] == ["matmul_4bit_f16"]
            assert torch.equal(fast, own_forward(lin, x)) and len(through_bnb) == 1
            lin.weight, lin.bias = other.weight, other.bias  # re-quantized / reloaded weight
            assert torch.equal(lin(x), own_forward(other, x)) and len(through_bnb) == 2
            torch.manual_seed(15)
            unset = bnbl.nn.Linear4bit(K, M, quant_type="nf4")   # no compute dtype: the first call sets it
            unset.support_avx512bf16_for_cpu = False
            unset = unset.to(torch.float16).to("cpu")
            first = unset(x)
            assert len(through_bnb) == 3 and unset.compute_type_is_set
            assert torch.equal(unset(x), first) and len(through_bnb) == 3
        xg = x.clone().requires_grad_()
        lin(xg).sum().backward()                              # autograd: bitsandbytes' function
        assert len(through_bnb) == 4 and xg.grad is not None
    hsbnb.disable()
    assert bnbl.nn.Linear4bit.forward is own_forward
    hsbnb.enable("cpu")
    assert bnbl.nn.Linear4bit.forward.__wrapped__ is own_forward


def test_torch_compile_of_linear4bit(served):
    """torch.compile of a Linear4bit forward (inductor) runs hipskinny's kernel through the
    registration, with the eager result's bits."""
    dev = _dev("gfx1100")
    lin = _linear(K, M, torch.float16, "nf4", True, seed=9)
    x = torch.randn(4, K, dtype=torch.float16)
    torch._dynamo.reset()
    compiled = torch.compile(lin, fullgraph=True)
    with hipskinny.on_device(dev), torch.no_grad():
        eager = lin(x)
        since = dev.last_launch_stats
        got = compiled(x)
        ran = _launched(dev, since)
    assert [r.split("_n")[0] for r in ran] == ["matmul_4bit_f16"], ran
    assert torch.equal(got, eager)


TESTS = str(paths.TESTS)
CAPTURE = r"""
import json, sys
sys.path.insert(0, TESTS_DIR)
import torch, bitsandbytes, hipskinny
from fakehip.emulated import install
from fakehip.torch_seam import Capture, Pool, dev
from hipskinny.integrations import bitsandbytes as hsbnb

runtime = install()
pool = Pool(1 << 20)           # outputs from one allocation made before the capture, as torch's graph pool
cap = Capture(pool.empty)

torch.manual_seed(0)
lin = bitsandbytes.nn.Linear4bit(256, 64, compute_dtype=torch.float16, quant_type="nf4", compress_statistics=True)
lin.support_avx512bf16_for_cpu = False
lin = lin.to(torch.float16).to("cpu")
st = lin.weight.quant_state
lin.weight.data = dev(lin.weight.data)
lin.bias.data = dev(lin.bias.data)
st.code, st.absmax, st.offset = dev(st.code), dev(st.absmax), dev(st.offset)
st.state2.absmax, st.state2.code = dev(st.state2.absmax), dev(st.state2.code)
xs = [dev(torch.randn(n, 256, dtype=torch.float16)) for n in (1, 16)]

hsbnb.enable("cpu")
with torch.no_grad():
    cap.current = cap.stream
    eager = [lin(x).clone() for x in xs]           # warm-up on the capture stream: codebooks, scratch
    print("MARK capture", flush=True)
    captured = []
    g = cap.capture(lambda: captured.extend(lin(x) for x in xs))
    print("MARK replay", flush=True)
    before = [bool(float(y.abs().max()) == 0) for y in captured]
    cap.replay(g)
res = {"before_replay_zero": before, "equal": [bool(torch.equal(a, b)) for a, b in zip(captured, eager)],
       "kernels": [l.kernel for l in runtime.device.launches], "errors": runtime.errors}
print("RES", json.dumps(res))
"""


def test_captured_linear4bit_forward_replays(fakehip_run):
    """A Linear4bit forward (N = 1: lane-split; N = 16: split-K with scratch) captured in a HIP graph
    on the fake runtime, GPU tensors through the test seam: between begin and end of the capture
    the runtime sees kernel launches only (no allocation, copy or synchronization), the outputs
    stay untouched until the graph runs, and the replay gives the eager bits."""
    run = fakehip_run(CAPTURE.replace("TESTS_DIR", repr(TESTS)),
                      env={"FAKEHIP_ARCH": "gfx942", "FAKEHIP_CU_COUNT": "2"}, timeout=300)
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["errors"] == []
    begin = next(i for i, r in enumerate(run.records) if r["fn"] == "hipStreamBeginCapture")
    end = next(i for i, r in enumerate(run.records) if r["fn"] == "hipStreamEndCapture")
    inside = run.records[begin + 1:end]
    assert [r["fn"] for r in inside] == ["hipModuleLaunchKernel"] * 2, [r["fn"] for r in inside]
    assert all(r.get("captured") and r["ret"] == 0 for r in inside)
    assert [r["kernel"].split("_n")[0].split("_t")[0] for r in inside] == ["matmul_4bit_f16",
                                                                          "matmul_4bit_splitk_f16"]
    assert res["before_replay_zero"] == [True, True]
    assert res["equal"] == [True, True]


def test_default_device_type_checks_rocm_and_every_gpus_arch(monkeypatch):
    """enable() with no device type: ROCm torch whose every GPU has a shipped arch gets "cuda"; a
    GPU of another arch, or none, is refused, saying which (torch's ROCm facts faked: no ROCm here)."""
    props = {"archs": ["gfx942:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"]}

    class Props:
        def __init__(self, i):
            self.gcnArchName = props["archs"][i]

    monkeypatch.setattr(torch.version, "hip", "7.2.0", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props["archs"]))
    monkeypatch.setattr(torch.cuda, "get_device_properties", Props)
    with pytest.raises(hipskinny.UnsupportedArchError, match="GPU 1 is gfx90a; hipskinny ships code objects for"):
        hsbnb.enable()
    props["archs"] = []
    with pytest.raises(hipskinny.HipSkinnyError, match="ROCm torch sees no GPU"):
        hsbnb.enable()
    props["archs"] = ["gfx942:sramecc+:xnack-", "gfx1201"]
    try:
        assert hsbnb.enable() == "cuda" and hsbnb.enabled("cuda") and not hsbnb.enabled("cpu")
    finally:
        hsbnb.disable()
    assert not hsbnb.enabled()
