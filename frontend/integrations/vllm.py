"""hipskinny inside vLLM: a general plugin that serves a model's decode GEMMs and MoE experts.

vLLM finds it through the entry point ``vllm.general_plugins: hipskinny`` (installed with the wheel)
and calls `register` in every process it starts; the model runs in the worker processes. Nothing
changes in the user's command::

    vllm serve <model>                         # ROCm: served on every shipped arch
    HIPSKINNY_VLLM_DEVICE=emulator:gfx942 \\
        python my_vllm_script.py               # vLLM's CPU build: served on hipskinny's emulator

What is served (decode: at most `MAX_TOKENS` tokens in the call), each as one opaque torch op
(``torch.ops.hipskinny_vllm.*``, with a fake that checks shapes and dtypes), so vLLM's torch.compile
sees a single node:

* unquantized linear layers and the lm_head (every user of vLLM's ``dispatch_unquantized_gemm``,
  the MoE router's gate among them): `hipskinny.skinny_gemm`, fp16/bf16;
* FP8 linear layers whose scaled-MM kernel takes vLLM's quantized activations (``apply_scaled_mm``:
  per-tensor or per-token activation scales, per-tensor or per-channel weight scales):
  `hipskinny.fp8_linear`, W8A8 on vLLM's own quantized operands;
* symmetric GPTQ int4 linear layers (vLLM's mixed-precision kernels, ``uint4b8``): repacked once at
  load by `hipskinny.w4a16.prepare` (bytes logged), served by `hipskinny.w4a16.linear`;
* unquantized MoE experts (vLLM's ``UnquantizedFusedMoEMethod``, replaced out of tree):
  `hipskinny.moe.fused_moe`, SiLU-gated, no biases, no expert parallelism, N * top_k <= 1024;
* plain softmax top-k routing (``renormalize`` either way): `hipskinny.moe.topk_softmax`.

Everything else -- more tokens (prefill), other dtypes, shapes hipskinny refuses -- is handed, inside
the same op, to the kernel vLLM had chosen for that layer; the plugin calls it, it does not copy it.

Switches: ``HIPSKINNY_VLLM=0`` leaves vLLM untouched. On vLLM's CPU platform the plugin serves only
when ``HIPSKINNY_VLLM_DEVICE=emulator:<arch>`` names hipskinny's emulator (that path exists for
tests and demos: CPU users gain nothing from it). `register` never raises: an unsupported vLLM
release, platform or arch is logged in one line and vLLM is left as it was.

Weights stay where hipskinny reads them. On the CPU platform vLLM repacks linear and expert weights
for its own kernels and drops the originals; the plugin keeps the originals (and an fp16/bf16 bias
vLLM widened to fp32), counts their bytes and logs the total once. On ROCm no copy is kept: an expert
layer whose weights vLLM's backend re-lays out (aiter's shuffle) stays with vLLM.

HIP graphs (ROCm): before vLLM's GPU runner profiles or captures graphs, the plugin runs one model
step at the largest captured batch size it serves (`warm_up_for_capture`), and each of vLLM's capture
contexts reserves hipskinny's scratch on its stream (`reserving`, `hipskinny.reserve`), so captured
calls allocate nothing and no scratch buffer regrows under a captured graph.

`served()` returns this process's call counts per op. Each process logs at its first served call
after loading a model which layer kinds hipskinny serves, with which op, and what stays with vLLM
and why (the counts are the process's, over every model it loaded).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from ..errors import InputTypeError, InputValueError

__all__ = ["MAX_TOKENS", "declined", "kept_bytes", "register", "registered", "reserving", "served", "status",
           "warm_up_for_capture"]

# The most tokens a served call takes; more (prefill) go to vLLM's kernel.
MAX_TOKENS = 128
# The vLLM releases the hooks below were read from and tested with.
TESTED_VLLM = ("0.32.",)
# The op namespace of the plugin's torch ops (``torch.ops.hipskinny_vllm.<op>``).
NAMESPACE = "hipskinny_vllm"
# vLLM's GPU model runner methods that capture HIP graphs: the served ops run once before them.
CAPTURE_METHODS = ("profile_cudagraph_memory", "capture_model")
# What `served` counts: hipskinny's op behind each plugin op.
OPS = ("skinny_gemm", "fp8_linear", "w4a16_linear", "fused_moe", "topk_softmax")

# vLLM configures handlers for its own logger tree only: a child of it is seen where vLLM's lines are.
log = logging.getLogger("vllm.hipskinny")

_lock = threading.Lock()
_counts: dict[str, list[int]] = {op: [0] for op in OPS}     # one-item lists: a served call adds one
_declined: dict[str, list[int]] = {op: [0] for op in OPS}   # calls handed to vLLM's kernel
_state: dict[str, Any] = {"registered": False, "why": None, "device": None, "summary_logged": False}
# What each plugin op hands back to vLLM when hipskinny does not serve a call, by the index the op
# carries (index 0: a linear layer the plugin never saw, served by torch.nn.functional.linear).
_fallbacks: list[Callable[..., Any]] = []
# GPTQ layers' weights in hipskinny's layout (`hipskinny.w4a16.Prepared`), by the same index.
_prepared: dict[int, Any] = {}
# Layer kinds seen, for the one-line summary: kind -> [served op or reason, count].
_kinds: dict[str, list[Any]] = {}
_kept_bytes = [0]


def served(*, reset: bool = False) -> dict[str, int]:
    """How many calls hipskinny served in this process, per hipskinny op (``"skinny_gemm"``,
    ``"fp8_linear"``, ``"w4a16_linear"``, ``"fused_moe"``, ``"topk_softmax"``), since the process
    started or the last ``reset=True``; calls handed to vLLM's kernels are not counted."""
    found = {op: c[0] for op, c in _counts.items() if c[0]}
    if reset:
        for c in _counts.values():
            c[0] = 0
    return found


