"""hipskinny.integrations.transformers on tiny randomly initialised transformers models (built from
configs here, nothing downloaded), run on the emulator.

Pairing: fp16 on gfx1100 (wave32, WMMA) and bf16 on gfx942 (wave64, MFMA). The full product (both
dtypes on both archs) doubles the emulated work and blows the 4-minute budget these tests have
(the pairing takes about 3 minutes on a shared 2-core machine).

End-to-end bound (derived, not tuned). Every op hipskinny serves here computes a linear layer as
exact products summed in fp32 and rounded once to the 16-bit output (skinny_gemm, fp8_linear
W8A16 on the exact FP8 weights, matmul_4bit, fused_moe with vLLM's silu_and_mul rounding), which is
the accumulation model of torch's CPU kernels for the unaccelerated model too (16-bit GEMMs summed
in fp32, one rounding). So both are the same rounding of the same float64 network (the exact
model: the same weights, dequantized exactly, in float64): the accelerated logits' distance to
the exact ones has the bound the unaccelerated model's has. The reference's own error E_ref =
max |ref - exact| is a realised sample of that bound, not its maximum, so the accelerated logits
may stray 2 E_ref from the exact ones (a fixed factor, not fitted to the results). For the
quantized models the unaccelerated reference is the one torch runs here: the FP8 model dequantized
to 16-bit (transformers' ``dequantize=True``; its FP8 kernels need a GPU) and the NF4 model on
bitsandbytes' CPU kernels. A greedy continuation is decided when every step's top-1 exact logit leads the
runner-up by more than 2 x 2 E_ref (then neither path can swap them): asserted, so the seeds are
free of near-ties, and the accelerated continuation must equal the reference's.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.integrations.finegrained_fp8 import FP8Linear
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

import hipskinny
from hipskinny import fp8, w4a16
from hipskinny.integrations import transformers as ht

PAIRS = [pytest.param(torch.float16, "gfx1100", id="fp16-gfx1100"),
         pytest.param(torch.bfloat16, "gfx942", id="bf16-gfx942")]
# Seeds (model weights and prompt) whose greedy continuations have no near-tie (asserted in
# `_bound_and_margin`): random tiny models often have two logits closer than bf16's rounding.
SEEDS = {("llama", torch.float16): 1, ("llama", torch.bfloat16): 23, ("fp8", torch.float16): 3,
         ("fp8", torch.bfloat16): 23, ("moe", torch.float16): 0, ("moe", torch.bfloat16): 23,
         ("nf4", torch.float16): 1, ("nf4", torch.bfloat16): 20}
PROMPT, NEW = 3, 8
CUS = 1                 # one emulated CU: the fewest workgroups, the least emulated work
VOCAB = 64
LOG = "hipskinny.integrations.transformers"


def _tag(dtype):
    return "f16" if dtype == torch.float16 else "bf16"


def _llama(dtype, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
                      initializer_range=0.1)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _qwen3_moe(dtype, seed):
    torch.manual_seed(seed)
    cfg = Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         num_experts=8, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, max_position_embeddings=256, initializer_range=0.1)
    return Qwen3MoeForCausalLM(cfg).to(dtype).eval()


def _prompt(seed):
    return torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(seed))


def _exact(model):
    """The float64 twin: the same weights, widened exactly."""
    twin = copy.deepcopy(model).to(torch.float64)
    if hasattr(twin, "set_experts_implementation"):
        twin.set_experts_implementation("eager")
    return twin


def _generate(model, ids):
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=NEW, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.sequences, torch.stack([lg[0] for lg in out.logits]).double()


def _exact_logits(twin, seq):
    """The exact model's logits for each generated step (teacher-forced on ``seq``)."""
    with torch.no_grad():
        return twin(seq).logits[0, PROMPT - 1:-1].double()


def _bound_and_margin(ref_logits, exact):
    """2 E_ref (module docstring), after asserting the continuation is decided by it."""
    bound = 2 * float((ref_logits - exact).abs().max())
    top2 = exact.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    assert margin > 2 * bound, f"near-tie: margin {margin} against 2 x bound {2 * bound}; pick another seed"
    return bound


