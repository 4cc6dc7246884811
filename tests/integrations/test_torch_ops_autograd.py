"""Gradients w.r.t. activations and bias (hipskinny.autograd), through torch.ops.hipskinny.<op> and through the
Python entries on torch tensors, against float64 torch autograd of the exact computation (CPU tensors, the
emulator as the device).

Tolerances from the accumulation model: grad_x = grad_y @ W with W rounded at most once to x's dtype (the
quantized weights) and fp32 sums rounded once, so |err| <= (eps + K * 2**-24) * sum|terms| (eps: the dtype's
machine epsilon = 2 unit roundoffs, one for the weights, one for the result; K: the terms per sum) plus the
dtype's smallest subnormal (results that round in the subnormal range). grad_bias: fp32 sums over N tokens,
one rounding: (eps / 2 + N * 2**-24) * sum|grad_y|.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hipskinny
from hipskinny import bnb, fp8, w4a16
from hipskinny.ops.matmul_4bit import dequantize_exact

EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
TINY = {torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133}


@pytest.fixture(scope="module", autouse=True)
def dev():
    # the cached device of this spec: shares the code objects test_torch_ops loaded (loading dominates here)
    with hipskinny.on_device("emulator:gfx1201:2") as d:
        yield d


def _rand(shape, seed, dtype, scale=1.0):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def _assert_linear_grads(y, x, bias, w64, seed=99):
    """Backward of y (= x @ W.T + bias) with a random grad_y against float64, within the model's bound."""
    gy = _rand(y.shape, seed, y.dtype)
    y.backward(gy)
    dt, m = x.dtype, w64.shape[0]
    g64 = gy.double().reshape(-1, m)
    want = (g64 @ w64).reshape(x.shape)
    terms = (g64.abs() @ w64.abs()).reshape(x.shape)
    err = (x.grad.double() - want).abs()
    bound = (EPS[dt] + m * 2.0**-24) * terms + TINY[dt]
    assert x.grad.dtype == dt and bool((err <= bound).all()), float((err - bound).max())
    if bias is not None:
        n = g64.shape[0]
        per_token = tuple(bias.shape) == (n, m) and n > 1
        want_b = (g64 if per_token else g64.sum(0)).reshape(bias.shape)
        terms_b = (g64.abs() if per_token else g64.abs().sum(0)).reshape(bias.shape)
        err_b = (bias.grad.double() - want_b).abs()
        assert bool((err_b <= (EPS[dt] / 2 + n * 2.0**-24) * terms_b + TINY[dt]).all())


def _leaf(t):
    return t.clone().requires_grad_(True)


@pytest.mark.parametrize("via", ["python", "torch.ops"])
def test_gemv_and_skinny_gemm(via):
    for op, xs, bs, dt in (("gemv", (1, 40), (24,), torch.float16),
                           ("skinny_gemm", (2, 3, 40), (6, 24), torch.bfloat16)):
        x, w, b = _leaf(_rand(xs, 1, dt)), _rand((24, 40), 2, dt, 0.2), _leaf(_rand(bs, 3, dt))
        fn = getattr(hipskinny, op) if via == "python" else getattr(torch.ops.hipskinny, op)
        y = fn(x, w, b)
        assert y.grad_fn is not None
        _assert_linear_grads(y, x, b, w.double())


@pytest.mark.parametrize("via", ["python", "torch.ops"])
def test_fp8_linear_w8a16(via):
    w8, ws = fp8.quantize(_rand((24, 64), 4, torch.float32), granularity="channel", flavor="ocp")
    x, b = _leaf(_rand((3, 64), 5, torch.float16)), _leaf(_rand((24,), 6, torch.float16))
    y = (hipskinny.fp8_linear(x, w8, ws, bias=b) if via == "python"
         else torch.ops.hipskinny.fp8_linear(x, w8, ws, b))
    w64 = torch.from_numpy(fp8.decode(w8.view(torch.uint8).numpy(), "ocp")) * ws.double()[:, None]
    _assert_linear_grads(y, x, b, w64)


@pytest.mark.parametrize("via", ["python", "torch.ops"])
def test_matmul_4bit(via):
    packed, st = bnb.quantize_4bit(_rand((24, 64), 7, torch.float32), blocksize=64, quant_type="nf4",
                                   compress_statistics=True)
    x, b = _leaf(_rand((2, 64), 8, torch.bfloat16)), _leaf(_rand((1, 24), 9, torch.bfloat16))
    if via == "python":
        y = hipskinny.matmul_4bit(x, packed, st, b)
    else:
        y = torch.ops.hipskinny.matmul_4bit(x, packed, st.absmax, st.code, 64, [24, 64], b, st.state2.absmax,
                                            st.state2.code, st.offset)
    _assert_linear_grads(y, x, b, torch.from_numpy(dequantize_exact(packed, st)))