def declined(*, reset: bool = False) -> dict[str, int]:
    """How many calls the plugin's ops handed to vLLM's kernels in this process (prefill, shapes or
    dtypes hipskinny does not take), per hipskinny op, as `served` counts."""
    found = {op: c[0] for op, c in _declined.items() if c[0]}
    if reset:
        for c in _declined.values():
            c[0] = 0
    return found


def registered() -> str | None:
    """The device hipskinny serves vLLM on in this process (``"hip:0"``, ``"emulator:gfx942"``), or
    None: `register` did not run, or left vLLM untouched (logged with the reason)."""
    return _state["device"]


def status() -> dict[str, Any]:
    """This process's plugin state: ``device`` (as `registered`), ``why`` (the reason it does not serve,
    or None), ``served`` and ``declined`` (the counts), ``kept_bytes`` (`kept_bytes`) and ``layers``
    (layer kind -> [the hipskinny op serving it, or why it stays with vLLM; how many])."""
    return {"device": _state["device"], "why": _state["why"], "served": served(), "declined": declined(),
            "kept_bytes": _kept_bytes[0], "layers": {k: list(v) for k, v in _kinds.items()}}


def kept_bytes() -> int:
    """Bytes of weights the plugin keeps that vLLM would have freed (vLLM's CPU platform only)."""
    return _kept_bytes[0]


def register() -> None:
    """vLLM's entry point (``vllm.general_plugins``). Idempotent, never raises: where hipskinny cannot
    serve (``HIPSKINNY_VLLM=0``, an untested vLLM release, a platform or arch it does not cover) it logs
    one line saying why and leaves vLLM untouched."""
    with _lock:
        if _state["registered"]:
            return
        _state["registered"] = True
        try:
            why = _install()
        except Exception as e:          # a hook vLLM moved: say so, leave vLLM as it was
            why = f"{type(e).__name__}: {e}"
        if why is not None:
            _state["why"] = why
            # The switch is a choice (info); anything else is worth a warning. In vLLM's front process
            # plugins load before vLLM configures its logging: `status` keeps the reason.
            (log.info if why == "HIPSKINNY_VLLM=0" else log.warning)(
                "hipskinny: not serving vLLM in this process: %s", why)


def _install() -> str | None:
    """Hook hipskinny into vLLM; returns why not, having changed nothing, or None."""
    if os.environ.get("HIPSKINNY_VLLM", "1").strip() == "0":
        return "HIPSKINNY_VLLM=0"
    import vllm

    version = getattr(vllm, "__version__", "?")
    if not version.startswith(TESTED_VLLM):
        return f"vLLM {version} is not a release this plugin was tested with ({', '.join(TESTED_VLLM)}x)"
    from vllm.platforms import current_platform

    device, why = _device(current_platform)
    if why is not None:
        return why
    hooks = _Hooks()                    # every lookup first: a missing hook changes nothing
    import torch

    _define_ops(torch)
    import hipskinny

    hipskinny.use_device(device)
    hooks.patch()
    _state["device"] = device.label
    log.info("hipskinny %s: serving vLLM's decode GEMMs and MoE experts on %s (N <= %d tokens)",
             hipskinny.__version__, _state["device"], MAX_TOKENS)
    return None


def _device(platform: Any) -> tuple[Any, str | None]:
    """hipskinny's device for this vLLM platform, or why there is none."""
    from .. import devices
    from ..arch import SHIPPED_ARCHS

    if platform.is_rocm():
        try:
            device = devices.hip_device(0)
        except Exception as e:
            return None, f"no usable ROCm GPU for hipskinny ({e})"
        if device.arch not in SHIPPED_ARCHS:
            return None, f"the GPU is {device.arch}; hipskinny ships {', '.join(SHIPPED_ARCHS)}"
        return device, None
    if platform.is_cpu():
        spec = os.environ.get("HIPSKINNY_VLLM_DEVICE", "").strip()
        if not spec:
            return None, ("vLLM's CPU platform; set HIPSKINNY_VLLM_DEVICE=emulator:<arch> to serve on hipskinny's "
                          "emulator (for tests and demos)")
        if not spec.startswith("emulator:"):
            return None, f"HIPSKINNY_VLLM_DEVICE={spec!r}: on vLLM's CPU platform only 'emulator:<arch>' is served"
        try:
            return devices.parse_device(spec, "HIPSKINNY_VLLM_DEVICE"), None
        except Exception as e:
            return None, str(e)
    return None, f"vLLM platform {type(platform).__name__}: hipskinny serves ROCm (and its emulator on CPU)"


