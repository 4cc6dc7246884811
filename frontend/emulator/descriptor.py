"""The 64-byte kernel descriptor (``<kernel>.kd``, code_objects.md §3), decoded: what the emulator
needs to start a wave (user SGPR layout, wave size, entry point) and to refuse float modes it does
not model. The runtime's reader (`hipskinny.codeobject`) keeps only the descriptor's bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from ..codeobject import KERNEL_DESCRIPTOR_SIZE, Kernel
from ..errors import CodeObjectError

_KD = struct.Struct("<IIII q 20s IIIHH 4s")
# Order and size of the user SGPR blocks enabled by kernel_code_properties bits 0..6 (§4).
_USER_SGPR_BLOCKS = (
    ("private_segment_buffer", 4),
    ("dispatch_ptr", 2),
    ("queue_ptr", 2),
    ("kernarg_segment_ptr", 2),
    ("dispatch_id", 2),
    ("flat_scratch_init", 2),
)



@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte ``<kernel>.kd`` object (§3), raw words plus decoded fields."""

    address: int                    # vaddr of the descriptor (what AQL kernel_object holds)
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int   # signed, relative to `address`
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    compute_pgm_rsrc3: int
    kernel_code_properties: int
    kernarg_preload: int
    # rsrc1
    granulated_workitem_vgpr_count: int
    granulated_wavefront_sgpr_count: int
    float_round_mode_32: int        # 0 RNE, 1 +inf, 2 -inf, 3 toward 0
    float_round_mode_16_64: int
    float_denorm_mode_32: int       # 0 flush src+dst, 1 flush dst, 2 flush src, 3 none
    float_denorm_mode_16_64: int
    enable_dx10_clamp: bool         # False on gfx12, where bit 21 means WG_RR_EN
    enable_ieee_mode: bool          # False on gfx12, where bit 23 means DISABLE_PERF
    fp16_overflow: bool
    wgp_mode: bool                  # gfx10+
    mem_ordered: bool               # gfx10+
    fwd_progress: bool              # gfx10+
    # rsrc2
    enable_private_segment: bool
    user_sgpr_count: int            # where the system SGPRs start (§4)
    enable_trap_handler: bool
    enable_sgpr_workgroup_id_x: bool
    enable_sgpr_workgroup_id_y: bool
    enable_sgpr_workgroup_id_z: bool
    enable_sgpr_workgroup_info: bool
    enable_vgpr_workitem_id: int    # 0 = x, 1 = x,y, 2 = x,y,z (packed in v0 on all five targets)
    granulated_lds_size: int
    fp_exception_enables: int       # rsrc2 bits 30:24
    # rsrc3 (meaning depends on the generation)
    accum_offset: int | None        # gfx9 (90a+): index of a0 in the unified VGPR file
    tg_split: bool                  # gfx9
    shared_vgpr_count: int          # gfx10/11
    inst_pref_size: int             # gfx11 (6 bits) / gfx12 (8 bits), units of 128 bytes
    # kernel_code_properties
    enable_sgpr_private_segment_buffer: bool
    enable_sgpr_dispatch_ptr: bool
    enable_sgpr_queue_ptr: bool
    enable_sgpr_kernarg_segment_ptr: bool
    enable_sgpr_dispatch_id: bool
    enable_sgpr_flat_scratch_init: bool
    enable_sgpr_private_segment_size: bool
    enable_wavefront_size32: bool
    uses_dynamic_stack: bool
    # kernarg_preload
    kernarg_preload_length: int     # dwords
    kernarg_preload_offset: int     # dwords

    @property
    def entry(self) -> int:
        """Virtual address of the first instruction."""
        return self.address + self.kernel_code_entry_byte_offset

    @property
    def wave_size(self) -> int:
        # Wave size comes from the descriptor, never from the arch alone (§5).
        return 32 if self.enable_wavefront_size32 else 64

    def user_sgpr_layout(self) -> tuple[tuple[str, int, int], ...]:
        """(name, first SGPR, count) of each enabled user SGPR block, packed from s0 (§4)."""
        enabled = (
            self.enable_sgpr_private_segment_buffer,
            self.enable_sgpr_dispatch_ptr,
            self.enable_sgpr_queue_ptr,
            self.enable_sgpr_kernarg_segment_ptr,
            self.enable_sgpr_dispatch_id,
            self.enable_sgpr_flat_scratch_init,
        )
        layout: list[tuple[str, int, int]] = []
        sgpr = 0
        for (name, count), on in zip(_USER_SGPR_BLOCKS, enabled, strict=True):
            if on:
                layout.append((name, sgpr, count))
                sgpr += count
        if self.kernarg_preload_length:
            layout.append(("kernarg_preload", sgpr, self.kernarg_preload_length))
            sgpr += self.kernarg_preload_length
        if self.enable_sgpr_private_segment_size:
            layout.append(("private_segment_size", sgpr, 1))
        return tuple(layout)

    @classmethod
    def parse(cls, raw: bytes, address: int, arch: str) -> KernelDescriptor:
        """The descriptor's 64 bytes ``raw`` at ``address``; some fields mean different things per generation."""
        if len(raw) != KERNEL_DESCRIPTOR_SIZE:
            raise CodeObjectError(f"kernel descriptor at 0x{address:x} has {len(raw)} bytes, expected 64")
        (lds, private, kernarg, _r0, entry_offset, _r1, rsrc3, rsrc1, rsrc2, props, preload,
         _r2) = _KD.unpack(raw)
        gen = _generation(arch)
        return cls(
            address=address,
            group_segment_fixed_size=lds,
            private_segment_fixed_size=private,
            kernarg_size=kernarg,
            kernel_code_entry_byte_offset=entry_offset,
            compute_pgm_rsrc1=rsrc1,
            compute_pgm_rsrc2=rsrc2,
            compute_pgm_rsrc3=rsrc3,
            kernel_code_properties=props,
            kernarg_preload=preload,
            granulated_workitem_vgpr_count=_bits(rsrc1, 0, 6),
            granulated_wavefront_sgpr_count=_bits(rsrc1, 6, 4),
            float_round_mode_32=_bits(rsrc1, 12, 2),
            float_round_mode_16_64=_bits(rsrc1, 14, 2),
            float_denorm_mode_32=_bits(rsrc1, 16, 2),
            float_denorm_mode_16_64=_bits(rsrc1, 18, 2),
            enable_dx10_clamp=gen < 12 and bool(_bits(rsrc1, 21)),
            enable_ieee_mode=gen < 12 and bool(_bits(rsrc1, 23)),
            fp16_overflow=bool(_bits(rsrc1, 26)),
            wgp_mode=gen >= 10 and bool(_bits(rsrc1, 29)),
            mem_ordered=gen >= 10 and bool(_bits(rsrc1, 30)),
            fwd_progress=gen >= 10 and bool(_bits(rsrc1, 31)),
            enable_private_segment=bool(_bits(rsrc2, 0)),
            user_sgpr_count=_bits(rsrc2, 1, 5),
            enable_trap_handler=bool(_bits(rsrc2, 6)),
            enable_sgpr_workgroup_id_x=bool(_bits(rsrc2, 7)),
            enable_sgpr_workgroup_id_y=bool(_bits(rsrc2, 8)),
            enable_sgpr_workgroup_id_z=bool(_bits(rsrc2, 9)),
            enable_sgpr_workgroup_info=bool(_bits(rsrc2, 10)),
            enable_vgpr_workitem_id=_bits(rsrc2, 11, 2),
            granulated_lds_size=_bits(rsrc2, 15, 9),
            fp_exception_enables=_bits(rsrc2, 24, 7),
            accum_offset=(_bits(rsrc3, 0, 6) + 1) * 4 if gen == 9 else None,
            tg_split=gen == 9 and bool(_bits(rsrc3, 16)),
            shared_vgpr_count=_bits(rsrc3, 0, 4) if gen in (10, 11) else 0,
            inst_pref_size=_bits(rsrc3, 4, 6) if gen == 11 else _bits(rsrc3, 4, 8) if gen >= 12 else 0,
            enable_sgpr_private_segment_buffer=bool(_bits(props, 0)),
            enable_sgpr_dispatch_ptr=bool(_bits(props, 1)),
            enable_sgpr_queue_ptr=bool(_bits(props, 2)),
            enable_sgpr_kernarg_segment_ptr=bool(_bits(props, 3)),
            enable_sgpr_dispatch_id=bool(_bits(props, 4)),
            enable_sgpr_flat_scratch_init=bool(_bits(props, 5)),
            enable_sgpr_private_segment_size=bool(_bits(props, 6)),
            enable_wavefront_size32=bool(_bits(props, 10)),
            uses_dynamic_stack=bool(_bits(props, 11)),
            kernarg_preload_length=_bits(preload, 0, 7),
            kernarg_preload_offset=_bits(preload, 7, 9),
        )


def _bits(value: int, lo: int, width: int = 1) -> int:
    return (value >> lo) & ((1 << width) - 1)


def _generation(arch: str) -> int:
    """9 for gfx9xx, 11 for gfx11xx, 12 for gfx12xx."""
    digits = arch[3:]
    return int(digits[:-2]) if len(digits) >= 3 else 0


def descriptor_of(kernel: Kernel, arch: str) -> KernelDescriptor:
    """The decoded descriptor of ``kernel`` (a kernel of a code object for ``arch``), decoded once."""
    return _decode(kernel.descriptor_bytes, kernel.descriptor_address, arch)


@lru_cache(maxsize=4096)
def _decode(raw: bytes, address: int, arch: str) -> KernelDescriptor:
    return KernelDescriptor.parse(raw, address, arch)
