"""What several op modules share without importing each other: the 16-bit dtype check of the dense
ops (gemv, skinny_gemm), the kernels' dtype tags and the MoE ops' limits."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import tensors
from ..errors import InputTypeError

DTYPE_TAG = {np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}
# The MoE ops' limits, one pair for the router and the experts, so that what topk_softmax returns
# fused_moe takes: E experts (topk_softmax.hip: V * wave values per lane, 8 x 64 or 16 x 32;
# fused_moe.hip: kMaxExperts, the route's LDS) and k choices per token.
MAX_EXPERTS = 512
MAX_TOPK = 16


def check_16bit_dtypes(op: str, xv: tensors.TensorView, wv: tensors.TensorView,
                       bv: tensors.TensorView | None) -> str:
    """x, w and bias all fp16 or all bf16; returns the kernel dtype tag ("f16"/"bf16")."""
    named = (("x", xv), ("w", wv)) + ((("bias", bv),) if bv is not None else ())
    for name, v in named:
        if v.dtype not in DTYPE_TAG:
            raise InputTypeError(f"{op}: {name} has dtype {v.dtype}; supported: float16, bfloat16")
    if any(v.dtype != xv.dtype for _, v in named):
        got = ", ".join(f"{n}={v.dtype}" for n, v in named)
        raise InputTypeError(f"{op}: x, w and bias must share one dtype (float16 or bfloat16); got {got}")
    return DTYPE_TAG[xv.dtype]