class _Hooks:
    """The vLLM names the plugin replaces, looked up before anything is changed."""

    def __init__(self) -> None:
        import importlib

        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.layers import linear, utils, vocab_parallel_embedding
        from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as moe_method
        from vllm.platforms import current_platform

        self.utils, self.custom_op = utils, CustomOp
        self.on_cpu = current_platform.is_cpu()
        # Modules that imported dispatch_unquantized_gemm by name, and bind it when they build a layer.
        names = ["vllm.model_executor.layers.linear", "vllm.model_executor.layers.vocab_parallel_embedding",
                 "vllm.model_executor.layers.fused_moe.runner.moe_runner",
                 "vllm.model_executor.layers.quantization.compressed_tensors.transform.module"]
        self.binders = [importlib.import_module(n) for n in names]
        self.dispatch = utils.dispatch_unquantized_gemm
        self.linear_method = linear.UnquantizedLinearMethod
        self.embedding_method = vocab_parallel_embedding.UnquantizedEmbeddingMethod
        self.lm_head = vocab_parallel_embedding.ParallelLMHead
        self.moe_method = moe_method.UnquantizedFusedMoEMethod
        for cls in (self.linear_method, self.embedding_method, self.moe_method):
            for name in ("process_weights_after_loading", "apply"):
                getattr(cls, name)
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation

        self.silu = MoEActivation.SILU
        if self.on_cpu:
            from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

            self.routers = [CPURouter]
        else:
            from vllm.model_executor.layers.fused_moe.router.fused_topk_router import FusedTopKRouter

            self.routers = [FusedTopKRouter]
        for r in self.routers:
            getattr(r, "_compute_routing")      # noqa: B009 - present before anything is patched
        # FP8 linear layers: the scaled-MM kernels of this platform that take vLLM's quantized
        # activations through `apply_scaled_mm` (CPU's AMX kernels override `apply_weights` instead).
        from vllm.model_executor.kernels import linear as kernels
        from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearKernel

        platform = current_platform._enum
        self.fp8_kernels = [k for k in kernels._POSSIBLE_FP8_KERNELS.get(platform, [])
                            if issubclass(k, FP8ScaledMMLinearKernel) and "apply_scaled_mm" in vars(k)
                            and "apply_weights" not in vars(k)]
        # GPTQ int4 (symmetric, uint4b8) linear layers: the mixed-precision kernels of this platform.
        from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearKernel
        from vllm.scalar_type import scalar_types

        self.uint4b8 = scalar_types.uint4b8
        self.mp_kernels = [k for k in kernels._POSSIBLE_KERNELS.get(platform, []) if issubclass(k, MPLinearKernel)]
        # HIP graphs (ROCm): vLLM's V1 GPU runner captures in `profile_cudagraph_memory` and `capture_model`,
        # each inside `graph_capture` (imported by name). Its CPU runner captures nothing.
        self.runner = self.capture_modules = None
        if not self.on_cpu:
            gpu_runner = importlib.import_module("vllm.v1.worker.gpu_model_runner")
            self.runner = gpu_runner.GPUModelRunner
            for name in CAPTURE_METHODS:
                getattr(self.runner, name)
            self.capture_modules = [gpu_runner]
            self.graph_capture = gpu_runner.graph_capture

    def patch(self) -> None:
        platform_gemm = self.dispatch()          # vLLM's GEMM on this platform (CPU: the layer's own kernel)
        gemm = _gemm_for(platform_gemm)
        for module in (self.utils, *self.binders):
            if getattr(module, "dispatch_unquantized_gemm", None) is self.dispatch:
                module.dispatch_unquantized_gemm = _dispatch(self.dispatch, gemm)
        for cls, layers in ((self.linear_method, None), (self.embedding_method, self.lm_head)):
            cls.process_weights_after_loading = _adopting_linear(cls.process_weights_after_loading, platform_gemm,
                                                                 layers)
        self.custom_op.register_oot(_experts_class(self.moe_method, self.silu, self.on_cpu),
                                    name="UnquantizedFusedMoEMethod")
        for r in self.routers:
            r.__init__ = _adopting_router(r.__init__, r._compute_routing)
            r._compute_routing = _routing(r._compute_routing)
        for k in self.mp_kernels:
            if "process_weights_after_loading" in vars(k):
                k.process_weights_after_loading = _adopting_w4(k.process_weights_after_loading, self.uint4b8)
            if "apply_weights" in vars(k):
                k.apply_weights = _w4_apply(k.apply_weights)
        for k in self.fp8_kernels:
            k.__init__ = _adopting_fp8(k.__init__, k.apply_scaled_mm)
            k.apply_scaled_mm = _scaled_mm(k.apply_scaled_mm)
        if self.runner is not None:
            for name in CAPTURE_METHODS:
                setattr(self.runner, name, _warming_up(getattr(self.runner, name)))
            for module in self.capture_modules:
                module.graph_capture = reserving(self.graph_capture)


# ----------------------------------------------------------------------------------------------
# The plugin's torch ops. Each one decides inside itself whether hipskinny serves the call, so a
# compiled graph holds one node that takes either path at run time (a branch on the token count in
# traced code would be specialised away by vLLM's guard-free compilation).
# ----------------------------------------------------------------------------------------------

