"""benchmarks.choices: the sweep overrides a planner constant for a block and every cached plan
follows it, then the shipped value is back."""

from __future__ import annotations

import numpy as np

from benchmarks import choices, dynamic
from hipskinny.ops import _linear, _splitk, gemv, skinny_gemm


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
    with choices.override(_splitk, "SPLITK_UNIT_BYTES", 2**40), choices.override(_splitk, "SPLITK_COMPUTE", {}):
        assert skinny_gemm.plan_info(dev, np.float16, 16, 4096, 4096)["shards"] == 1 < unsplit["shards"]


def test_compute_table_is_the_even_spread_compute_over_the_floor():
    """`choices.compute_table`: per kernel stem and arch, the median compute roof (divided back by the
    busiest-CU share it was charged at) over the bandwidth floor, at one and four token tiles; routers,
    dequantize routes and stems measured at one tile count only are left out."""
    def row(kernel, nt, compute, share, layer="o_proj", op="matmul_4bit"):
        return {"status": "ok", "op": op, "arch": "gfx1100", "layer": layer, "floor_us": 10.0,
                "busiest_cu_share": share, "plan": {"kernel": kernel, "shards": 1, "token_tiles": nt},
                "roofs_us": {"valu": compute, "matrix": 1.0, "lds": 1.0, "memory": 10.0, "latency": 1.0}}
    rows = [row("matmul_4bit_splitk_bf16_t1", 1, 6.0, 2.0), row("matmul_4bit_splitk_f16_t1", 1, 4.0, None),
            row("matmul_4bit_splitk_f16_t1", 1, 3.5, 1.0), row("matmul_4bit_splitk_f16_t4", 4, 12.0, 1.0),
            row("matmul_4bit_splitk_f16_t1", 1, 90.0, 1.0, layer="router"),
            row("skinny_gemm_splitk_f16_t1", 1, 5.0, 1.0, op="matmul_4bit:dequantize"),
            row("w4a16_linear_splitk_f16_t1", 1, 5.0, 1.0)]
    assert choices.compute_table({"rows": rows}) == {"matmul_4bit_splitk_f16": {"gfx1100": (0.35, 1.2)}}
    assert _splitk.kernel_stem("fp8_linear_splitk_bf16_fnuz_block_t2") == "fp8_linear_splitk_f16_ocp_block"
