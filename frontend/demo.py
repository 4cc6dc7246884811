"""``hipskinny demo``: one GEMV at a real decode shape, checked against the numpy reference."""

from __future__ import annotations

import importlib
import time

import numpy as np

from .devices import current_device, emulator_available, on_device, parse_device
from .devices.hip import hip_runtime_status
from .errors import HipSkinnyError

# Qwen3-30B-A3B router (M=128, K=2048): a real decode GEMV small enough for the emulator.
DEMO_M, DEMO_K = 128, 2048


def run_demo(spec: str | None = None) -> int:
    from .ops.gemv import gemv, gemv_reference

    device, refused = _demo_device(spec, "demo")
    if device is None:
        return refused
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, DEMO_K)).astype(np.float16)
    w = (rng.standard_normal((DEMO_M, DEMO_K)) / np.sqrt(DEMO_K)).astype(np.float16)
    try:
        with on_device(device):
            start = time.perf_counter()
            y = gemv(x, w)
            seconds = time.perf_counter() - start
    except HipSkinnyError as e:     # a chosen GPU without a runtime: one message, no traceback
        print(f"demo not run on {spec or 'the default device'}: {e}")
        return 2
    ref = gemv_reference(x, w).astype(np.float64)
    err = np.abs(y.astype(np.float64) - ref)
    # fp32 accumulation of K products, then one fp16 rounding (see tests/gemv/test_gemv_emulated.py).
    scale = np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)).ravel()
    bound = (DEMO_K + 1) * 2.0**-24 * scale + 2.0**-10 * (np.abs(ref).ravel() + scale)
    ok = bool(np.all(err.ravel() <= bound))
    print(f"gemv fp16 M={DEMO_M} K={DEMO_K} on {device.label} ({device.properties.cu_count} CUs): "
          f"max |y - reference| = {err.max():.3g}; within the fp32-accumulation bound: {'yes' if ok else 'NO'}; "
          f"{seconds * 1e3:.1f} ms wall")
    stats = getattr(device, "last_launch_stats", None)
    if stats is not None:
        print(f"launch stats: {stats}")
    return 0 if ok else 1


def _demo_device(spec: str | None, what: str):  # -> (Device | None, exit code when None)
    """The device a demo runs on (``spec``, else the GPU, else the emulator), or None and the exit
    code after saying why there is none."""
    try:
        device = parse_device(spec) if spec else _default_device()
    except HipSkinnyError as e:
        print(f"{what} not run: {e}")
        return None, 2
    if device is None:
        status = hip_runtime_status()
        print(f"{what} not run: no AMD GPU here (" + (status.get("problem") or "none found") + ") and the CPU "
              "emulator is not part of this installation yet, so there is nothing to run the kernels on.")
        return None, 0
    return device, 0


def _default_device():  # -> Device | None
    status = hip_runtime_status()
    if status.get("device_count", 0) > 0 or emulator_available():
        return current_device()
    return None


# The tiny MoE model of `hipskinny demo --model`: Qwen3-MoE's architecture (attention, a router and
# SiLU-gated experts in every layer), random weights from a fixed seed, small enough for the emulator.
MODEL_CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_experts=8, num_experts_per_tok=2, max_position_embeddings=128, tie_word_embeddings=False)
MODEL_PROMPT = [1, 17, 42, 99]