def _define_ops(torch: Any) -> None:
    global _HALVES, skinny_gemm, fp8_linear, w4a16_linear, fused_moe, topk_softmax
    from ..ops.fp8_linear import fp8_linear
    from ..ops.fused_moe import fused_moe
    from ..ops.skinny_gemm import skinny_gemm
    from ..ops.topk_softmax import topk_softmax
    from ..ops.w4a16_linear import w4a16_linear

    _HALVES = (torch.float16, torch.bfloat16)
    if not _fallbacks:
        _fallbacks.append(_plain_linear)          # index 0: layers the plugin did not see at load
    if hasattr(torch.ops, NAMESPACE) and hasattr(getattr(torch.ops, NAMESPACE), "linear"):
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    lib.define("linear(Tensor x, Tensor weight, Tensor? bias, int fallback) -> Tensor")
    lib.define("fused_moe(Tensor x, Tensor w13, Tensor w2, Tensor topk_weights, Tensor topk_ids, int fallback)"
               " -> Tensor")
    lib.define("topk_softmax(Tensor router_logits, int k, bool renormalize, int fallback) -> (Tensor, Tensor)")
    lib.define("w4a16_linear(Tensor x, Tensor? bias, int m, int fallback) -> Tensor")
    lib.define("fp8_linear(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype, "
               "SymInt[] output_shape, int fallback) -> Tensor")
    for key in ("CPU", "CUDA"):
        lib.impl("w4a16_linear", _w4a16_linear, key)
        lib.impl("fp8_linear", _fp8_linear, key)
        lib.impl("linear", _linear, key)
        lib.impl("fused_moe", _fused_moe, key)
        lib.impl("topk_softmax", _topk_softmax, key)
    torch.library.register_fake(f"{NAMESPACE}::linear", _linear_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::fused_moe", _fused_moe_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::topk_softmax", _topk_softmax_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::fp8_linear", _fp8_linear_fake, lib=lib)
    torch.library.register_fake(f"{NAMESPACE}::w4a16_linear", _w4a16_linear_fake, lib=lib)
    _state["lib"] = lib                 # the registrations live as long as the library object


_REFUSED = (InputTypeError, InputValueError)
# hipskinny's ops, imported when the plugin's ops are defined (importing this module stays light).
skinny_gemm: Callable[..., Any]
fp8_linear: Callable[..., Any]
w4a16_linear: Callable[..., Any]
fused_moe: Callable[..., Any]
topk_softmax: Callable[..., Any]


def _tokens(x: Any) -> int:
    k = x.shape[-1]
    return x.numel() // k if k else 0


_HALVES: tuple[Any, ...] = ()           # (torch.float16, torch.bfloat16) once the ops are defined


def _linear(x: Any, weight: Any, bias: Any, fallback: int) -> Any:
    """``x @ weight.T + bias`` over x's last dimension: hipskinny for decode, else vLLM's kernel.
    Only the two tests that send prefill and fp32 away are made here: hipskinny's bound call checks
    the rest (weight and bias dtypes and shapes, layout) and refuses before launching anything."""
    flat = x.dim() == 2                  # vLLM's layers see [tokens, features]: no reshapes then
    n = x.shape[0] if flat else _tokens(x)
    if 0 < n <= MAX_TOKENS and x.dtype in _HALVES:
        try:
            y = skinny_gemm(x if flat else x.reshape(n, x.shape[-1]), weight, bias)
        except _REFUSED:
            pass
        else:
            _counted("skinny_gemm")
            return y if flat else y.view(*x.shape[:-1], weight.shape[0])
    _declined["skinny_gemm"][0] += 1
    return _fallbacks[fallback](x, weight, bias)


def _linear_fake(x: Any, weight: Any, bias: Any, fallback: int) -> Any:
    import torch

    torch._check(weight.dim() == 2, lambda: f"hipskinny_vllm.linear: weight must be [M, K], got {tuple(weight.shape)}")
    torch._check(x.shape[-1] == weight.shape[1],
                 lambda: f"hipskinny_vllm.linear: x's last dimension {x.shape[-1]} != weight's K {weight.shape[1]}")
    torch._check(bias is None or tuple(bias.shape) == (weight.shape[0],),
                 lambda: f"hipskinny_vllm.linear: bias must be [{weight.shape[0]}]")
    torch._check(0 <= fallback < len(_fallbacks), lambda: f"hipskinny_vllm.linear: no fallback {fallback}")
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _fp8_linear(a: Any, b: Any, a_scale: Any, b_scale: Any, bias: Any, out_dtype: Any, output_shape: Any,
                fallback: int) -> Any:
    """vLLM's scaled MM: FP8 activations ``a`` [rows, K] (rows may be padded past the tokens), the
    weight seen as ``b`` [K, M] (a row-major [M, K] transposed), per-tensor or per-token ``a_scale``,
    per-tensor or per-channel ``b_scale``: hipskinny's W8A8 `fp8_linear` for decode."""
    n = 1
    for d in output_shape[:-1]:
        n *= d
    if 0 < n <= MAX_TOKENS and out_dtype in _HALVES:
        x_scale = a_scale.reshape(-1)       # [1] or per token [rows]; vLLM's kernel keeps its own shape below
        try:
            y = fp8_linear(a[:n], b.t(), b_scale.reshape(-1), x_scale=x_scale if x_scale.numel() == 1 else x_scale[:n],
                           bias=bias, out_dtype=out_dtype)
        except _REFUSED:
            pass
        else:
            _counted("fp8_linear")
            return y.view(*output_shape)
    _declined["fp8_linear"][0] += 1
    return _fallbacks[fallback](a, b, a_scale, b_scale, bias, out_dtype, output_shape)


def _fp8_linear_fake(a: Any, b: Any, a_scale: Any, b_scale: Any, bias: Any, out_dtype: Any, output_shape: Any,
                     fallback: int) -> Any:
    import torch

    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"hipskinny_vllm.fp8_linear: a {tuple(a.shape)} and b {tuple(b.shape)} must be [rows, K] "
                         "and [K, M]")
    torch._check(output_shape[-1] == b.shape[1],
                 lambda: f"hipskinny_vllm.fp8_linear: output_shape {list(output_shape)} must end in "
                         f"M = {b.shape[1]}")
    return a.new_empty(list(output_shape), dtype=out_dtype)


