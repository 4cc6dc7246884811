"""hipskinny inside transformers: an experts backend for MoE layers and ``accelerate(model)`` for linear layers.

Two lines::

    hipskinny.integrations.transformers.register()      # experts_implementation="hipskinny"
    model = hipskinny.integrations.transformers.accelerate(model)

**Experts** (`register` / `unregister`): the key ``"hipskinny"`` in transformers' `ExpertsInterface`,
so ``model.set_experts_implementation("hipskinny")`` (or ``experts_implementation="hipskinny"`` at
load) runs a MoE layer's experts through `hipskinny.moe.fused_moe`, on the module's own
``gate_up_proj [E, 2I, H]`` (gate rows, then up: transformers' concatenated layout, hipskinny's
w13) and ``down_proj [E, H, I]`` (w2), used in place. The router's weights are widened to fp32 and
its ids narrowed to int32 (``[T, k]``, a few bytes). Served: T <= 128 tokens (and T * k <= 1024),
16-bit experts of the activations' dtype, SiLU-gated (the default gate with a SiLU ``act_fn``), no
bias, no post-expert norm, not transposed, not expert-parallel, H and I multiples of 32, on the
host or a ROCm GPU, with no gradient wanted for the experts' weights. Anything else (and FP8
experts, which transformers keeps in its FP8 interface: registered there too) goes to
transformers' default implementation (``grouped_mm``), with one log line per reason.

**Linear layers** (`accelerate` / `restore`): each served module gets an instance ``forward`` that
calls hipskinny for N <= 128 tokens (N = product of the leading dims) and the module's previous
forward otherwise (transformers has no hook for ``nn.Linear``):

* ``nn.Linear`` (exactly that class) fp16/bf16 -> `hipskinny.skinny_gemm`.
* transformers' ``FP8Linear`` (finegrained FP8: e4m3 weight ``[M, K]``, ``weight_scale_inv`` fp32 per
  tensor, per channel (``[M]`` or ``[M, 1]``, with ``block_size=None``) or per 128x128 block, a multiplier
  as hipskinny's ``w_scale`` is) -> `hipskinny.fp8_linear`
  as W8A16 (see `_FP8_MODE` for why not W8A8). Activations are not quantized, whatever the
  module's ``activation_scheme``: the result is that of the dequantized weights with fp32 sums.
* AWQ / GPTQ int4 modules, recognised by their tensors (``qweight``, ``qzeros``, ``scales``, and
  ``g_idx`` for GPTQ): repacked once by `hipskinny.w4a16.prepare` (the kernels' layout differs from
  both checkpoints', so this is a copy: its bytes are logged), cached on the module as
  ``hipskinny_w4a16``, served by `hipskinny.w4a16_linear`.
* bitsandbytes ``Linear4bit`` whose K is a multiple of the blocksize (the others are left to
  bitsandbytes, logged): decode calls (fp16/bf16, N <= 64) go straight to `hipskinny.matmul_4bit` on
  the module's own tensors; the rest runs bitsandbytes' forward, whose 4-bit ops
  `hipskinny.integrations.bitsandbytes` serves (enabled for the model's device type unless it
  already is; `restore` disables it only if `accelerate` enabled it).

`restore(model)` removes every instance forward and cached repack `accelerate` added: the state
dict and the forwards are those of before. Host tensors (CPU models) run on hipskinny's current
device (`hipskinny.use_device`); GPU tensors in place on their ROCm GPU; other devices, weights
that require grad while grad mode is on (hipskinny gives gradients for x and bias only), other
dtypes and N > 128 stay with torch, and so does any call hipskinny's op refuses (its message is the
log line): the integration never raises where the module's own forward would have served.
`accelerated(model)` says which op serves each module; `served()` counts the calls each op took.
"""

from __future__ import annotations

import importlib
import logging
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

from ..ops._common import MAX_EXPERTS, MAX_TOPK
from ..ops._linear import SPLITK_MAX_N
from ..ops.fused_moe import MAX_SLOTS

__all__ = ["KEY", "MAX_TOKENS", "accelerate", "accelerated", "register", "registered", "restore", "served",
           "unregister"]