def _w4a16_layer(m, k, g, seed, experts=None):
    """Checkpoint tensors (asymmetric, act-order), their float64 weights and the prepared torch weight."""
    rng = np.random.default_rng(seed)
    lead = () if experts is None else (experts,)
    codes = rng.integers(0, 16, (*lead, m, k))
    zeros = rng.integers(1, 17, (*lead, m, k // g))            # GPTQ v1 stores z - 1
    scales = (rng.uniform(0.002, 0.02, (*lead, m, k // g)) * rng.choice([-1, 1], (*lead, m, k // g)))
    scales = scales.astype(np.float16)
    g_idx = np.stack([(rng.permutation(k) // g).astype(np.int32) for _ in range(experts or 1)])
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt="gptq", group_size=g,
                                 g_idx=g_idx if experts else g_idx[0])
    dense = w4a16.dequantize_checkpoint(**ckpt, fmt="gptq", group_size=g)
    prepared = w4a16.prepare(**ckpt, fmt="gptq", group_size=g, dtype=np.float16).map(torch.from_numpy)
    return torch.from_numpy(dense), prepared


@pytest.mark.parametrize("via", ["python", "torch.ops"])
def test_w4a16_linear(via):
    w64, p = _w4a16_layer(24, 64, 32, seed=10)
    x, b = _leaf(_rand((2, 64), 11, torch.float16)), _leaf(_rand((24,), 12, torch.float16))
    y = (hipskinny.w4a16_linear(x, p, b) if via == "python"
         else torch.ops.hipskinny.w4a16_linear(x, p.qweight, p.scales, 32, b, p.zeros, p.perm))
    _assert_linear_grads(y, x, b, w64)


def _moe_reference(x64, tw64, ids, w13_64, w2_64):
    """The layer in float64 without intermediate roundings."""
    i = w13_64.shape[1] // 2
    out = torch.zeros_like(x64)
    for t in range(x64.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gu = w13_64[e] @ x64[t]
            act = torch.nn.functional.silu(gu[:i]) * gu[i:]
            out[t] = out[t] + tw64[t, j] * (w2_64[e] @ act)
    return out


@pytest.mark.parametrize("int4", [False, True], ids=["16bit", "int4"])
def test_fused_moe_grad_x_and_topk_weights(int4):
    n, h, i, e, k = 3, 32, 32, 3, 2
    x = _leaf(_rand((n, h), 13, torch.float16))
    ids = torch.tensor([[0, 2], [1, 0], [2, -1]], dtype=torch.int32)         # -1: a skipped slot
    tw = _leaf(torch.rand((n, k), generator=torch.Generator().manual_seed(14)) + 0.1)
    if int4:
        w13_64, w13 = _w4a16_layer(2 * i, h, 32, seed=15, experts=e)
        w2_64, w2 = _w4a16_layer(h, i, 32, seed=16, experts=e)
        w13_64, w2_64 = w13_64 * 4, w2_64 * 4
        w13, w2 = (p.map(lambda a: a * 4 if a.dtype == torch.float16 else a) for p in (w13, w2))
    else:
        w13, w2 = _rand((e, 2 * i, h), 15, torch.float16, 0.2), _rand((e, h, i), 16, torch.float16, 0.2)
        w13_64, w2_64 = w13.double(), w2.double()
    y = hipskinny.moe.fused_moe(x, w13, w2, tw, ids)
    assert y.grad_fn is not None
    gy = _rand(y.shape, 17, torch.float16)
    y.backward(gy)
    x64, tw64 = x.detach().double().requires_grad_(True), tw.detach().double().requires_grad_(True)
    ids_ref = ids.clone()
    mask = ids_ref >= 0
    ref = _moe_reference(x64, tw64 * mask, ids_ref.clamp(min=0), w13_64, w2_64)
    ref.backward(gy.double())
    # |terms|: the same chain on absolute values (gate/up sums of H terms, silu' <= 1.1, the down projection
    # of I terms, the top-k sum); all in fp32 from the exact weights, then one rounding of grad_x.
    xa = x64.detach().abs()
    ta = tw64.detach().abs() * mask
    terms_x = torch.zeros_like(xa)
    terms_w = torch.zeros_like(ta)
    for t in range(n):
        for j in range(k):
            if not mask[t, j]:
                continue
            ex = int(ids[t, j])
            gu = w13_64[ex].abs() @ xa[t]
            dact = w2_64[ex].abs().T @ (gy[t].double().abs() * ta[t, j])
            terms_x[t] += w13_64[ex].abs().T @ torch.cat([dact * gu[i:] * 1.1, dact * gu[:i]])
            terms_w[t, j] = (gy[t].double().abs() * (w2_64[ex].abs() @ (gu[:i] * gu[i:]))).sum()
    chain = (2 * h + 2 * i + 8) * 2.0**-24
    err_x = (x.grad.double() - x64.grad).abs()
    assert bool((err_x <= (EPS[torch.float16] / 2 + chain) * terms_x + TINY[torch.float16]).all())
    err_w = (tw.grad.double() - tw64.grad).abs()
    assert bool((err_w <= (chain + h * 2.0**-24) * terms_w).all())


def test_a_weight_that_requires_grad_is_refused():
    x = _leaf(_rand((1, 32), 18, torch.float16))
    w = _rand((8, 32), 19, torch.float16).requires_grad_(True)
    for call in (lambda: hipskinny.gemv(x, w), lambda: torch.ops.hipskinny.skinny_gemm(x.detach(), w)):
        with pytest.raises(hipskinny.InputValueError, match="w requires grad.*frozen.*detach"):
            call()
    w8, ws = fp8.quantize(w.detach().float(), granularity="channel", flavor="ocp")
    with pytest.raises(hipskinny.InputValueError, match="w_scale requires grad.*frozen"):
        hipskinny.fp8_linear(x, w8, ws.requires_grad_(True))
    with torch.no_grad():                                     # no autograd: no check, no routing
        assert hipskinny.gemv(x, w).grad_fn is None


def test_out_with_grad_and_w8a8_are_refused():
    x = _leaf(_rand((1, 32), 20, torch.float16))
    w = _rand((8, 32), 21, torch.float16)
    with pytest.raises(hipskinny.InputValueError, match="out= does not support autograd"):
        hipskinny.skinny_gemm(x, w, out=torch.empty((1, 8), dtype=torch.float16))
    w8, ws = fp8.quantize(w.float(), granularity="tensor", flavor="ocp")
    x8, xs = fp8.quantize(x.detach().float(), granularity="tensor", flavor="ocp")
    with pytest.raises(hipskinny.InputValueError, match="W8A16"):
        torch.ops.hipskinny.fp8_linear(x8.requires_grad_(True), w8, ws, None, xs)


def test_compiled_training_step_matches_eager():
    """aot_eager traces forward and backward through the ops (fullgraph), same grads as eager."""
    w, w2 = _rand((24, 40), 22, torch.float16, 0.2), _rand((16, 24), 23, torch.float16, 0.2)

    def step(x, b):
        h = torch.ops.hipskinny.skinny_gemm(x, w, b).relu()
        return torch.ops.hipskinny.gemv(h[:1], w2).float().square().sum()

    grads = []
    for fn in (step, torch.compile(step, fullgraph=True, backend="aot_eager")):
        x, b = _leaf(_rand((2, 40), 24, torch.float16)), _leaf(_rand((24,), 25, torch.float16))
        fn(x, b).backward()
        grads.append((x.grad, b.grad))
    for e, c in zip(*grads, strict=True):
        assert torch.equal(e, c)


def test_compiled_backward_through_quantized_and_moe_ops():
    """Backward's dequantize and MoE halves are custom ops themselves (linear_grad_x, moe_grad): compiled
    (fullgraph, aot_eager) gradients equal eager ones."""
    packed, st = bnb.quantize_4bit(_rand((32, 64), 26, torch.float32), blocksize=64, quant_type="nf4")
    w13, w2 = _rand((2, 64, 32), 27, torch.float16, 0.2), _rand((2, 32, 32), 28, torch.float16, 0.2)
    ids = torch.tensor([[0, 1], [1, 0]], dtype=torch.int32)

    def step(x, tw):
        h = torch.ops.hipskinny.matmul_4bit(x, packed, st.absmax, st.code, 64, [32, 64])
        return torch.ops.hipskinny.fused_moe(h, w13, w2, tw, ids).float().square().sum()

    grads = []
    for fn in (step, torch.compile(step, fullgraph=True, backend="aot_eager")):
        x, tw = _leaf(_rand((2, 64), 29, torch.float16)), _leaf(torch.full((2, 2), 0.5))
        fn(x, tw).backward()
        grads.append((x.grad, tw.grad))
    for e, c in zip(*grads, strict=True):
        assert torch.equal(e, c)