@contextmanager
def _recording(arch):
    """Run host tensors on the emulated arch and keep every launch record of the block (the device
    keeps only its last 64)."""
    with hipskinny.on_device(f"emulator:{arch}:{CUS}") as dev:
        saved = dev.launches
        dev.launches = []
        try:
            yield dev
        finally:
            dev.launches = saved


@contextmanager
def _per_module(dev, modules):
    """``{name: [kernel, ...]}``: the kernels launched inside each module's forward."""
    got, start, handles = defaultdict(list), {}, []
    def before(name):
        return lambda mod, args: start.__setitem__(name, len(dev.launches))

    def after(name):
        return lambda mod, args, out: got[name].extend(s.kernel for s in dev.launches[start[name]:])

    for name, m in modules.items():
        handles += [m.register_forward_pre_hook(before(name)), m.register_forward_hook(after(name))]
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def _stem(kernel):
    """A kernel's name without its tile variant (``_y<YTILE>``)."""
    return kernel.rsplit("_y", 1)[0] if kernel.rsplit("_", 1)[-1].startswith("y") else kernel


def _check_run(model, reference, ids, twin, dev, modules, expect):
    """Generate with the accelerated ``model``; compare with the unaccelerated ``reference``
    (`_generate`'s result, computed before `accelerate`) and the exact model's logits (bound of the
    module docstring), and check which kernels served each module: ``expect(name, step_tokens)``
    gives the stems of the kernels a module's call on N tokens launches."""
    ref_seq, ref_logits = reference
    exact = _exact_logits(twin, ref_seq)
    bound = _bound_and_margin(ref_logits, exact)
    with _per_module(dev, modules) as got:
        seq, logits = _generate(model, ids)
    assert torch.equal(seq, ref_seq)
    err = float((logits - exact).abs().max())
    assert err <= bound, f"accelerated logits {err} from the exact model; bound {bound}"
    for name in modules:
        # the prompt's N tokens, then one per step; lm_head sees the last position only
        steps = [1 if name == "lm_head" else PROMPT] + [1] * (NEW - 1)
        assert [_stem(k) for k in got[name]] == [s for n in steps for s in expect(name, n)], name
    assert sum(len(v) for v in got.values()) == len(dev.launches)      # nothing ran outside them
    return got


# ----------------------------------------------------------------------------------------------
# Llama: nn.Linear, FP8Linear, bitsandbytes Linear4bit


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_llama_linear_layers(dtype, arch):
    seed = SEEDS["llama", dtype]
    model, ids = _llama(dtype, seed), _prompt(seed)
    ref = copy.deepcopy(model)
    reference = _generate(ref, ids)
    before = {k: (v.data_ptr(), v.clone()) for k, v in model.state_dict().items()}
    with _recording(arch) as dev:
        ht.accelerate(model)
        served = ht.accelerated(model)
        assert sorted(served) == sorted(n for n, m in model.named_modules() if isinstance(m, nn.Linear))
        assert set(served.values()) == {"skinny_gemm"}
        mods = dict(model.named_modules())
        _check_run(model, reference, ids, _exact(ref), dev, {n: mods[n] for n in served},
                   lambda name, n: [f"skinny_gemm_{_tag(dtype)}_n{n}"])
    ht.restore(model)
    assert not any("forward" in m.__dict__ for m in model.modules())
    after = model.state_dict()
    assert after.keys() == before.keys()
    for k, (ptr, v) in before.items():           # used in place, untouched
        assert after[k].data_ptr() == ptr and torch.equal(after[k], v), k
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