KEY = "hipskinny"
MAX_TOKENS = SPLITK_MAX_N          # the skinny kernels' N (skinny_gemm, fp8_linear, w4a16_linear); MoE layers too
log = logging.getLogger(__name__)
_said: set[str] = set()

# FP8 mode: W8A16 (16-bit activations, FP8 weights widened in registers) on every arch. Of
# fp8_linear's two modes, benchmarks/RESULTS.md (2026-11-25 fp8_linear run) has W8A16 faster at
# N = 1 on every shape and arch (9 of 9 per arch in "hipskinny.fp8_linear" against
# "hipskinny.fp8_linear:w8a8_block", e.g. gfx942 Llama-3-8B gate_up_proj 28672x4096 N=1: 23.0 us
# against 24.0 us; gfx1201 Qwen3-30B-A3B lm_head 151936x2048 N=1: 488.0 against 517.3 us), and
# W8A8's rows do not count the per-token-group activation quantization it would need (no hipskinny
# kernel does it; transformers' checkpoints are OCP, so gfx942's W8A8 would also need a FNUZ copy of
# every weight). W8A8 wins some N >= 4 rows (gfx942 Qwen3-30B-A3B lm_head N=64: 91.3 against
# 124.8 us), but only with activations already quantized, which would take a pass no hipskinny
# kernel provides; so one mode serves every N here.
_FP8_MODE = "w8a16"


def _once(reason: str) -> None:
    """One log line per reason (fallbacks happen per call; the log should not)."""
    if reason not in _said:
        _said.add(reason)
        log.info("hipskinny: %s; left to transformers/torch", reason)


# Calls served, per op: a one-item list per op, so a served call adds one with a single item store.
_counts: dict[str, list[int]] = {}


def _counter(op: str) -> list[int]:
    return _counts.setdefault(op, [0])


def served(*, reset: bool = False) -> dict[str, int]:
    """How many calls each hipskinny op has served through this integration (the experts backend's
    ``fused_moe`` and `accelerate`'s layers), since the process started or the last ``reset=True``.
    Calls from threads running at once may be undercounted (the counts are not locked)."""
    found = {op: c[0] for op, c in sorted(_counts.items()) if c[0]}
    if reset:
        for c in _counts.values():
            c[0] = 0
    return found


# ----------------------------------------------------------------------------------------------
# shared checks


def _torch() -> Any:
    import torch

    return torch


def _device_reason(x: Any, *tensors: Any) -> str | None:
    """None when x's device is one hipskinny runs on (the host, through the current device, or a
    ROCm GPU) and every tensor lives there too."""
    torch = _torch()
    kind = x.device.type
    if kind != "cpu" and not (kind == "cuda" and torch.version.hip):
        return f"tensors on {kind} (hipskinny runs host tensors and ROCm GPU tensors)"
    for t in tensors:
        if t is not None and t.device != x.device:
            return f"operands on {t.device} and {x.device}"
    return None


GRAD_REMEDY = ("call the model under torch.no_grad() or torch.inference_mode(), or freeze the weights with "
               "model.requires_grad_(False)")


def _grad_reason(what: str, *weights: Any) -> str | None:
    """Why a call whose ``weights`` (weight, scale or state tensors; not x or bias, whose gradients
    hipskinny's ops give) would want a weight gradient is left to torch, or None."""
    torch = _torch()
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in weights):
        return f"{what}: its weights require grad in grad mode, and hipskinny gives no weight gradients ({GRAD_REMEDY})"
    return None


def _halves() -> tuple[Any, Any]:
    torch = _torch()
    return torch.float16, torch.bfloat16


# ----------------------------------------------------------------------------------------------
# experts backend


def experts_forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """transformers' experts-function signature: ``hidden_states [T, H]``, ``top_k_index [T, k]``,
    ``top_k_weights [T, k]`` -> ``[T, H]``; `hipskinny.moe.fused_moe` where served, else the default."""
    why = _experts_reason(self, hidden_states, top_k_index, top_k_weights)
    if why is None:
        import hipskinny

        try:
            y = hipskinny.moe.fused_moe(hidden_states, self.gate_up_proj, self.down_proj, top_k_weights.float(),
                                        top_k_index.int())
        except _refused() as e:       # raised before any launch: transformers' default takes the call
            why = str(e)
        else:
            _counter("fused_moe")[0] += 1
            return y
    _once(f"experts {type(self).__name__}: {why}")
    return _default_experts(False)(self, hidden_states, top_k_index, top_k_weights)


