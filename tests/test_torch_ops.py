"""torch.ops.hipskinny.*: registration without importing torch, fake tensors, torch.compile without
graph breaks and with the same bits as eager (CPU tensors, the emulator as the device)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch._dynamo.testing

import hipskinny
from hipskinny import torch_ops
from hipskinny.emulator import EmulatedDevice

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_import_hipskinny_does_not_import_torch():
    assert _python("import hipskinny, sys; print('torch' in sys.modules)").strip() == "False"


@pytest.mark.parametrize("order", ["import hipskinny, torch", "import torch, hipskinny"])
def test_ops_exist_in_either_import_order(order):
    names = ("gemv", "gemv_out", "skinny_gemm", "skinny_gemm_out")
    out = _python(f"{order}\nprint(all(hasattr(torch.ops.hipskinny, n) for n in {names!r}))")
    assert out.strip() == "True"


def test_schemas_declare_what_is_mutated():
    torch_ops.register()
    assert torch_ops.registered()
    for name in ("gemv", "skinny_gemm"):
        functional = getattr(torch.ops.hipskinny, name).default._schema
        into = getattr(torch.ops.hipskinny, f"{name}_out").default._schema
        assert not functional.is_mutable and into.is_mutable
        assert [a.name for a in into.arguments if a.alias_info is not None and a.alias_info.is_write] == ["out"]
        assert len(into.returns) == 0


@pytest.fixture(scope="module")
def dev():
    return EmulatedDevice("gfx1201", 2)


def _inputs(n, m, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, k), generator=g).to(torch.float16)
    w = (torch.randn((m, k), generator=g) / 8).to(torch.float16)
    b = torch.randn((m,), generator=g).to(torch.float16)
    return x, w, b


def test_fake_tensors_infer_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty((3, 5, 64), dtype=torch.float16), torch.empty((40, 64), dtype=torch.float16)
        y = torch.ops.hipskinny.skinny_gemm(x, w)
        assert y.shape == (3, 5, 40) and y.dtype == torch.float16
        assert torch.ops.hipskinny.gemv(x[0, 0], w).shape == (40,)
        assert torch.ops.hipskinny.gemv(x[0, :1], w).shape == (1, 40)


@pytest.mark.parametrize("n", [4, 16])
def test_compile_fullgraph_same_bits_as_eager(dev, n):
    x, w, b = _inputs(n, 64, 256, seed=n)
    out = torch.empty((n, 64), dtype=torch.float16)

    def fn(x, w, b, out):
        y = torch.ops.hipskinny.skinny_gemm(x * 2, w, b)
        torch.ops.hipskinny.skinny_gemm_out(x, w, None, out, deterministic=True)
        g = torch.ops.hipskinny.gemv(x[0], w)
        return torch.relu(y) + out, g

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    with hipskinny.on_device(dev):
        eager = fn(x, w, b, out.clone())
        compiled = torch.compile(fn, fullgraph=True, backend=counter)
        got = compiled(x, w, b, out)
    assert counter.frame_count == 1                       # one graph: no breaks
    for e, g in zip(eager, got, strict=True):
        assert torch.equal(e.view(torch.int16), g.view(torch.int16))
    with hipskinny.on_device(dev):                        # and the out= op wrote what the op computes
        direct = hipskinny.skinny_gemm(x.numpy(), w.numpy())
    assert np.array_equal(out.numpy().view(np.int16), direct.view(np.int16))


def test_opcheck(dev):
    x, w, b = _inputs(2, 24, 64, seed=3)
    with hipskinny.on_device(dev):
        torch.library.opcheck(torch.ops.hipskinny.skinny_gemm.default, (x, w, b),
                              test_utils=("test_schema", "test_faketensor"))
        torch.library.opcheck(torch.ops.hipskinny.skinny_gemm_out.default,
                              (x, w, None, torch.empty((2, 24), dtype=torch.float16)),
                              test_utils=("test_schema", "test_faketensor"))