def _to_fp8(model, block):
    """The model with its MLP projections as transformers' FP8Linear (e4m3fn weights,
    ``weight_scale_inv`` per 128x128 block or per tensor, as a finegrained-FP8 checkpoint holds
    them; attention and lm_head stay 16-bit, as ``modules_to_not_convert`` would keep them: the
    W8A16 kernels are the slowest to emulate, and the budget does not cover them everywhere), and
    its unaccelerated reference: the same FP8 weights dequantized to the model's dtype."""
    dtype = model.dtype
    ref = copy.deepcopy(model)
    exact = _exact(model)
    for name, m in list(model.named_modules()):
        if type(m) is not nn.Linear or ".mlp." not in name:
            continue
        q, s = fp8.quantize(m.weight.detach(), granularity="block" if block else "tensor", flavor="ocp")
        f = FP8Linear(m.in_features, m.out_features, block_size=(128, 128) if block else None)
        f.weight = nn.Parameter(q, requires_grad=False)
        f.weight_scale_inv = nn.Parameter(s, requires_grad=False)
        model.set_submodule(name, f)
        exact.get_submodule(name).weight.data = _fp8_exact(q, s)
        ref.get_submodule(name).weight.data = _fp8_exact(q, s).to(dtype)
    return model, ref, exact


def _fp8_exact(q, s):
    """FP8 weights times their scales (per tensor or per 128x128 block), exactly (float64)."""
    m, k = q.shape
    if s.numel() == 1:
        return q.double() * s.double()
    return q.double() * s.double().repeat_interleave(128, 0)[:m].repeat_interleave(128, 1)[:, :k]


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_llama_fp8(dtype, arch):
    block = dtype == torch.float16          # 128x128 blocks on one pairing, per tensor on the other
    seed = SEEDS["fp8", dtype]
    model, ref, twin = _to_fp8(_llama(dtype, seed), block)
    ids = _prompt(seed)
    reference = _generate(ref, ids)
    flavor = "ocp_block" if block else "ocp"
    with _recording(arch) as dev:
        ht.accelerate(model)
        served = ht.accelerated(model)
        fp8_layers = {n for n, m in model.named_modules() if isinstance(m, FP8Linear)}
        assert len(fp8_layers) == 6 and len(served) == 15
        assert fp8_layers == {n for n, v in served.items() if v == "fp8_linear"}
        mods = dict(model.named_modules())
        _check_run(model, reference, ids, twin, dev, {n: mods[n] for n in served},
                   lambda name, n: [f"fp8_linear_{_tag(dtype)}_{flavor}_n{n}" if served[name] == "fp8_linear"
                                    else f"skinny_gemm_{_tag(dtype)}_n{n}"])
    ht.restore(model)
    assert not any("forward" in m.__dict__ for m in model.modules())


def _to_nf4(model):
    """The model with every nn.Linear but lm_head as bitsandbytes' Linear4bit (NF4, quantized by
    bitsandbytes from the 16-bit weights), and its exact twin (the NF4 weights dequantized in fp32:
    code * absmax, exact to 2**-24, then float64)."""
    import bitsandbytes as bnb

    dtype = model.dtype
    for name, m in list(model.named_modules()):
        if type(m) is not nn.Linear or name == "lm_head":
            continue
        q = bnb.nn.Linear4bit(m.in_features, m.out_features, bias=False, compute_dtype=dtype, quant_type="nf4",
                              device="meta")
        q.weight = bnb.nn.Params4bit(m.weight.detach().clone(), requires_grad=False, quant_type="nf4").to("cpu")
        model.set_submodule(name, q)
    twin = copy.deepcopy(model)
    for name, m in list(twin.named_modules()):
        if isinstance(m, bnb.nn.Linear4bit):
            state = copy.copy(m.weight.quant_state)
            state.dtype = torch.float32
            w = bnb.functional.dequantize_4bit(m.weight.data, state).double()
            lin = nn.Linear(m.in_features, m.out_features, bias=False, dtype=torch.float64)
            lin.weight.data = w
            twin.set_submodule(name, lin)
    return model, twin.to(torch.float64)


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_llama_bnb_4bit(dtype, arch):
    from hipskinny.integrations import bitsandbytes as hb

    seed = SEEDS["nf4", dtype]
    model, twin = _to_nf4(_llama(dtype, seed))
    ids = _prompt(seed)
    reference = _generate(model, ids)          # bitsandbytes' own CPU kernels
    assert not hb.enabled("cpu")
    with _recording(arch) as dev:
        ht.accelerate(model)
        assert hb.enabled("cpu")
        served = ht.accelerated(model)
        mods = dict(model.named_modules())
        watch = {n: m for n, m in mods.items() if n == "lm_head" or type(m).__name__ == "Linear4bit"}
        assert len(watch) == 15
        # Linear4bit's decode calls go straight to matmul_4bit (its forward patched); the rest would
        # take bitsandbytes' forward, served through integrations.bitsandbytes
        assert served == {n: "skinny_gemm" if n == "lm_head" else "matmul_4bit" for n in watch}
        _check_run(model, reference, ids, twin, dev, watch,
                   lambda name, n: [f"skinny_gemm_{_tag(dtype)}_n{n}" if name == "lm_head"
                                    else f"matmul_4bit_{_tag(dtype)}_n{n}"])
    ht.restore(model)
    assert not hb.enabled("cpu")
    assert torch.equal(_generate(model, ids)[1], reference[1])


