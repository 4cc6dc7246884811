"""benchmarks/variants.py: every shipped kernel is one some plan selects (no dead variants).

Replays the stored witnesses (benchmarks/VARIANTS.json, plans only, no emulation): a kernel built
without a witness, or whose witness now selects another kernel, fails. Fix: stop building it, or
rerun ``python -m benchmarks.variants --write`` after a plan rule changed.
"""

from __future__ import annotations

from benchmarks import variants


def test_every_shipped_kernel_has_a_witness_plan():
    assert variants.check() == []


def test_the_sweep_holds_the_report_shapes():
    from benchmarks.shapes import CHECK_SHAPES, SHAPES
    mk = set(variants.shapes())
    assert {(s.m, s.k) for s in (*SHAPES, *CHECK_SHAPES)} <= mk
