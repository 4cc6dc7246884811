"""A kernel family is registered in one place, its op module ``frontend/ops/<name>.py``: it publishes
``<name>`` and ``<name>_reference`` and declares the rest in ``EXPORTS`` (torch ops, the kernel
sources it launches, how the report measures it). The package namespace, torch's op library and the
benchmarks find it there; one name runs through its kernel file, op module, torch op, tests folder
and benchmark (CONTRIBUTING.md, "A new kernel family")."""

from __future__ import annotations

import paths
import pytest

import hipskinny
from hipskinny import ops, torch_ops

OPS = ops.op_names()


def test_the_op_modules_are_found():
    assert OPS == ["fp8_linear", "fused_moe", "gemv", "matmul_4bit", "skinny_gemm", "sparse_mla", "topk_softmax",
                   "w4a16_linear"]


@pytest.mark.parametrize("op", OPS)
def test_one_name_per_family(op):
    mod = ops.op_module(op)
    ex = mod.EXPORTS
    assert isinstance(ex, ops.Exports)
    assert getattr(hipskinny, op) is getattr(mod, op) and callable(getattr(mod, op))
    assert getattr(hipskinny, f"{op}_reference") is getattr(mod, f"{op}_reference")
    assert {op, f"{op}_reference"} <= set(hipskinny.__all__)
    assert ex.code_objects[0] == op and all(co.startswith(f"{op}_") for co in ex.code_objects[1:])
    assert all((paths.REPO / "kernels" / f"{co}.hip").is_file() for co in ex.code_objects)
    names = {t.name for t in ex.torch_ops}
    assert {op, f"{op}_out"} <= names and all(n.startswith(op) or n.startswith(f"{op}_") for n in names
                                               if n != "sparse_mla_decode" and n != "sparse_mla_decode_out")
    assert (paths.REPO / "tests" / op).is_dir()
    assert list((paths.REPO / "tests" / op).glob(f"test_{op}*.py"))
    benchmark = paths.REPO / "benchmarks" / f"{op}.py"
    if ex.report == ops.GEMM_REPORT:
        assert not benchmark.exists()        # measured by the report itself
    else:
        assert len(ex.report) > 40           # the reason the report prints


def test_op_modules_are_short():
    sizes = {p.name: len(p.read_text().splitlines()) for p in (paths.REPO / "frontend" / "ops").glob("*.py")}
    assert len(sizes) > 10 and {name: n for name, n in sizes.items() if n > 350} == {}


def test_every_kernel_source_belongs_to_exactly_one_op():
    claimed = [co for op in OPS for co in ops.exports(op).code_objects]
    assert sorted(claimed) == sorted(p.stem for p in (paths.REPO / "kernels").glob("*.hip"))


def test_torch_registers_exactly_the_declared_ops():
    declared = [t.name for op in OPS for t in ops.exports(op).torch_ops]
    assert len(set(declared)) == len(declared)
    found = [t.name for t in torch_ops.ops()]
    assert found[:len(declared)] == declared and len(found) > len(declared)     # + autograd's backward ops


def test_unknown_names_say_what_exists():
    with pytest.raises(AttributeError, match="no attribute 'gemm'"):
        hipskinny.gemm  # noqa: B018
    with pytest.raises(AttributeError, match="its ops: fp8_linear, fused_moe, gemv"):
        ops.op_module("gemm")