def test_bnb_ops_left_as_accelerate_found_them():
    """accelerate enables hipskinny's bitsandbytes ops only when they are not enabled, and restore
    disables them only when accelerate enabled them."""
    from hipskinny.integrations import bitsandbytes as hb

    model, _ = _to_nf4(_llama(torch.float16, 0))
    plain = _llama(torch.float16, 0)
    assert not hb.enabled("cpu")
    ht.restore(ht.accelerate(plain))                      # no Linear4bit: nothing enabled
    assert not hb.enabled("cpu")
    hb.enable("cpu")
    try:
        ht.accelerate(model)
        ht.restore(model)
        assert hb.enabled("cpu")
    finally:
        hb.disable("cpu")
    ht.accelerate(model)
    assert hb.enabled("cpu")
    ht.restore(model)
    assert not hb.enabled("cpu")


# ----------------------------------------------------------------------------------------------
# Qwen3-MoE: the experts backend (and its attention's nn.Linear layers)


@pytest.mark.parametrize("dtype,arch", PAIRS)
def test_qwen3_moe_experts_backend(dtype, arch):
    from hipskinny.ops import fused_moe

    seed = SEEDS["moe", dtype]
    model, ids = _qwen3_moe(dtype, seed), _prompt(seed)
    reference = _generate(model, ids)               # transformers' default experts (grouped_mm)
    twin = _exact(model)
    ht.register()
    model.set_experts_implementation("hipskinny")
    assert model.config._experts_implementation == "hipskinny"
    cfg, tag = model.config, _tag(dtype)
    with _recording(arch) as dev:
        ht.accelerate(model)
        served = ht.accelerated(model)
        assert set(served.values()) == {"skinny_gemm"}
        mods = dict(model.named_modules())
        experts = [n for n in mods if n.endswith("mlp.experts")]
        assert len(experts) == 2

        def expect(name, n):
            if name in served:
                return [f"skinny_gemm_{tag}_n{n}"]
            return [p["kernel"] for p in fused_moe.plan_info(dev, str(dtype).removeprefix("torch."), n, cfg.hidden_size,
                                                             cfg.moe_intermediate_size, cfg.num_experts,
                                                             cfg.num_experts_per_tok, int4=False)]

        got = _check_run(model, reference, ids, twin, dev, {n: mods[n] for n in [*served, *experts]}, expect)
        np_ = fused_moe.token_group(PROMPT, 2, 8)
        assert got[experts[0]][:3] == ["fused_moe_route", f"fused_moe_gemm1_{tag}_w16_n{np_}", got[experts[0]][2]]
    ht.restore(model)