def _w4a16_linear(x: Any, bias: Any, m: int, fallback: int) -> Any:
    """A GPTQ layer (weights repacked at load, `_prepared`): hipskinny's w4a16_linear for decode."""
    n = _tokens(x)
    if 0 < n <= MAX_TOKENS and x.dtype in _HALVES:
        try:
            y = w4a16_linear(x, _prepared[fallback], bias)
        except _REFUSED:
            pass
        else:
            _counted("w4a16_linear")
            return y
    _declined["w4a16_linear"][0] += 1
    return _fallbacks[fallback](x, bias)


def _w4a16_linear_fake(x: Any, bias: Any, m: int, fallback: int) -> Any:
    import torch

    torch._check(fallback in _prepared, lambda: f"hipskinny_vllm.w4a16_linear: no prepared layer {fallback}")
    torch._check(x.shape[-1] == _prepared[fallback].shape[1],
                 lambda: f"hipskinny_vllm.w4a16_linear: x's last dimension {x.shape[-1]} != the layer's K "
                         f"{_prepared[fallback].shape[1]}")
    return x.new_empty((*x.shape[:-1], m))


def _fused_moe(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any, fallback: int) -> Any:
    """The routed experts' SwiGLU MLPs, weighted and summed per token."""
    if topk_ids.shape[0] <= MAX_TOKENS and x.dtype in _HALVES:
        try:
            y = fused_moe(x, w13, w2, topk_weights, topk_ids)
        except _REFUSED:
            pass
        else:
            _counted("fused_moe")
            return y
    _declined["fused_moe"][0] += 1
    return _fallbacks[fallback](x, w13, w2, topk_weights, topk_ids)


def _fused_moe_fake(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any, fallback: int) -> Any:
    import torch

    torch._check(x.dim() == 2 and w13.dim() == 3 and w2.dim() == 3,
                 lambda: "hipskinny_vllm.fused_moe: x must be [N, H], w13 [E, 2I, H], w2 [E, H, I]")
    torch._check(w13.shape[2] == x.shape[1] and w2.shape[1] == x.shape[1] and w13.shape[1] == 2 * w2.shape[2],
                 lambda: f"hipskinny_vllm.fused_moe: shapes x {tuple(x.shape)}, w13 {tuple(w13.shape)}, "
                         f"w2 {tuple(w2.shape)} do not agree")
    torch._check(topk_weights.shape == topk_ids.shape and topk_ids.shape[0] == x.shape[0],
                 lambda: "hipskinny_vllm.fused_moe: topk_weights and topk_ids must both be [N, k]")
    return x.new_empty(x.shape)


def _topk_softmax(router_logits: Any, k: int, renormalize: bool, fallback: int) -> tuple[Any, Any]:
    """Softmax top-k routing: fp32 weights and int32 ids ``[N, k]``."""
    if router_logits.dim() == 2 and router_logits.shape[0] <= MAX_TOKENS:
        try:
            found = topk_softmax(router_logits, k, renormalize)
        except _REFUSED:
            pass
        else:
            _counted("topk_softmax")
            return found
    _declined["topk_softmax"][0] += 1
    return _fallbacks[fallback](router_logits)


def _topk_softmax_fake(router_logits: Any, k: int, renormalize: bool, fallback: int) -> tuple[Any, Any]:
    import torch

    torch._check(router_logits.dim() == 2, lambda: "hipskinny_vllm.topk_softmax: router logits must be [N, E]")
    torch._check(1 <= k <= router_logits.shape[1], lambda: f"hipskinny_vllm.topk_softmax: k={k} of "
                                                           f"{router_logits.shape[1]} experts")
    n = router_logits.shape[0]
    return (router_logits.new_empty((n, k), dtype=torch.float32), router_logits.new_empty((n, k), dtype=torch.int32))


def _counted(op: str) -> None:
    _counts[op][0] += 1
    if not _state["summary_logged"]:
        _state["summary_logged"] = True
        log.info("hipskinny: %s", _summary())


def _summary() -> str:
    parts = [f"{kind} x{count}: {how}" for kind, (how, count) in sorted(_kinds.items())]
    kept = _kept_bytes[0]
    tail = f"; weights kept for hipskinny that vLLM would have freed: {kept / 2**20:.1f} MiB" if kept else ""
    return (f"on {_state['device']}, decode calls of N <= {MAX_TOKENS} tokens -- " + "; ".join(parts) +
            f"; every other call stays with vLLM's kernel{tail}")


