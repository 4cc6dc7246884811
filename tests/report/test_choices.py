"""benchmarks.choices: the sweep overrides a planner constant for a block and every cached plan
follows it, then the shipped value is back."""

from __future__ import annotations

import numpy as np

from benchmarks import choices, dynamic
from hipskinny.ops import _linear, gemv, skinny_gemm


def test_override_reaches_cached_plans_and_restores():
    dev = dynamic.device("gfx942", 304)
    shipped = skinny_gemm.plan_info(dev, np.float16, 4, 4096, 4096)["groups_per_cu"]
    with choices.override(_linear, "MAX_GROUPS_PER_CU", 1):
        assert skinny_gemm.plan_info(dev, np.float16, 4, 4096, 4096)["groups_per_cu"] == 1
    assert skinny_gemm.plan_info(dev, np.float16, 4, 4096, 4096)["groups_per_cu"] == shipped
    assert gemv.rows_per_group(4096, 304) == 4          # 1024 workgroups: at least GROUPS_PER_CU per CU
    with choices.override(gemv, "GROUPS_PER_CU", 8):
        assert gemv.rows_per_group(4096, 304) == 1
    unsplit = skinny_gemm.plan_info(dev, np.float16, 16, 4096, 4096)
    with choices.override(_linear, "SPLITK_UNIT_BYTES", 2**40), choices.override(_linear, "SPLITK_COMPUTE", {}):
        assert skinny_gemm.plan_info(dev, np.float16, 16, 4096, 4096)["shards"] == 1 < unsplit["shards"]