def test_experts_fallbacks_log_once_and_unregister(caplog):
    """More than 128 tokens and a non-SiLU activation go to transformers' default (grouped_mm), one
    log line per reason; FP8 experts' interface has the key too; unregister removes it."""
    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS

    model = _qwen3_moe(torch.float16, 0)
    ht.register()
    assert ht.registered() and "hipskinny" in ALL_EXPERTS_FUNCTIONS and "hipskinny" in ALL_FP8_EXPERTS_FUNCTIONS
    model.set_experts_implementation("hipskinny")
    block = model.model.layers[0].mlp
    default = ALL_EXPERTS_FUNCTIONS["grouped_mm"]
    ht._said.clear()
    with _recording("gfx1100") as dev, caplog.at_level(logging.INFO, logger=LOG), torch.no_grad():
        x = torch.randn(130, 64, generator=torch.Generator().manual_seed(1)).to(torch.float16)
        _, w, idx = block.gate(x)
        for _ in range(2):
            assert torch.equal(block.experts(x, idx, w), default(block.experts, x, idx, w))
        block.experts.act_fn = nn.GELU()
        for _ in range(2):
            assert torch.equal(block.experts(x[:2], idx[:2], w[:2]), default(block.experts, x[:2], idx[:2], w[:2]))
        assert dev.launches == []
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert len(lines) == 2 and "128 tokens" in lines[0] and "GELU" in lines[1], lines
    model.set_experts_implementation("grouped_mm")
    ht.unregister()
    assert not ht.registered() and "hipskinny" not in ALL_EXPERTS_FUNCTIONS
    assert "hipskinny" not in ALL_FP8_EXPERTS_FUNCTIONS
    with pytest.raises(ValueError, match="hipskinny"):
        model.set_experts_implementation("hipskinny")
    ht.register()


# ----------------------------------------------------------------------------------------------
# what stays with torch; AWQ / GPTQ modules


def test_linear_fallbacks_stay_with_torch(caplog):
    """N > 128 tokens and autograd run the module's own forward (no launch, torch's exact result),
    one log line per reason."""
    model = _llama(torch.float16, 0)
    ref = copy.deepcopy(model)
    ids = torch.randint(0, VOCAB, (1, 130), generator=torch.Generator().manual_seed(2))
    ht._said.clear()
    with _recording("gfx1100") as dev, caplog.at_level(logging.INFO, logger=LOG):
        ht.accelerate(model)
        assert ht.accelerate(model) is model and len(ht.accelerated(model)) == 15     # idempotent
        with torch.no_grad():
            for _ in range(2):
                assert torch.equal(model(ids).logits, ref(ids).logits)
        for _ in range(2):
            assert torch.equal(model(ids[:, :3]).logits, ref(ids[:, :3]).logits)      # grad mode
        assert dev.launches == []
    lines = [r.getMessage() for r in caplog.records if r.name == LOG and "left to" in r.getMessage()]
    assert len(lines) == 2 and "N outside 1..128" in lines[0], lines
    # the real reason and its remedy, not "hipskinny has no backward" (it has one for x and bias)
    assert "weights require grad" in lines[1] and "no weight gradients" in lines[1], lines
    assert "torch.no_grad()" in lines[1] and "requires_grad_(False)" in lines[1], lines
    ht.restore(model)
    assert ht.accelerated(model) == {} and ht.restore(model) is model


class _Int4Linear(nn.Module):
    """A stand-in for an AWQ / GPTQ linear module (no AWQ or GPTQ package is installed here): the
    tensors a checkpoint loads into one, in its layout (GPTQ ``qweight [K/8, M]``, ``qzeros
    [K/G, M/8]``, ``scales [K/G, M]``, ``g_idx [K]``; AWQ ``qweight [K, M/8]``, no ``g_idx``), and a
    torch forward from them (dequantize, then F.linear)."""

    def __init__(self, ckpt, fmt, group_size, bias):
        super().__init__()
        for name in ("qweight", "qzeros", "scales", "g_idx"):
            if ckpt[name] is not None:
                self.register_buffer(name, torch.from_numpy(np.ascontiguousarray(ckpt[name])))
        self.register_buffer("bias", bias)
        self.bits, self.group_size, self.fmt = 4, group_size, fmt

    def forward(self, x):
        g_idx = getattr(self, "g_idx", None)
        w = w4a16.dequantize_checkpoint(self.qweight.numpy(), self.scales.numpy(), self.qzeros.numpy(),
                                        None if g_idx is None else g_idx.numpy(), fmt=self.fmt,
                                        group_size=self.group_size)
        return nn.functional.linear(x, torch.from_numpy(w).to(x.dtype), self.bias)


