"""Instruction semantics (`core`: the registry and the decode context), one module per instruction
family, each registering its mnemonics when imported (`load_all`)."""

from __future__ import annotations

from .core import CLASSES, OPS, DecodeContext, Factory, Handler, base_mnemonic, lane_constant, lookup, register

__all__ = ["CLASSES", "OPS", "DecodeContext", "Factory", "Handler", "base_mnemonic", "lane_constant", "load_all",
           "lookup", "register"]


def load_all() -> None:
    """Import every semantics module so its registrations run."""
    from . import (  # noqa: F401
        lds,
        matrix,
        salu,
        valu,
        vmem,
    )
