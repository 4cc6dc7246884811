"""``hipskinny demo --model``: a tiny random MoE model decoded through hipskinny on the emulator."""

from __future__ import annotations

import builtins
import importlib
import sys

import pytest

from hipskinny import demo


def test_model_demo_on_the_emulator(capsys, monkeypatch):
    """The demo decodes greedily with hipskinny serving the experts and the linear layers, prints the
    tokens, the rate and the kernels that served each layer, and agrees with torch alone."""
    pytest.importorskip("transformers")
    monkeypatch.setattr(demo, "MODEL_CONFIG", dict(demo.MODEL_CONFIG, num_hidden_layers=1))   # half the time
    assert demo.run_model_demo("emulator:gfx942", new_tokens=3) == 0
    out = capsys.readouterr().out
    assert "on emulator:gfx942" in out and "same as torch alone: yes" in out and "tokens/s" in out
    served = dict(line.strip().split(": ", 1) for line in out.split("served by:\n", 1)[1].splitlines())
    assert served["model.layers.0.self_attn.q_proj"].startswith("skinny_gemm_bf16_n1")
    assert served["lm_head"] == "skinny_gemm_bf16_n1_y1"
    experts = served["model.layers.0.mlp.experts"]
    assert "fused_moe_route" in experts and "fused_moe_gemm1_bf16" in experts and "fused_moe_gemm2_bf16" in experts


def test_model_demo_without_transformers_says_so(monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "transformers", None)     # import fails as if not installed
    assert demo.run_model_demo("emulator:gfx942") == 2
    out = capsys.readouterr().out
    assert "needs torch and transformers" in out
    assert "transformers is not installed: pip install transformers" in out


def test_model_demo_without_torch_names_torch_and_its_install_command(monkeypatch, capsys):
    """Issue 55: without torch the demo said `torch is not installed: pip install transformers`."""
    monkeypatch.setitem(sys.modules, "torch", None)            # import fails as if not installed
    assert demo.run_model_demo("emulator:gfx942") == 2
    out = capsys.readouterr().out
    assert "needs torch and transformers" in out
    assert "torch is not installed: pip install torch" in out and "pip install transformers" not in out


def _failing_import(monkeypatch, package: str, error: ImportError) -> None:
    """``import <package>`` raises `error`, as a missing dependency or a broken install would make it."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == package:
            raise error
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, package, raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(importlib, "import_module", lambda name: fake_import(name))


def test_model_demo_without_a_transformers_dependency_names_the_dependency(monkeypatch, capsys):
    pytest.importorskip("torch")
    _failing_import(monkeypatch, "transformers", ModuleNotFoundError("No module named 'yaml'", name="yaml"))
    assert demo.run_model_demo("emulator:gfx942") == 2
    out = capsys.readouterr().out
    assert "transformers needs yaml, which is not installed: pip install pyyaml" in out, out


def test_model_demo_with_a_broken_torch_says_it_cannot_be_imported(monkeypatch, capsys):
    error = ImportError("libtorch_cpu.so: cannot open shared object file")
    _failing_import(monkeypatch, "torch", error)
    assert demo.run_model_demo("emulator:gfx942") == 2
    out = capsys.readouterr().out
    assert "torch is installed but cannot be imported (libtorch_cpu.so: cannot open shared object file)" in out
    assert "pip install --force-reinstall torch" in out and "not installed" not in out
