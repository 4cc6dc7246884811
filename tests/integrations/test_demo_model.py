"""``hipskinny demo --model``: a tiny random MoE model decoded through hipskinny on the emulator."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from hipskinny import demo  # noqa: E402


def test_model_demo_on_the_emulator(capsys, monkeypatch):
    """The demo decodes greedily with hipskinny serving the experts and the linear layers, prints the
    tokens, the rate and the kernels that served each layer, and agrees with torch alone."""
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
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)     # import fails as if not installed
    assert demo.run_model_demo("emulator:gfx942") == 2
    assert "needs torch and transformers" in capsys.readouterr().out
