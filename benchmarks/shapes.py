"""Real decode workloads the report runs (shared/reference/shapes.md).

GEMM notation as everywhere: W is ``[M, K]``, x is ``[N, K]`` with N tokens. Every family
runs every shape at each N of `N_BY_FAMILY` (families not listed: `DEFAULT_N`); an N a
family's op does not support is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    model: str
    layer: str
    m: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.layer}"


SHAPES: tuple[Shape, ...] = (
    Shape("Llama-3-8B", "qkv_proj", 6144, 4096),
    Shape("Llama-3-8B", "o_proj", 4096, 4096),
    Shape("Llama-3-8B", "gate_up_proj", 28672, 4096),
    Shape("Llama-3-8B", "down_proj", 4096, 14336),
    Shape("Llama-3-8B", "lm_head", 128256, 4096),
    # Qwen3-class: the 30B-A3B attention + lm_head shapes, the ones the upstream gfx1151
    # numbers use (its MoE experts belong to a MoE family); the router is a tiny-M case.
    Shape("Qwen3-30B-A3B", "qkv_proj", 5120, 2048),
    Shape("Qwen3-30B-A3B", "o_proj", 2048, 4096),
    Shape("Qwen3-30B-A3B", "lm_head", 151936, 2048),
    Shape("Qwen3-30B-A3B", "router", 128, 2048),
)

DEFAULT_N: tuple[int, ...] = (1, 4, 16, 64)
# matmul_4bit's and w4a16_linear's routes ("dequantize") where the crossover against the fused
# kernels is decided.
N_BY_FAMILY: dict[str, tuple[int, ...]] = {"gemv": (1,), "matmul_4bit:dequantize": (16, 64),
                                           "w4a16_linear": (1, 4, 8, 16, 64), "w4a16_linear:dequantize": (16, 64)}

# --check: small shapes that emulate in seconds: odd M and K with fewer rows than wave slots,
# and a taller one (whole 128-row blocks, like every real shape) for the linearity check.
CHECK_SHAPES: tuple[Shape, ...] = (
    Shape("check", "small", 300, 1000),
    Shape("check", "tall", 2560, 512),
)
CHECK_N: tuple[int, ...] = (1, 4, 16)


def n_values(family: str, check: bool = False) -> tuple[int, ...]:
    base = N_BY_FAMILY.get(family, DEFAULT_N)
    return tuple(n for n in base if n in CHECK_N) if check else base