def _seen(kind: str, how: str) -> None:
    entry = _kinds.setdefault(f"{kind} ({how})" if how.startswith("stays") else kind, [how, 0])
    entry[1] += 1
    _state["summary_logged"] = False        # a model was (re)loaded: say again at its first served call


# ----------------------------------------------------------------------------------------------
# Linear layers and the lm_head.
# ----------------------------------------------------------------------------------------------

def _plain_linear(x: Any, weight: Any, bias: Any) -> Any:
    import torch

    return torch.nn.functional.linear(x, weight, bias)


def _gemm_for(platform_gemm: Callable[..., Any]) -> Callable[..., Any]:
    """The GEMM vLLM's unquantized layers call as ``gemm(layer, x, weight, bias)``."""
    import torch

    op = getattr(torch.ops, NAMESPACE).linear.default
    is_compiling = torch.compiler.is_compiling

    def gemm(layer: Any, x: Any, weight: Any, bias: Any = None) -> Any:
        found = getattr(layer, "_hipskinny", None)
        if found is None:                                  # a layer built outside vLLM's loader
            return platform_gemm(layer, x, weight, bias)
        fallback, kept_weight, kept_bias = found
        if kept_weight is not None:
            weight = kept_weight
        if bias is not None and kept_bias is not None:
            bias = kept_bias
        # Compiled: one opaque node. Eager: the same function without torch's dispatcher in between.
        if is_compiling():
            return op(x, weight, bias, fallback)
        return _linear(x, weight, bias, fallback)

    return gemm