def fp8_experts_forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """The key in transformers' FP8 experts interface: FP8 experts are not served (fused_moe takes
    16-bit or int4 experts), so they take the default FP8 implementation."""
    _once(f"experts {type(self).__name__}: FP8 experts (hipskinny serves 16-bit experts)")
    return _default_experts(True)(self, hidden_states, top_k_index, top_k_weights)


def _default_experts(fp8: bool) -> Any:
    """transformers' default experts implementation (``grouped_mm``, what ``None`` resolves to)."""
    if fp8:
        from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS as interface
    else:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS as interface
    return interface["grouped_mm"]


def _experts_reason(m: Any, x: Any, ids: Any, weights: Any) -> str | None:
    """Why fused_moe does not serve this call, or None."""
    from transformers.integrations.moe import _default_apply_gate

    for flag, want in (("has_gate", True), ("has_bias", False), ("is_transposed", False),
                       ("is_concatenated", True), ("has_post_expert_norm", False), ("_is_expert_parallel", False)):
        if getattr(m, flag, want) != want:
            return f"{flag}={not want} (served: gated, concatenated [gate; up], no bias, no post norm, not EP)"
    if getattr(type(m), "_apply_gate", _default_apply_gate) is not _default_apply_gate:
        return "a custom gate (served: act(gate) * up)"
    act = getattr(m, "act_fn", None)
    if not _is_silu(act):
        return f"activation {type(act).__name__} (served: SiLU)"
    w13, w2 = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
    if w13 is None or w2 is None or w13.dim() != 3 or w2.dim() != 3:
        return "no 3-D gate_up_proj / down_proj"
    if x.dtype not in _halves() or w13.dtype != x.dtype or w2.dtype != x.dtype:
        return f"{w13.dtype} experts for {x.dtype} tokens (served: 16-bit experts of the tokens' dtype)"
    t, k = (int(d) for d in ids.shape)
    e, rows, h = (int(d) for d in w13.shape)
    if not 1 <= t <= MAX_TOKENS or k > MAX_TOPK or t * k > MAX_SLOTS:
        return f"more than {MAX_TOKENS} tokens, {MAX_TOPK} choices or {MAX_SLOTS} slots"
    if e > MAX_EXPERTS or h % 32 or (rows // 2) % 32:
        return f"E={e}, H={h}, I={rows // 2} (served: E <= {MAX_EXPERTS}, H and I multiples of 32)"
    return _device_reason(x, w13, w2, ids, weights) or _grad_reason("experts", w13, w2)


def _refused() -> tuple[type, ...]:
    """hipskinny's refusals of a call, raised before anything is launched."""
    from ..errors import InputTypeError, InputValueError

    return InputTypeError, InputValueError


def _is_silu(act: Any) -> bool:
    torch = _torch()
    if isinstance(act, torch.nn.SiLU):
        return True
    try:
        from transformers.activations import SiLUActivation
    except ImportError:
        return False
    return isinstance(act, SiLUActivation)


def register() -> None:
    """Add the experts implementation ``"hipskinny"`` to transformers (its FP8 interface too, where
    it falls back). Idempotent."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(KEY, experts_forward)
    try:
        from transformers.integrations.finegrained_fp8 import FP8ExpertsInterface
    except ImportError:
        return
    FP8ExpertsInterface.register(KEY, fp8_experts_forward)


def unregister() -> None:
    """Remove ``"hipskinny"`` from transformers' experts interfaces (transformers has no such call:
    the key leaves the class-wide mappings). A model still set to it fails on its next forward:
    set another implementation first."""
    from transformers.integrations import moe

    interfaces = [(moe.ExpertsInterface, moe.ALL_EXPERTS_FUNCTIONS, experts_forward)]
    try:
        from transformers.integrations import finegrained_fp8 as f8
    except ImportError:
        pass
    else:
        interfaces.append((f8.FP8ExpertsInterface, f8.ALL_FP8_EXPERTS_FUNCTIONS, fp8_experts_forward))
    for cls, instance, fn in interfaces:
        if cls._global_mapping.get(KEY) is fn:
            del cls._global_mapping[KEY]
        if instance._local_mapping.get(KEY) is fn:
            del instance._local_mapping[KEY]


def registered() -> bool:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    return ALL_EXPERTS_FUNCTIONS.get(KEY) is experts_forward


# ----------------------------------------------------------------------------------------------
# linear layers


@dataclass
class _State:
    patched: list[tuple[Any, Any]] = field(default_factory=list)    # (module, its previous instance forward)
    cached: list[Any] = field(default_factory=list)                 # modules holding hipskinny_w4a16
    bnb_device_type: str | None = None                              # enabled by accelerate
    served: dict[str, str] = field(default_factory=dict)             # module name -> what serves it


_states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()
_NO_FORWARD = object()


def accelerate(model: Any) -> Any:
    """Serve the model's linear layers with hipskinny for N <= 128 tokens (module docstring); returns
    the model. Calling it again on an accelerated model changes nothing."""
    if model in _states:
        return model
    state = _State()
    try:
        fp8_cls = _fp8_linear_class()
        for name, m in model.named_modules():
            serve = _forward_for(name, m, fp8_cls, state)
            if serve is not None:
                state.patched.append((m, m.__dict__.get("forward", _NO_FORWARD)))
                m.forward = serve
        state.bnb_device_type = _enable_bnb(model)
    except BaseException:
        _undo(state)
        raise
    _states[model] = state
    if state.served:
        kinds: dict[str, int] = {}
        for what in state.served.values():
            kinds[what] = kinds.get(what, 0) + 1
        log.info("hipskinny: accelerating %s", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    return model


def restore(model: Any) -> Any:
    """Undo `accelerate`: the previous forwards, no cached repacks, bitsandbytes' ops as they were.
    A model `accelerate` did not touch is returned as it is."""
    state = _states.pop(model, None)
    if state is not None:
        _undo(state)
    return model


def accelerated(model: Any) -> dict[str, str]:
    """What serves each accelerated module of ``model``: ``{module name: "skinny_gemm" | "fp8_linear" |
    "w4a16_linear" | "matmul_4bit"}``."""
    state = _states.get(model)
    return {} if state is None else dict(state.served)


def _undo(state: _State) -> None:
    for m, previous in reversed(state.patched):
        if previous is _NO_FORWARD:
            m.__dict__.pop("forward", None)
        else:
            m.forward = previous
    for m in state.cached:
        m.__dict__.pop("hipskinny_w4a16", None)
    if state.bnb_device_type is not None:
        from . import bitsandbytes as hb

        hb.disable(state.bnb_device_type)
        state.bnb_device_type = None
    state.patched.clear()
    state.cached.clear()


def _loaded_class(module: str, name: str) -> Any:
    """``module.name`` when its library has been imported (a model holding its modules did so), else None."""
    if module.partition(".")[0] not in sys.modules:
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _fp8_linear_class() -> Any:
    return _loaded_class("transformers.integrations.finegrained_fp8", "FP8Linear")


def _forward_for(name: str, m: Any, fp8_cls: Any, state: _State) -> Any:
    """The instance forward serving ``m``, or None when it is not a module `accelerate` serves (a
    linear module it leaves alone says why, once per reason)."""
    torch = _torch()
    if fp8_cls is not None and type(m) is fp8_cls:        # not FP8GroupedLinear: per-group products
        state.served[name] = "fp8_linear"
        return _fp8_forward(m, m.forward)
    if type(m) is torch.nn.Linear:
        if m.weight.dtype not in _halves():
            _once(f"nn.Linear: {m.weight.dtype} weights (served: float16 / bfloat16)")
            return None
        state.served[name] = "skinny_gemm"
        return _linear_forward(m, m.forward)
    linear4bit = _linear4bit_class()
    if linear4bit is not None and type(m) is linear4bit:
        why = _linear4bit_reason(m)
        if why is not None:
            _once(why)
            return None
        state.served[name] = "matmul_4bit"
        return _linear4bit_forward(m, m.forward)
    if isinstance(m, torch.nn.Linear):
        _once(f"{type(m).__name__}: a subclass of nn.Linear (served: nn.Linear itself, FP8Linear, Linear4bit and "
              "AWQ/GPTQ modules; a subclass's forward may compute something else)")
        return None
    spec = _w4a16_spec(m)
    if spec is None:
        return None
    prepared = _prepare(name, m, spec)
    if prepared is None:
        return None
    m.hipskinny_w4a16 = prepared
    state.cached.append(m)
    state.served[name] = "w4a16_linear"
    return _w4a16_forward(m, m.forward)


def _tokens(x: Any) -> int:
    return x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0


def _linear_forward(m: Any, previous: Any) -> Any:
    import hipskinny

    torch = _torch()
    params = m._parameters                  # m.weight would go through nn.Module.__getattr__ per call
    halves, grad_mode, skinny_gemm = _halves(), torch.is_grad_enabled, hipskinny.skinny_gemm
    rocm, count, refused = bool(torch.version.hip), _counter("skinny_gemm"), _refused()

    def forward(input: Any) -> Any:   # nn.Linear's parameter name
        x = input
        w, b = params["weight"], params["bias"]
        # The served case in a few attribute reads (the per-call budget is 2x the direct call); any
        # miss takes the slow path, which names the reason.
        dt = x.dtype
        if dt in halves and w.dtype == dt and (b is None or b.dtype == dt) and x.dim() and \
                0 < x.numel() <= MAX_TOKENS * x.shape[-1] and (x.is_cpu or (rocm and x.is_cuda)) and \
                w.is_cpu == x.is_cpu and (b is None or b.is_cpu == x.is_cpu) and \
                not (w.requires_grad and grad_mode()):
            why = None
        else:
            why = _linear_reason(x, w, b, "nn.Linear")
        if why is None:
            try:
                y = skinny_gemm(x, w, b)
            except refused as e:      # raised before any launch: the module's forward takes the call
                why = f"nn.Linear: {e}"
            else:
                count[0] += 1
                return y
        _once(why)
        return previous(x)

    return forward


def _linear_reason(x: Any, w: Any, b: Any, what: str) -> str | None:
    if x.dtype not in _halves() or w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        return f"{what}: {x.dtype} input for {w.dtype} weights (served: both fp16 or both bf16)"
    return _size_reason(x, what) or _device_reason(x, w, b) or _grad_reason(what, w)


def _size_reason(x: Any, what: str) -> str | None:
    if not 1 <= _tokens(x) <= MAX_TOKENS:
        return f"{what}: N outside 1..{MAX_TOKENS} tokens"
    return None


def _fp8_forward(m: Any, previous: Any) -> Any:
    import hipskinny

    torch = _torch()
    fp8_dtypes = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz") if hasattr(torch, n))
    count, refused = _counter("fp8_linear"), _refused()
    seen: list[Any] = [None, None]          # weight_scale_inv as last seen, and the scale hipskinny takes

    def forward(input: Any) -> Any:   # nn.Linear's parameter name
        x = input
        w, s, b = m.weight, m.weight_scale_inv, m.bias
        why = _fp8_reason(m, x, w, s, b, fp8_dtypes)
        if why is None:
            if seen[0] is not s:
                seen[:] = s, _fp8_scale(m, w, s)
            try:
                y = hipskinny.fp8_linear(x, w, seen[1], bias=b)
            except refused as e:      # raised before any launch: the module's forward takes the call
                why = f"FP8Linear: {e}"
            else:
                count[0] += 1
                return y
        _once(why)
        return previous(x)

    return forward


def _fp8_scale(m: Any, w: Any, s: Any) -> Any:
    """``weight_scale_inv`` as hipskinny's ``w_scale``: a per-channel scale stored ``[M, 1]`` (no block
    size) is the ``[M]`` hipskinny takes, viewed as such; every other form is passed as it is."""
    if m.block_size is None and s.dim() == 2 and s.shape[1] == 1 and s.shape[0] == w.shape[0] != 1:
        return s.view(s.shape[0])
    return s


def _fp8_reason(m: Any, x: Any, w: Any, s: Any, b: Any, fp8_dtypes: tuple[Any, ...]) -> str | None:
    if w.dtype not in fp8_dtypes:
        return f"FP8Linear: {w.dtype} weights (served: float8_e4m3fn / float8_e4m3fnuz)"
    if s.dtype != _torch().float32:
        return f"FP8Linear: {s.dtype} weight_scale_inv (served: float32)"
    block = m.block_size
    if block is not None and tuple(block) != (128, 128) and s.numel() != 1:
        return f"FP8Linear: block_size {tuple(block)} (served: per tensor, per channel or 128x128 blocks)"
    if x.dtype not in _halves() or (b is not None and b.dtype != x.dtype):
        return f"FP8Linear: {x.dtype} input, {None if b is None else b.dtype} bias (served: fp16/bf16, bias alike)"
    return _size_reason(x, "FP8Linear") or _device_reason(x, w, s, b) or _grad_reason("FP8Linear", w, s)


# AWQ / GPTQ


@dataclass(frozen=True)
class _W4Spec:
    fmt: str
    group_size: int
    k: int
    m: int


def _w4a16_spec(m: Any) -> _W4Spec | None:
    """An int4 AWQ/GPTQ module's format, from its tensors: GPTQ ``qweight [K/8, M]`` with ``g_idx``,
    AWQ ``qweight [K, M/8]`` without; ``scales [K/G, M]``, ``qzeros [K/G, M/8]``."""
    torch = _torch()
    qw, qz, sc = (getattr(m, n, None) for n in ("qweight", "qzeros", "scales"))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in (qw, qz, sc)):
        return None
    if getattr(m, "bits", getattr(m, "w_bit", 4)) != 4:
        return None
    groups, cols = (int(d) for d in sc.shape)
    g_idx = getattr(m, "g_idx", None)
    if qw.shape[1] == cols and isinstance(g_idx, torch.Tensor):
        fmt, k = _gptq_format(m), int(qw.shape[0]) * 8
    elif qw.shape[1] * 8 == cols and g_idx is None:
        fmt, k = "awq", int(qw.shape[0])
    else:
        return None
    group = getattr(m, "group_size", None)
    if groups == 1 and group in (None, -1, k):
        group = -1
    elif group is None or group == -1:
        group = k // groups
    return _W4Spec(fmt, int(group), k, cols)


def _gptq_format(m: Any) -> str:
    """GPTQ's zero-point convention: v1 (stored z - 1, AutoGPTQ's checkpoints) unless the module
    says v2 (``qzero_format() == 2`` or a ``checkpoint_format`` naming gptq_v2)."""
    fmt = getattr(m, "qzero_format", None)
    fmt = fmt() if callable(fmt) else fmt
    named = str(getattr(m, "checkpoint_format", ""))
    return "gptq_v2" if fmt == 2 or "v2" in named else "gptq"


def _prepare(name: str, m: Any, spec: _W4Spec) -> Any:
    """The module's weights in the kernels' layout, once (a copy: the layouts differ), or None when
    hipskinny does not take them (logged)."""
    from ..errors import HipSkinnyError
    from ..formats import w4a16
    from ..ops.w4a16_linear import prepared_bytes, prepared_on

    host = [None if t is None else t.detach().cpu() for t in (m.qweight, m.scales, m.qzeros, getattr(m, "g_idx", None))]
    try:
        p = w4a16.prepare(*host, fmt=spec.fmt, group_size=spec.group_size)
    except HipSkinnyError as e:
        _once(f"{name}: {spec.fmt} weights not taken ({e})")
        return None
    if m.qweight.device.type != "cpu":
        p = prepared_on(p, m.qweight.device)
    size = prepared_bytes(p)
    log.info("hipskinny: %s (%s int4, %d x %d, group %d) repacked once for w4a16_linear: %d bytes", name,
             spec.fmt, spec.m, spec.k, p.group_size, size)
    return p


def _w4a16_forward(m: Any, previous: Any) -> Any:
    import hipskinny

    torch = _torch()
    count, refused = _counter("w4a16_linear"), _refused()

    def forward(input: Any) -> Any:   # nn.Linear's parameter name
        x = input
        p, b = m.hipskinny_w4a16, m.bias if isinstance(getattr(m, "bias", None), torch.Tensor) else None
        why = _w4a16_reason(m, x, p, b)
        if why is None:
            try:
                y = hipskinny.w4a16_linear(x, p, b)
            except refused as e:      # raised before any launch: the module's forward takes the call
                why = f"AWQ/GPTQ: {e}"
            else:
                count[0] += 1
                return y
        _once(why)
        return previous(x)

    return forward


def _w4a16_reason(m: Any, x: Any, p: Any, b: Any) -> str | None:
    name = str(p.scales.dtype).removeprefix("torch.")
    xname = str(x.dtype).removeprefix("torch.")
    if x.dtype not in _halves() or xname != name or (b is not None and b.dtype != x.dtype):
        return f"AWQ/GPTQ: {x.dtype} input for {name} scales (served: the scales' dtype, fp16 or bf16)"
    return _size_reason(x, "AWQ/GPTQ") or _device_reason(x, b) or \
        _grad_reason("AWQ/GPTQ", *(getattr(m, n, None) for n in ("qweight", "scales", "qzeros")))


# bitsandbytes


def _linear4bit_class() -> Any:
    return _loaded_class("bitsandbytes.nn", "Linear4bit")


def _linear4bit_forward(m: Any, previous: Any) -> Any:
    """Linear4bit's decode calls straight to `hipskinny.matmul_4bit` on the module's own tensors
    (`integrations.bitsandbytes.linear4bit_server`: the case it serves, the state read once);
    everything else runs bitsandbytes' forward, whose ops `integrations.bitsandbytes` serves where
    it can."""
    from .bitsandbytes import linear4bit_server

    serve, count = linear4bit_server(_torch()), _counter("matmul_4bit")
    seen: list[Any] = [None, None, None, None]

    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            y = serve(m, seen, x)
            if y is not None:
                count[0] += 1
                return y
        return previous(x, *args, **kwargs)

    return forward


def _linear4bit_reason(m: Any) -> str | None:
    """Why `accelerate` leaves a ``Linear4bit`` to bitsandbytes' forward altogether, or None: the
    direct path serves 4-bit weights packed as uint8 whose K (``in_features``) is a multiple of the
    blocksize; bitsandbytes' forward serves the rest (`integrations.bitsandbytes` still takes its
    dequantize calls where it can). Weights not quantized yet are judged on their first call."""
    w = m._parameters.get("weight")
    qs = getattr(w, "quant_state", None)
    if qs is None:
        return None
    k, blocksize = int(m.in_features), int(qs.blocksize)
    if k % blocksize:
        return (f"bitsandbytes Linear4bit: K={k} is not a multiple of the blocksize {blocksize} (served: K a "
                "multiple of it); bitsandbytes' forward runs it")
    if w.dtype != _torch().uint8:
        return (f"bitsandbytes Linear4bit: 4-bit weights stored as {w.dtype} (served: uint8); bitsandbytes' "
                "forward runs it")
    return None


def _enable_bnb(model: Any) -> str | None:
    """Enable hipskinny's bitsandbytes ops for the device type of the model's Linear4bit modules;
    the device type when this call enabled them (so `restore` disables them), else None."""
    linear4bit = _linear4bit_class()
    if linear4bit is None:
        return None
    found = next((m for m in model.modules() if isinstance(m, linear4bit)), None)
    if found is None:
        return None
    try:
        from . import bitsandbytes as hb
    except ImportError:
        _once("bitsandbytes Linear4bit: hipskinny.integrations.bitsandbytes is not available")
        return None
    from ..errors import HipSkinnyError

    device_type = found.weight.device.type
    if hb.enabled(device_type):
        return None
    try:
        return hb.enable(device_type=device_type)
    except HipSkinnyError as e:
        _once(f"bitsandbytes Linear4bit on {device_type}: {e}")
        return None
