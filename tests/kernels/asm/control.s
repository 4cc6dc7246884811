; control (every arch): calls and returns through s_call_b64, s_swappc_b64 and s_setpc_b64, PC
; values from s_getpc_b64, and s_sendmsg (isa_notes.md §5.1: PCs are byte addresses; s_getpc_b64
; gives the address of the next instruction, s_call_b64 D, simm16 saves the address of the next
; instruction in D and jumps to PC + 4 + 4 * simm16, s_swappc_b64 D, S saves it and jumps to S,
; s_setpc_b64 S jumps to S).
; On gfx11/gfx12 the kernels end like clang's kernels with many VGPRs: s_sendmsg
; sendmsg(MSG_DEALLOC_VGPRS) before s_endpgm, a no-op for the emulator. gfx9 has no
; MSG_DEALLOC_VGPRS: there the emulator implements no message at all.
;
; control(out): per work-item i (v0 = i), writes out[4 i : 4 i + 4] (u32):
;   0  ((i + 1 + 10) * 2 * 3): v = i + 1, s_call_b64 to .Ladd10 (v += 10, back by s_setpc_b64), v *= 2
;      back in the caller, then s_swappc_b64 to .Lmul3 (v *= 3, back by s_setpc_b64)
;   1  (return address saved by s_call_b64) - (s_getpc_b64 right after the call) + 4: 0
;   2  the same for s_swappc_b64: 0
;   3  i + 20: .Ladd10 called twice more in a row (a subroutine reached again after returning)
; Launch: grid 1, block n (a multiple of the wave size up to 256).
;
; setpc_bad(out): s_setpc_b64 to 2 bytes past the start of an instruction, which is not an
; instruction start: the emulator faults naming the pc and the target. Writes nothing.
;
; sendmsg_other(out): s_sendmsg sendmsg(MSG_INTERRUPT): a message the emulator does not implement,
; so it raises its not-implemented error naming the message. Writes nothing.
;
; gfx1100 pads the user SGPRs to 15 (LLVM's user-SGPR-init workaround), so workgroup id x is s15
; there; these kernels do not read it but keep the layout clang gives gfx1100 kernels.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected control
	.globl control
	.p2align 8
	.type control,@function
control:
	s_load_dwordx2 s[2:3], s[0:1], 0x0	;%gfx9
	s_load_b64 s[2:3], s[0:1], 0x0		;%gfx11 gfx12
	v_lshlrev_b32_e32 v1, 4, v0
	v_add_u32_e32 v2, 1, v0			;%gfx9
	v_add_nc_u32_e32 v2, 1, v0		;%gfx11 gfx12
	s_call_b64 s[30:31], .Ladd10
	s_getpc_b64 s[8:9]
	v_lshlrev_b32_e32 v2, 1, v2
	s_sub_u32 s10, s30, s8
	s_add_u32 s10, s10, 4
	s_getpc_b64 s[4:5]
.Lpc0:
	s_add_u32 s4, s4, .Lmul3-.Lpc0
	s_addc_u32 s5, s5, 0
	s_swappc_b64 s[30:31], s[4:5]
	s_getpc_b64 s[8:9]
	s_sub_u32 s11, s30, s8
	s_add_u32 s11, s11, 4
	v_mov_b32_e32 v4, v2
	v_mov_b32_e32 v2, v0
	s_call_b64 s[30:31], .Ladd10
	s_call_b64 s[30:31], .Ladd10
	v_mov_b32_e32 v7, v2
	v_mov_b32_e32 v5, s10
	v_mov_b32_e32 v6, s11
	s_waitcnt lgkmcnt(0)			;%gfx9 gfx11
	s_wait_kmcnt 0x0			;%gfx12
	global_store_dwordx4 v1, v[4:7], s[2:3]	;%gfx9
	global_store_b128 v1, v[4:7], s[2:3]	;%gfx11 gfx12
	s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)	;%gfx11 gfx12
	s_endpgm
.Ladd10:
	v_add_u32_e32 v2, 10, v2		;%gfx9
	v_add_nc_u32_e32 v2, 10, v2		;%gfx11 gfx12
	s_setpc_b64 s[30:31]
.Lmul3:
	v_mul_lo_u32 v2, v2, 3
	s_setpc_b64 s[30:31]
.Lcontrol_end:
	.size control, .Lcontrol_end-control

	.protected setpc_bad
	.globl setpc_bad
	.p2align 8
	.type setpc_bad,@function
setpc_bad:
	s_getpc_b64 s[4:5]
	s_add_u32 s4, s4, 2
	s_addc_u32 s5, s5, 0
	s_setpc_b64 s[4:5]
	s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)	;%gfx11 gfx12
	s_endpgm
.Lsetpc_bad_end:
	.size setpc_bad, .Lsetpc_bad_end-setpc_bad

	.protected sendmsg_other
	.globl sendmsg_other
	.p2align 8
	.type sendmsg_other,@function
sendmsg_other:
	s_sendmsg sendmsg(MSG_INTERRUPT)
	s_endpgm
.Lsendmsg_other_end:
	.size sendmsg_other, .Lsendmsg_other_end-sendmsg_other

	.rodata
	.p2align 6
	.amdhsa_kernel control
		.amdhsa_kernarg_size 8
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 8
		.amdhsa_next_free_sgpr 32
		.amdhsa_accum_offset 8			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel setpc_bad
		.amdhsa_kernarg_size 8
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 1
		.amdhsa_next_free_sgpr 6
		.amdhsa_accum_offset 4			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel sendmsg_other
		.amdhsa_kernarg_size 8
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 1
		.amdhsa_next_free_sgpr 2
		.amdhsa_accum_offset 4			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - .name: control
    .symbol: control.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 34
    .vgpr_count: 8
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: setpc_bad
    .symbol: setpc_bad.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 8
    .vgpr_count: 1
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: sendmsg_other
    .symbol: sendmsg_other.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 4
    .vgpr_count: 1
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