def run_model_demo(spec: str | None = None, new_tokens: int = 8) -> int:
    """Greedy decoding of a tiny random Qwen3-MoE model with hipskinny serving its experts
    (`integrations.transformers.register`) and linear layers (`accelerate`), on the GPU (ROCm torch)
    or the emulator (a CPU model whose host tensors run there); checked against the same model on
    torch alone, token for token."""
    try:
        torch = _import_for_model_demo("torch")
        transformers = _import_for_model_demo("transformers")
    except _MissingForDemo as e:
        print(f"demo --model not run: it needs torch and transformers; {e}")
        return 2
    device, refused = _demo_device(spec, "demo --model")
    if device is None:
        return refused
    from .integrations import transformers as hst

    on_gpu = device.kind != "emulator"
    if on_gpu and getattr(torch.version, "hip", None) is None:
        print(f"demo --model not run on {device.label}: torch {torch.__version__} is not a ROCm build")
        return 2
    torch_device = f"cuda:{getattr(device, 'ordinal', 0)}" if on_gpu else "cpu"
    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(**MODEL_CONFIG)
    model = transformers.Qwen3MoeForCausalLM(config).to(torch.float16 if on_gpu else torch.bfloat16)
    model = model.to(torch_device).eval()
    prompt = torch.tensor([MODEL_PROMPT], device=torch_device)

    def generate() -> tuple[list[int], float]:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        return out[0, len(MODEL_PROMPT):].tolist(), time.perf_counter() - start

    reference, _ = generate()                     # torch alone
    hst.register()
    model.set_experts_implementation(hst.KEY)
    hst.accelerate(model)
    served = _served_by(model, device, hst.accelerated(model))
    try:
        with on_device(device):
            tokens, seconds = generate()
    except HipSkinnyError as e:
        print(f"demo --model not run on {device.label}: {e}")
        return 2
    finally:
        for remove in served.pop(None, []):
            remove()
        hst.restore(model)
    print(f"tiny Qwen3-MoE ({config.num_hidden_layers} layers, {config.num_experts} experts, top-"
          f"{config.num_experts_per_tok}, {model.dtype}) on {device.label}: prompt {MODEL_PROMPT}")
    print(f"tokens: {tokens}; {len(tokens) / seconds:.2f} tokens/s ({seconds:.1f} s, prefill included"
          f"{', emulated' if not on_gpu else ''}); same as torch alone: {'yes' if tokens == reference else 'NO'}")
    print("served by:")
    for name, kernels in served.items():
        print(f"  {name}: {', '.join(sorted(kernels))}")
    return 0 if tokens == reference else 1


# Import names whose pip distribution is named otherwise.
_PIP_NAMES = {"yaml": "pyyaml", "huggingface_hub": "huggingface-hub", "PIL": "pillow", "sklearn": "scikit-learn"}


class _MissingForDemo(Exception):
    """What keeps the model demo from importing torch or transformers, and the command that fixes it."""


def _import_for_model_demo(package: str):
    """``import <package>``, or a `_MissingForDemo` naming what is actually missing (the package, or
    a module it needs) and the ``pip install`` that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        missing = (e.name or "") if isinstance(e, ModuleNotFoundError) else ""   # not "cannot import name"
        top = missing.split(".", 1)[0]
        if missing == package:
            hint = (" (for an AMD GPU, a ROCm build: https://pytorch.org/get-started/locally/)"
                    if package == "torch" else "")
            raise _MissingForDemo(f"{package} is not installed: pip install {package}{hint}") from e
        if top and top != package:      # one of the package's own dependencies
            raise _MissingForDemo(f"{package} needs {top}, which is not installed: "
                                  f"pip install {_PIP_NAMES.get(top, top)}") from e
        raise _MissingForDemo(f"{package} is installed but cannot be imported ({e}): "
                              f"pip install --force-reinstall {package}") from e


def _served_by(model, device, ops: dict[str, str]) -> dict:
    """Per accelerated module and per experts module, what served it: the op names; on the emulator
    the kernels its calls launched (forward hooks read the device's launch records around each
    call). Key None: the hooks' removers."""
    served: dict = {name: {op} for name, op in ops.items()}
    experts = {name for name, m in model.named_modules() if type(m).__name__.endswith("Experts")}
    served.update({name: {"fused_moe"} for name in experts})
    launches = getattr(device, "launches", None)
    removers = []
    if launches is not None:
        modules = dict(model.named_modules())
        for name in list(served):
            served[name] = set()
            marks: list = []
            removers.append(modules[name].register_forward_pre_hook(
                lambda _m, _a, marks=marks: marks.append(launches[-1] if launches else None)))
            removers.append(modules[name].register_forward_hook(
                lambda _m, _a, _o, name=name, marks=marks: served[name].update(_since(launches, marks.pop()))))
    served[None] = [r.remove for r in removers]
    return served


def _since(launches, mark) -> list[str]:
    records = list(launches)
    at = next((i for i, r in enumerate(records) if r is mark), None) if mark is not None else -1
    return [r.kernel for r in records[at + 1:]] if at is not None else []