def test_awq_and_gptq_modules(caplog):
    """GPTQ (v1, asymmetric, act-order) and AWQ modules: repacked once (bytes logged), served by
    w4a16_linear (bitwise the op on the same prepared weight), N > 128 on their own forward, and
    restore drops the repack."""
    from test_w4a16_linear import assert_bound

    rng = np.random.default_rng(5)
    k, m, g = 64, 96, 32
    layers, ckpts = {}, {}
    for fmt in ("gptq", "awq"):
        lo = 1 if fmt == "gptq" else 0
        scales = rng.uniform(0.002, 0.02, (m, k // g)).astype(np.float16)
        g_idx = (rng.permutation(k) // g).astype(np.int32) if fmt == "gptq" else None
        ckpts[fmt] = w4a16.pack_checkpoint(rng.integers(0, 16, (m, k)), rng.integers(lo, lo + 16, (m, k // g)),
                                           scales, fmt=fmt, group_size=g, g_idx=g_idx)
        bias = torch.from_numpy(rng.standard_normal(m).astype(np.float16))
        layers[fmt] = _Int4Linear(ckpts[fmt], fmt, g, bias)
    model = nn.Sequential(layers["gptq"], nn.ReLU(), nn.Linear(m, k, dtype=torch.float16), layers["awq"])
    before = {n: v.clone() for n, v in model.state_dict().items()}
    x = torch.from_numpy(rng.standard_normal((1, 3, k)).astype(np.float16))
    with _recording("gfx1100") as dev, caplog.at_level(logging.INFO, logger=LOG), torch.no_grad():
        ht.accelerate(model)
        assert ht.accelerated(model) == {"0": "w4a16_linear", "2": "skinny_gemm", "3": "w4a16_linear"}
        for fmt, mod in layers.items():
            p = w4a16.prepare(**ckpts[fmt], fmt=fmt, group_size=g)
            size = sum(a.nbytes for a in (p.qweight, p.scales, p.zeros, p.perm) if a is not None)
            said = [r.getMessage() for r in caplog.records]
            assert any(f"({fmt} int4, {m} x {k}, group {g})" in s and s.endswith(f": {size} bytes") for s in said), said
            xin = x if fmt == "gptq" else torch.from_numpy(rng.standard_normal((1, 3, k)).astype(np.float16))
            y = mod(xin)
            assert torch.equal(y, hipskinny.w4a16_linear(xin, p, mod.bias))
            assert_bound(y.numpy(), xin.numpy(), ckpts[fmt], fmt, g, mod.bias.numpy())
        assert [_stem(s.kernel) for s in dev.launches] == ["w4a16_linear_f16_n3"] * 4
        dev.launches.clear()
        big = torch.from_numpy(rng.standard_normal((130, k)).astype(np.float16))
        assert torch.equal(layers["gptq"](big), _Int4Linear.forward(layers["gptq"], big))
        assert dev.launches == []
    ht.restore(model)
    assert not any("forward" in mod.__dict__ or "hipskinny_w4a16" in mod.__dict__ for mod in model.modules())
    assert all(torch.equal(v, before[n]) for n, v in model.state_dict().items())


# ----------------------------------------------------------------------------------------------
# never raising where the module's own forward would serve; what was served; log lines


def _fp8_module(m, k, block_size, scale, requires_grad):
    """transformers' FP8Linear as its constructor (and the loader) leaves it -- weight and scale
    parameters that require grad unless ``requires_grad`` is False -- holding e4m3fn weights."""
    rng = np.random.default_rng(11)
    w = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(torch.float8_e4m3fn)
    f = FP8Linear(k, m, block_size=block_size)
    f.weight = nn.Parameter(w, requires_grad=requires_grad)
    f.weight_scale_inv = nn.Parameter(scale, requires_grad=requires_grad)
    return f


def _own_forward(f):
    """Give ``f`` an instance forward standing in for its own (transformers' FP8 kernels need a GPU):
    the dequantized weights through F.linear; returns the list of calls it records."""
    calls = []

    def forward(x):
        calls.append(x.shape)
        s = f.weight_scale_inv.detach()
        w = f.weight.detach().float() * (s if s.dim() == 2 else s.reshape(-1, 1))
        return nn.functional.linear(x, w.to(x.dtype))

    f.forward = forward
    return calls


def test_fp8_linear_trainable_weights_in_grad_mode_use_its_own_forward(caplog):
    """An FP8Linear whose weight and scale require grad (as FP8Linear.__init__ leaves them), called in
    grad mode with an x that does not: its own forward serves it (no InputValueError from fp8_linear),
    one log line with the reason and the remedy; under no_grad hipskinny serves it."""
    m, k = 32, 128
    f = _fp8_module(m, k, None, torch.tensor(0.5), requires_grad=True)
    assert f.weight.requires_grad and f.weight_scale_inv.requires_grad
    calls = _own_forward(f)
    model = nn.Sequential(f)
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    ht._said.clear()
    with _recording("gfx1100") as dev, caplog.at_level(logging.INFO, logger=LOG):
        ht.accelerate(model)
        assert ht.accelerated(model) == {"0": "fp8_linear"}
        for _ in range(2):
            model(x)
        assert len(calls) == 2 and dev.launches == []
        with torch.no_grad():
            y = model(x)
        assert len(calls) == 2 and [_stem(s.kernel) for s in dev.launches] == ["fp8_linear_f16_ocp_n2"]
        assert torch.equal(y, hipskinny.fp8_linear(x, f.weight.detach(), f.weight_scale_inv.detach()))
    lines = [r.getMessage() for r in caplog.records if r.name == LOG and "left to" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("hipskinny: FP8Linear: its weights require grad"), lines
    assert "torch.no_grad()" in lines[0]
    ht.restore(model)


def test_fp8_linear_per_channel_scale_m_by_1_is_served():
    """block_size=None with weight_scale_inv stored [M, 1] is a per-channel scale: served as the [M]
    scale it is (bitwise hipskinny.fp8_linear with the [M] view), not raised on."""
    m, k = 48, 128
    scale = torch.linspace(0.01, 0.1, m).reshape(m, 1)
    f = _fp8_module(m, k, None, scale, requires_grad=False)
    calls = _own_forward(f)
    model = nn.Sequential(f)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    with _recording("gfx942") as dev, torch.no_grad():
        ht.accelerate(model)
        y = model(x)
        assert calls == [] and [_stem(s.kernel) for s in dev.launches] == ["fp8_linear_bf16_ocp_n3"]
    assert torch.equal(y, hipskinny.fp8_linear(x, f.weight, scale.reshape(m)))
    ht.restore(model)


def test_fp8_linear_scale_hipskinny_refuses_uses_its_own_forward(caplog):
    """A call hipskinny's op refuses (here a per-tensor FP8Linear holding a [2, 3] scale, which is no
    layout fp8_linear takes for a 48 x 128 weight) runs the module's own forward, logged with the
    op's own message, instead of raising."""
    f = _fp8_module(48, 128, None, torch.full((2, 3), 0.5), requires_grad=False)
    calls = []
    f.forward = lambda x: calls.append(x.shape) or torch.zeros(*x.shape[:-1], 48, dtype=x.dtype)
    model = nn.Sequential(f)
    x = torch.randn(1, 128, generator=torch.Generator().manual_seed(5)).to(torch.float16)
    ht._said.clear()
    with _recording("gfx1100") as dev, caplog.at_level(logging.INFO, logger=LOG), torch.no_grad():
        ht.accelerate(model)
        model(x)
        assert len(calls) == 1 and dev.launches == []
    lines = [r.getMessage() for r in caplog.records if r.name == LOG and "left to" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("hipskinny: FP8Linear: w_scale of shape (2, 3) matches no"), lines
    ht.restore(model)


def test_frozen_linear_serves_an_x_that_requires_grad():
    """Frozen weights in grad mode: an x that requires grad is served by skinny_gemm, whose backward
    gives x its gradient (grad_y @ W), as the module's own forward would."""
    lin = nn.Linear(64, 32, dtype=torch.float16).requires_grad_(False)
    model = nn.Sequential(lin)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(6)).to(torch.float16).requires_grad_(True)
    with _recording("gfx1100") as dev:
        ht.accelerate(model)
        y = model(x)
        assert [_stem(s.kernel) for s in dev.launches] == ["skinny_gemm_f16_n2"]
        y.backward(torch.ones_like(y))
    assert torch.equal(x.grad, torch.ones_like(y) @ lin.weight)
    ht.restore(model)


def test_linear4bit_k_not_a_multiple_of_the_blocksize_is_left_to_bitsandbytes(caplog):
    """A Linear4bit whose K is not a multiple of its blocksize is not reported by ``accelerated`` (its
    forward is bitsandbytes'), logged once; one whose K is, is."""
    import bitsandbytes as bnb

    layers = []
    for k in (96, 128):
        q = bnb.nn.Linear4bit(k, 32, bias=False, compute_dtype=torch.float16, quant_type="nf4", device="meta")
        w = torch.randn(32, k, generator=torch.Generator().manual_seed(k)).to(torch.float16)
        q.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", blocksize=64).to("cpu")
        layers.append(q)
    model = nn.Sequential(*layers)
    ht._said.clear()
    with caplog.at_level(logging.INFO, logger=LOG):
        ht.accelerate(model)
    try:
        assert ht.accelerated(model) == {"1": "matmul_4bit"}
        assert "forward" not in layers[0].__dict__
        lines = [r.getMessage() for r in caplog.records if r.name == LOG and "left to" in r.getMessage()]
        assert len(lines) == 1 and "K=96 is not a multiple of the blocksize 64" in lines[0], lines
    finally:
        ht.restore(model)


def test_accelerate_logs_fp32_layers_and_linear_subclasses(caplog):
    """accelerate says why it leaves an fp32 nn.Linear and an nn.Linear subclass alone, once per reason."""
    class Scaled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), Scaled(8, 8, dtype=torch.float16),
                          nn.Linear(8, 8, dtype=torch.float16))
    ht._said.clear()
    with caplog.at_level(logging.INFO, logger=LOG):
        ht.accelerate(model)
    assert ht.accelerated(model) == {"3": "skinny_gemm"}
    lines = [r.getMessage() for r in caplog.records if r.name == LOG and "left to" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "nn.Linear: torch.float32 weights" in lines[0] and "Scaled: a subclass of nn.Linear" in lines[1], lines
    ht.restore(model)


def test_served_counts_calls_per_op():
    """``served()`` counts the calls each op served (experts and linear layers), not the fallbacks."""
    model = _qwen3_moe(torch.float16, 0)
    ht.register()
    model.set_experts_implementation("hipskinny")
    block = model.model.layers[0].mlp
    lin = nn.Sequential(nn.Linear(64, 32, dtype=torch.float16))
    ht.served(reset=True)
    with _recording("gfx1100"), torch.no_grad():
        ht.accelerate(lin)
        x = torch.randn(2, 64, generator=torch.Generator().manual_seed(7)).to(torch.float16)
        _, w, idx = block.gate(x)
        block.experts(x, idx, w)
        lin(x)
        lin(x)
        lin(torch.randn(130, 64).to(torch.float16))          # prefill: the module's own forward
        assert ht.served() == {"fused_moe": 1, "skinny_gemm": 2}
    assert ht.served(reset=True) == {"fused_moe": 1, "skinny_gemm": 2} and ht.served() == {}
    ht.restore(lin)
    model.set_experts_implementation("grouped_mm")
