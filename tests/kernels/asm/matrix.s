; matrix (every arch): the matrix instructions' operand and result lane layouts (isa_notes.md
; §5.14), D = A B + C with C and D 16x16 f32. Each lane loads its own fragments, runs one
; instruction and stores its D fragment, so the test places the matrices by the layout and
; compares with numpy. Launch: grid 1, block W (one wave of W lanes: 64 on gfx9, 32 on
; gfx11/gfx12). Products are exact and accumulate in f32: with small-integer data every result is
; exact, so D equals numpy's A @ B + C exactly; with general data within a few f32 ulps of it.
;
; matrix_f16(a, b, c, d) and matrix_bf16(a, b, c, d), the same code but for the instruction's
; type; per lane l:
;
; gfx942: MFMA (shared/reference/matrix_layouts.md §3.1), A 16x16, B 16x16:
;   v_mfma_f32_16x16x16_f16 / v_mfma_f32_16x16x16_bf16 (the builtin is ..._bf16_1k; the mnemonic
;   has no suffix)
;   a[4 l .. 4 l + 3]  (f16 / bf16)  A[l mod 16][4 floor(l / 16) + e], e = 0 .. 3
;   b[4 l .. 4 l + 3]  (f16 / bf16)  B[4 floor(l / 16) + e][l mod 16]
;   c[4 l .. 4 l + 3], d[4 l .. 4 l + 3]  (f32)  C / D[4 floor(l / 16) + r][l mod 16], r = 0 .. 3
; gfx950: MFMA of the 16x16x32 shapes (matrix_layouts.md §4.1), A 16x32, B 32x16:
;   v_mfma_f32_16x16x32_f16 / v_mfma_f32_16x16x32_bf16
;   a[8 l .. 8 l + 7]  (f16 / bf16)  A[l mod 16][8 floor(l / 16) + e], e = 0 .. 7
;   b[8 l .. 8 l + 7]  (f16 / bf16)  B[8 floor(l / 16) + e][l mod 16]
;   c, d as on gfx942
; gfx11: RDNA3 WMMA (matrix_layouts.md §5.1), A, B 16x16, replicated: lanes 16 .. 31 carry the
;   same data as lanes 0 .. 15:
;   v_wmma_f32_16x16x16_f16 / v_wmma_f32_16x16x16_bf16
;   a[16 l .. 16 l + 15]  (f16 / bf16)  A[l mod 16][e], e = 0 .. 15   (8 VGPRs)
;   b[16 l .. 16 l + 15]  (f16 / bf16)  B[e][l mod 16]
;   c[8 l .. 8 l + 7], d[8 l .. 8 l + 7]  (f32)  C / D[2 r + floor(l / 16)][l mod 16], r = 0 .. 7
;   (rows interleaved between the lane halves)
; gfx12: RDNA4 WMMA (matrix_layouts.md §6.1), A, B 16x16: the same mnemonics as gfx11 but half
;   the A/B registers, no replication and another D layout:
;   a[8 l .. 8 l + 7]  (f16 / bf16)  A[l mod 16][8 floor(e / 4) + 4 floor(l / 16) + e mod 4], e = 0 .. 7
;   b[8 l .. 8 l + 7]  (f16 / bf16)  B[the same k][l mod 16]   (4 VGPRs each)
;   c[8 l .. 8 l + 7], d[8 l .. 8 l + 7]  (f32)  C / D[8 floor(l / 16) + r][l mod 16], r = 0 .. 7
;
; gfx1100 pads the user SGPRs to 15 (LLVM's user-SGPR-init workaround); these kernels do not
; read the work-group id but keep the layout clang gives gfx1100 kernels. gfx12 has no
; s_waitcnt: loads are waited for with s_wait_kmcnt / s_wait_loadcnt.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.irp dt, f16, bf16
	.protected matrix_\dt
	.globl matrix_\dt
	.p2align 8
	.type matrix_\dt,@function
matrix_\dt:
;%if gfx942
	s_load_dwordx8 s[4:11], s[0:1], 0x0
	v_lshlrev_b32_e32 v1, 3, v0
	v_lshlrev_b32_e32 v4, 4, v0
	s_waitcnt lgkmcnt(0)
	global_load_dwordx2 v[6:7], v1, s[4:5]
	global_load_dwordx2 v[8:9], v1, s[6:7]
	s_nop 0
	global_load_dwordx4 v[0:3], v4, s[8:9]
	s_waitcnt vmcnt(0)
	v_mfma_f32_16x16x16_\dt v[0:3], v[6:7], v[8:9], v[0:3]
	; the MFMA result is read by the store only after these wait states (a hardware hazard)
	s_nop 6
	global_store_dwordx4 v4, v[0:3], s[10:11]
;%elif gfx950
	s_load_dwordx8 s[4:11], s[0:1], 0x0
	v_lshlrev_b32_e32 v4, 4, v0
	s_waitcnt lgkmcnt(0)
	global_load_dwordx4 v[6:9], v4, s[4:5]
	global_load_dwordx4 v[10:13], v4, s[6:7]
	global_load_dwordx4 v[0:3], v4, s[8:9]
	s_waitcnt vmcnt(0)
	v_mfma_f32_16x16x32_\dt v[0:3], v[6:9], v[10:13], v[0:3]
	; the MFMA result is read by the store only after these wait states (a hardware hazard)
	s_nop 7
	global_store_dwordx4 v4, v[0:3], s[10:11]
;%elif gfx11
	s_load_b256 s[0:7], s[0:1], 0x0
	v_lshlrev_b32_e32 v24, 5, v0
	s_waitcnt lgkmcnt(0)
	global_load_b128 v[0:3], v24, s[0:1]
	global_load_b128 v[4:7], v24, s[0:1] offset:16
	global_load_b128 v[8:11], v24, s[2:3]
	global_load_b128 v[12:15], v24, s[2:3] offset:16
	global_load_b128 v[16:19], v24, s[4:5]
	global_load_b128 v[20:23], v24, s[4:5] offset:16
	s_waitcnt vmcnt(0)
	v_wmma_f32_16x16x16_\dt v[16:23], v[0:7], v[8:15], v[16:23]
	global_store_b128 v24, v[16:19], s[6:7]
	global_store_b128 v24, v[20:23], s[6:7] offset:16
;%else
	s_load_b256 s[0:7], s[0:1], 0x0
	v_lshlrev_b32_e32 v1, 4, v0
	v_lshlrev_b32_e32 v16, 5, v0
	s_wait_kmcnt 0x0
	global_load_b128 v[8:11], v1, s[0:1]
	global_load_b128 v[12:15], v1, s[2:3]
	global_load_b128 v[0:3], v16, s[4:5]
	global_load_b128 v[4:7], v16, s[4:5] offset:16
	s_wait_loadcnt 0x0
	v_wmma_f32_16x16x16_\dt v[0:7], v[8:11], v[12:15], v[0:7]
	global_store_b128 v16, v[0:3], s[6:7]
	global_store_b128 v16, v[4:7], s[6:7] offset:16
;%endif
	s_endpgm
.Lmatrix_\dt\()_end:
	.size matrix_\dt, .Lmatrix_\dt\()_end-matrix_\dt
	.endr

	.rodata
	.irp dt, f16, bf16
	.p2align 6
	.amdhsa_kernel matrix_\dt
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 10		;%gfx942
		.amdhsa_next_free_vgpr 14		;%gfx950
		.amdhsa_next_free_vgpr 25		;%gfx11
		.amdhsa_next_free_vgpr 17		;%gfx12
		.amdhsa_next_free_sgpr 12		;%gfx9
		.amdhsa_next_free_sgpr 8		;%gfx11 gfx12
		.amdhsa_accum_offset 12			;%gfx942
		.amdhsa_accum_offset 16			;%gfx950
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel
	.endr

	.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - .name: matrix_f16
    .symbol: matrix_f16.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 14	;%gfx9
    .sgpr_count: 8	;%gfx11 gfx12
    .vgpr_count: 10	;%gfx942
    .vgpr_count: 14	;%gfx950
    .vgpr_count: 25	;%gfx11
    .vgpr_count: 17	;%gfx12
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: @WAVE@
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: d, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: matrix_bf16
    .symbol: matrix_bf16.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 14	;%gfx9
    .sgpr_count: 8	;%gfx11 gfx12
    .vgpr_count: 10	;%gfx942
    .vgpr_count: 14	;%gfx950
    .vgpr_count: 25	;%gfx11
    .vgpr_count: 17	;%gfx12
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: @WAVE@
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: d, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