def _dispatch(original: Callable[..., Any], gemm: Callable[..., Any]) -> Callable[..., Any]:
    def dispatch_unquantized_gemm(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        original(*args, **kwargs)          # vLLM's choice is still made (and logged) as before
        return gemm

    dispatch_unquantized_gemm.__wrapped__ = original    # type: ignore[attr-defined]
    return dispatch_unquantized_gemm


def _adopting_linear(original: Callable[..., Any], platform_gemm: Callable[..., Any], only: type | None
                     ) -> Callable[..., Any]:
    """``process_weights_after_loading`` that lets vLLM pack the layer for its own kernel, then keeps
    what hipskinny reads: the [M, K] weight, and a 16-bit bias vLLM widened. ``only``: adopt only
    layers of that class (the embedding method's: the lm_head, not the input embedding)."""

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        if only is not None and not isinstance(layer, only):
            original(self, layer)
            return
        weight = getattr(layer, "weight", None)
        bias = getattr(layer, "bias", None)
        weight_data = weight.data if weight is not None else None
        bias_data = bias.data if bias is not None else None
        original(self, layer)
        kind = type(layer).__name__
        if weight_data is None or weight_data.dim() != 2 or weight_data.dtype not in _HALVES \
                or weight_data.is_meta:
            what = "none" if weight_data is None else f"{tuple(weight_data.shape)} {weight_data.dtype}"
            _seen(kind, f"stays with vLLM (weight {what})")
            return
        now = getattr(layer, "weight", None)
        kept_weight = None
        if now is None or now.data.data_ptr() != weight_data.data_ptr() or now.shape != weight_data.shape:
            kept_weight = weight_data                   # vLLM repacked it for its CPU kernel
            _kept_bytes[0] += weight_data.numel() * weight_data.element_size()
        kept_bias = None
        if bias_data is not None and layer.bias.dtype != bias_data.dtype:
            kept_bias = bias_data
            _kept_bytes[0] += bias_data.numel() * bias_data.element_size()
        index = len(_fallbacks)
        _fallbacks.append(_layer_fallback(platform_gemm, layer))
        layer._hipskinny = (index, kept_weight, kept_bias)
        _seen(kind, "skinny_gemm")

    return process_weights_after_loading


def _layer_fallback(platform_gemm: Callable[..., Any], layer: Any) -> Callable[..., Any]:
    def fallback(x: Any, weight: Any, bias: Any) -> Any:
        # vLLM's kernel gets the layer's own tensors (on the CPU platform: its repacked weight).
        own_bias = getattr(layer, "bias", None) if bias is not None else None
        return platform_gemm(layer, x, layer.weight, own_bias)

    return fallback


def _adopting_w4(original: Callable[..., Any], uint4b8: Any) -> Callable[..., Any]:
    """A mixed-precision kernel's ``process_weights_after_loading`` that first repacks a symmetric
    GPTQ int4 layer's checkpoint tensors (``qweight`` [K/8, M], ``scales`` [K/G, M], as vLLM's GPTQ
    method loads them) with `hipskinny.w4a16.prepare`, then lets vLLM repack them for its own kernel."""

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        c = self.config
        qweight = getattr(layer, self.w_q_name)
        prepared, why = None, None
        if c.weight_type != uint4b8 or c.zero_points:
            why = f"weights {c.weight_type}{' with zero points' if c.zero_points else ''}"
        elif c.act_type not in _HALVES:
            why = f"activations {c.act_type}"
        elif (getattr(qweight, "input_dim", None), getattr(qweight, "packed_dim", None)) != (0, 0):
            # GPTQ's [K/8, M], packed along K; other methods' layouts (compressed-tensors: [M, K/8]) differ
            why = "packed weights not in GPTQ's [K/8, M] layout"
        else:
            prepared, why = _prepare_gptq(qweight.data, getattr(layer, self.w_s_name).data, c.group_size, c.act_type)
        original(self, layer)
        kind = f"int4 linear ({type(self).__name__})"
        if prepared is None:
            self._hipskinny = -1
            _seen(kind, f"stays with vLLM ({why})")
            return
        index = len(_fallbacks)
        own = type(self).apply_weights
        own = getattr(own, "__wrapped__", own)          # vLLM's apply_weights, under the plugin's
        _fallbacks.append(lambda x, bias: own(self, layer, x, bias))
        _prepared[index] = prepared
        self._hipskinny = index
        self._hipskinny_m = prepared.shape[0]
        _seen(kind, "w4a16_linear")

    return process_weights_after_loading


def _prepare_gptq(qweight: Any, scales: Any, group_size: int, act_type: Any) -> tuple[Any, str | None]:
    """``(Prepared on qweight's device, None)``, or ``(None, why not)``; logs the bytes once per layer."""
    from ..errors import HipSkinnyError
    from ..formats import w4a16
    from ..ops.w4a16_linear import prepared_bytes, prepared_on

    try:
        p = w4a16.prepare(qweight.detach().cpu(), scales.detach().cpu(), fmt="gptq", group_size=group_size,
                          dtype=str(act_type).removeprefix("torch."))
    except HipSkinnyError as e:
        return None, str(e)
    p = prepared_on(p, qweight.device)
    size = prepared_bytes(p)
    log.info("hipskinny: a GPTQ int4 layer (%d x %d, group %d) repacked once for w4a16_linear: %d bytes",
             p.shape[0], p.shape[1], p.group_size, size)
    return p, None


def _w4_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    op = getattr(torch.ops, NAMESPACE).w4a16_linear.default
    is_compiling = torch.compiler.is_compiling

    def apply_weights(self: Any, layer: Any, x: Any, bias: Any = None) -> Any:
        index = getattr(self, "_hipskinny", -1)
        if index < 0:
            return original(self, layer, x, bias)
        if is_compiling():
            return op(x, bias, self._hipskinny_m, index)
        return _w4a16_linear(x, bias, self._hipskinny_m, index)

    apply_weights.__wrapped__ = original        # type: ignore[attr-defined]
    return apply_weights


def _adopting_fp8(init: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """A scaled-MM kernel's ``__init__`` (one kernel object per layer) that registers its fallback."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._hipskinny = len(_fallbacks)

        def fallback(a: Any, b: Any, a_scale: Any, b_scale: Any, bias: Any, out_dtype: Any, output_shape: Any) -> Any:
            return original(self, A=a, B=b, out_dtype=out_dtype, As=a_scale, Bs=b_scale, bias=bias,
                            output_shape=list(output_shape))

        _fallbacks.append(fallback)
        _seen(f"FP8 linear ({type(self).__name__})", "fp8_linear")

    return __init__


def _scaled_mm(original: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    op = getattr(torch.ops, NAMESPACE).fp8_linear.default
    is_compiling = torch.compiler.is_compiling

    def apply_scaled_mm(self: Any, *, A: Any, B: Any, out_dtype: Any, As: Any, Bs: Any, bias: Any,
                        output_shape: list) -> Any:
        index = getattr(self, "_hipskinny", -1)
        if index < 0:
            return original(self, A=A, B=B, out_dtype=out_dtype, As=As, Bs=Bs, bias=bias, output_shape=output_shape)
        if is_compiling():
            return op(A, B, As, Bs, bias, out_dtype, list(output_shape), index)
        return _fp8_linear(A, B, As, Bs, bias, out_dtype, output_shape, index)

    apply_scaled_mm.__wrapped__ = original      # type: ignore[attr-defined]
    return apply_scaled_mm


# ----------------------------------------------------------------------------------------------
# MoE experts and routing.
# ----------------------------------------------------------------------------------------------

def _experts_class(base: type, silu: Any, on_cpu: bool) -> type:
    """vLLM's unquantized MoE method with the decode case sent to `hipskinny.moe.fused_moe`."""
    import torch

    op = getattr(torch.ops, NAMESPACE).fused_moe.default
    is_compiling = torch.compiler.is_compiling

    class HipSkinnyUnquantizedFusedMoEMethod(base):   # type: ignore[misc, valid-type]
        def process_weights_after_loading(self, layer: Any) -> None:
            w13, w2 = layer.w13_weight.data, layer.w2_weight.data
            super().process_weights_after_loading(layer)
            why = self._refusal(layer, w13, w2)
            if why is not None:
                self._hipskinny = None
                _seen("experts", f"stays with vLLM ({why})")
                return
            moved = layer.w13_weight.data.data_ptr() != w13.data_ptr() or layer.w2_weight.data.data_ptr() != \
                w2.data_ptr() or layer.w13_weight.shape != w13.shape or layer.w2_weight.shape != w2.shape
            if moved and not on_cpu:
                self._hipskinny = None
                _seen("experts", f"stays with vLLM (its {self.unquantized_backend.value} backend re-lays out "
                                 "the weights)")
                return
            if moved:
                _kept_bytes[0] += sum(t.numel() * t.element_size() for t in (w13, w2))
            index = len(_fallbacks)
            _fallbacks.append(self._fallback(layer))
            self._hipskinny = (index, w13, w2)
            _seen("experts", "fused_moe")

        def _refusal(self, layer: Any, w13: Any, w2: Any) -> str | None:
            if layer.activation != silu:
                return f"activation {layer.activation}"
            if getattr(self.moe, "has_bias", False):
                return "expert biases"
            if getattr(layer, "apply_router_weight_on_input", False):
                return "router weights applied to the input"
            if getattr(layer, "expert_map", None) is not None:
                return "expert parallelism"
            if w13.dtype not in _HALVES or w13.dim() != 3 or w2.dim() != 3 or w13.shape[1] != 2 * w2.shape[2]:
                return f"weights {tuple(w13.shape)} {w13.dtype}"
            return None

        def _fallback(self, layer: Any) -> Callable[..., Any]:
            def fallback(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any) -> Any:
                return base.apply(self, layer, x, topk_weights, topk_ids, None, None)

            return fallback

        def apply(self, layer: Any, x: Any, topk_weights: Any, topk_ids: Any, shared_experts: Any,
                  shared_experts_input: Any) -> Any:
            found = getattr(self, "_hipskinny", None)
            if found is None or shared_experts is not None:
                return super().apply(layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input)
            index, w13, w2 = found
            if is_compiling():
                return op(x, w13, w2, topk_weights, topk_ids, index)
            return _fused_moe(x, w13, w2, topk_weights, topk_ids, index)

    return HipSkinnyUnquantizedFusedMoEMethod


def _routing(original: Callable[..., Any]) -> Callable[..., Any]:
    """A router's ``_compute_routing`` with plain softmax top-k sent to `hipskinny.moe.topk_softmax`."""
    import torch

    op = getattr(torch.ops, NAMESPACE).topk_softmax.default
    is_compiling = torch.compiler.is_compiling

    def _compute_routing(self: Any, hidden_states: Any, router_logits: Any, indices_type: Any, **kwargs: Any
                         ) -> tuple[Any, Any]:
        index = getattr(self, "_hipskinny", -1)
        if index < 0:
            return original(self, hidden_states, router_logits, indices_type, **kwargs)
        if is_compiling():
            return op(router_logits, self.top_k, bool(self.renormalize), index)
        return _topk_softmax(router_logits, self.top_k, bool(self.renormalize), index)

    _compute_routing.__wrapped__ = original     # type: ignore[attr-defined]
    return _compute_routing


def _adopting_router(init: Callable[..., Any], compute: Callable[..., Any]) -> Callable[..., Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _adopt_router(self, compute)

    return __init__


def _adopt_router(router: Any, original: Callable[..., Any]) -> int:
    plain = (not getattr(router, "use_grouped_topk", False) and getattr(router, "scoring_func", "softmax") == "softmax"
             and getattr(router, "custom_routing_function", None) is None
             and getattr(router, "e_score_correction_bias", None) is None)
    if not plain:
        router._hipskinny = -1
        _seen("router", "stays with vLLM (not plain softmax top-k)")
        return -1
    index = len(_fallbacks)
    _fallbacks.append(lambda logits: original(router, logits, logits, None))
    router._hipskinny = index
    _seen("router", "topk_softmax")
    return index


# ----------------------------------------------------------------------------------------------
# HIP graphs (ROCm). hipskinny's scratch (split-K partials, MoE routes) is sized by the calls that
# used it; a capture that would need more raises `hipskinny.CaptureError`. vLLM's own warm-ups run
# prefill sizes (where the plugin steps aside) or run on the capture stream size by size.
# ----------------------------------------------------------------------------------------------

def warm_up_for_capture(run: Callable[[int], Any], sizes: Any) -> int | None:
    """Call ``run(n)`` (a model step of n tokens) once at the largest of the captured batch sizes
    ``sizes`` that the plugin serves (at most `MAX_TOKENS`); returns n, or None when none is served.
    The step's served ops then size hipskinny's scratch for every capture that follows."""
    served_sizes = [int(s) for s in sizes if 0 < int(s) <= MAX_TOKENS]
    if not served_sizes:
        return None
    n = max(served_sizes)
    run(n)
    return n


def reserving(graph_capture: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``graph_capture`` context manager, with `hipskinny.reserve` called on its capture stream
    (every scratch slot grown to the most any stream of the device used) before anything is captured."""
    import contextlib

    from ..scratch import reserve

    @contextlib.contextmanager
    def capture(*args: Any, **kwargs: Any) -> Any:
        with graph_capture(*args, **kwargs) as context:
            reserve(context.stream)
            yield context

    capture.__wrapped__ = graph_capture     # type: ignore[attr-defined]
    return capture


def _warming_up(method: Callable[..., Any]) -> Callable[..., Any]:
    def capturing(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_hipskinny_warmed_up", False):
            n = warm_up_for_capture(self._dummy_run, self.compilation_config.cudagraph_capture_sizes or ())
            self._hipskinny_warmed_up = True
            log.info("hipskinny: ran the served ops at %s tokens before vLLM's HIP graph capture", n)
        return method(self, *args, **kwargs)

    capturing.__wrapped__ = method      # type: ignore[attr-defined]
    return capturing
