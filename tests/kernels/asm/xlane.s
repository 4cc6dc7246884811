; xlane (every arch): cross-lane instructions with results worked out from the ISA rules
; (isa_notes.md §5.0, §5.1, §5.10). Launch: grid 1, block W (one wave of W lanes: 64 on gfx9,
; 32 on gfx11/gfx12); out: u32[2 W + 10].
;
;   out[0:W]       inclusive prefix sum of (lane + 1) over the wave -> (l + 1)(l + 2) / 2, from
;                  DPP row_shr:1/2/4/8 (bound_ctrl:1: a source lane outside the row reads 0), then
;                  gfx9:  DPP row_bcast:15/31 (row_mask limits the rows written);
;                  gfx11/gfx12: v_permlanex16_b32 with all selects 0xf (every lane reads lane 15 of
;                  the other row) added into row 1 only (DPP row_mask:0x2)
;   out[W:2W]      1000 + l for lanes l < 20 (written under EXEC from s_and_saveexec_b64 on gfx9,
;                  s_and_saveexec_b32 on gfx11/gfx12), l elsewhere
;   out[2W:2W+10]  scalars, gathered with v_writelane_b32 and stored by lanes 0..9 only:
;                  0 readlane(scan, W - 1) = W (W + 1) / 2 (2080 or 528)
;                  1 readlane(scan, s6 = 21) = 253
;                  2 readlane(scan, 30) while EXEC holds lanes 0..19 only (readlane ignores EXEC) = 496
;                  3 saved EXEC (low word) = 0xffffffff   4 bcnt(saved EXEC) = W
;                  5 EXEC (low word) inside = 0xfffff     6 bcnt(EXEC inside) = 20
;                  7 SCC after that saveexec = 1          8 SCC after a saveexec that leaves EXEC empty = 0
;                  9 1 if s_cbranch_execz jumped over the empty block (2 if the block ran)
; gfx1100 pads the user SGPRs to 15 (LLVM's user-SGPR-init workaround), so workgroup id x is s15
; there (the flag of 9 lives in s16 on gfx11/gfx12); this kernel does not read it but keeps the
; layout clang gives gfx1100 kernels. gfx12 has no s_waitcnt: the kernarg load is waited for
; with s_wait_kmcnt.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected xlane
	.globl xlane
	.p2align 8
	.type xlane,@function
xlane:
;%if gfx9
	s_load_dwordx2 s[0:1], s[0:1], 0x0
	v_add_u32_e32 v1, 1, v0
	v_mov_b32_e32 v2, v1
	; gfx9 needs two wait states between a VALU write and a DPP read of the same VGPR.
	s_nop 1
	v_add_u32_dpp v2, v2, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
	s_nop 1
	v_add_u32_dpp v2, v2, v2 row_shr:2 row_mask:0xf bank_mask:0xf bound_ctrl:1
	s_nop 1
	v_add_u32_dpp v2, v2, v2 row_shr:4 row_mask:0xf bank_mask:0xf bound_ctrl:1
	s_nop 1
	v_add_u32_dpp v2, v2, v2 row_shr:8 row_mask:0xf bank_mask:0xf bound_ctrl:1
	s_nop 1
	; rows 1 and 3 add the last lane of the row before; then rows 2 and 3 add lane 31.
	v_add_u32_dpp v2, v2, v2 row_bcast:15 row_mask:0xa bank_mask:0xf
	s_nop 1
	v_add_u32_dpp v2, v2, v2 row_bcast:31 row_mask:0xc bank_mask:0xf
	s_nop 1
	v_readlane_b32 s4, v2, 63
;%else
	s_load_b64 s[0:1], s[0:1], 0x0
	v_add_nc_u32_e32 v1, 1, v0
	v_mov_b32_e32 v2, v1
	v_add_nc_u32_dpp v2, v2, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
	v_add_nc_u32_dpp v2, v2, v2 row_shr:2 row_mask:0xf bank_mask:0xf bound_ctrl:1
	v_add_nc_u32_dpp v2, v2, v2 row_shr:4 row_mask:0xf bank_mask:0xf bound_ctrl:1
	v_add_nc_u32_dpp v2, v2, v2 row_shr:8 row_mask:0xf bank_mask:0xf bound_ctrl:1
	v_mov_b32_e32 v3, 0
	v_permlanex16_b32 v3, v2, -1, -1
	v_add_nc_u32_dpp v2, v3, v2 quad_perm:[0,1,2,3] row_mask:0x2 bank_mask:0xf
	v_readlane_b32 s4, v2, 31
;%endif
	s_mov_b32 s6, 21
	v_readlane_b32 s5, v2, s6

	v_mov_b32_e32 v3, v0
	v_cmp_gt_u32_e32 vcc, 20, v0		;%gfx9
	v_cmp_gt_u32_e32 vcc_lo, 20, v0		;%gfx11 gfx12
	s_and_saveexec_b64 s[8:9], vcc		;%gfx9
	s_and_saveexec_b32 s8, vcc_lo		;%gfx11 gfx12
	s_cselect_b32 s12, 1, 0
	s_mov_b64 s[10:11], exec		;%gfx9
	s_mov_b32 s10, exec_lo			;%gfx11 gfx12
	v_add_u32_e32 v3, 0x3e8, v0		;%gfx9
	v_add_nc_u32_e32 v3, 0x3e8, v0		;%gfx11 gfx12
	v_readlane_b32 s13, v2, 30
	s_bcnt1_i32_b64 s14, exec		;%gfx9
	s_bcnt1_i32_b32 s14, exec_lo		;%gfx11 gfx12
	s_or_b64 exec, exec, s[8:9]		;%gfx9
	s_or_b32 exec_lo, exec_lo, s8		;%gfx11 gfx12
	s_bcnt1_i32_b64 s7, s[8:9]		;%gfx9
	s_bcnt1_i32_b32 s7, s8			;%gfx11 gfx12

	s_mov_b32 s15, 1			;%gfx9
	s_mov_b32 s16, 1			;%gfx11 gfx12
	v_cmp_lt_u32_e32 vcc, 0x64, v0		;%gfx9
	v_cmp_lt_u32_e32 vcc_lo, 0x64, v0	;%gfx11 gfx12
	s_and_saveexec_b64 s[16:17], vcc	;%gfx9
	s_and_saveexec_b32 s17, vcc_lo		;%gfx11 gfx12
	s_cselect_b32 s18, 1, 0
	s_cbranch_execz .Lskip
	s_mov_b32 s15, 2			;%gfx9
	s_mov_b32 s16, 2			;%gfx11 gfx12
.Lskip:
	s_or_b64 exec, exec, s[16:17]		;%gfx9
	s_or_b32 exec_lo, exec_lo, s17		;%gfx11 gfx12

	v_mov_b32_e32 v5, 0
	v_writelane_b32 v5, s4, 0
	v_writelane_b32 v5, s5, 1
	v_writelane_b32 v5, s13, 2
	v_writelane_b32 v5, s8, 3
	v_writelane_b32 v5, s7, 4
	v_writelane_b32 v5, s10, 5
	v_writelane_b32 v5, s14, 6
	v_writelane_b32 v5, s12, 7
	v_writelane_b32 v5, s18, 8
	v_writelane_b32 v5, s15, 9		;%gfx9
	v_writelane_b32 v5, s16, 9		;%gfx11 gfx12
	v_lshlrev_b32_e32 v4, 2, v0
	s_waitcnt lgkmcnt(0)			;%gfx9 gfx11
	s_wait_kmcnt 0x0			;%gfx12
	global_store_dword v4, v2, s[0:1]		;%gfx9
	global_store_b32 v4, v2, s[0:1]			;%gfx11 gfx12
	global_store_dword v4, v3, s[0:1] offset:256	;%gfx9
	global_store_b32 v4, v3, s[0:1] offset:128	;%gfx11 gfx12
	s_mov_b64 exec, 0x3ff				;%gfx9
	s_mov_b32 exec_lo, 0x3ff			;%gfx11 gfx12
	global_store_dword v4, v5, s[0:1] offset:512	;%gfx9
	global_store_b32 v4, v5, s[0:1] offset:256	;%gfx11 gfx12
	s_endpgm
.Lxlane_end:
	.size xlane, .Lxlane_end-xlane

	.rodata
	.p2align 6
	.amdhsa_kernel xlane
		.amdhsa_kernarg_size 8
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 6
		.amdhsa_next_free_sgpr 19
		.amdhsa_accum_offset 8			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - .name: xlane
    .symbol: xlane.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 21
    .vgpr_count: 6
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: @WAVE@
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
