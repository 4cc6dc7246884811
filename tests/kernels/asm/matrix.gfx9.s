;%if gfx942
; matrix (wave64, @ARCH@): MFMA operand and result lane layouts (isa_notes.md §5.14,
; shared/reference/matrix_layouts.md §3.1), D = A B + C with A 16x16, B 16x16, C and D 16x16 f32.
; Each lane loads its own fragments, runs one instruction and stores its D fragment, so the test
; places the matrices by the layout and compares with numpy. Launch: grid 1, block 64 (one wave).
;%else
; matrix (wave64, @ARCH@): MFMA operand and result lane layouts of the @ARCH@ 16x16x32 shapes
; (isa_notes.md §5.14, shared/reference/matrix_layouts.md §4.1), D = A B + C with A 16x32,
; B 32x16, C and D 16x16 f32. Each lane loads its own fragments, runs one instruction and stores
; its D fragment, so the test places the matrices by the layout and compares with numpy.
; Launch: grid 1, block 64 (one wave).
;%endif
;
;%if gfx942
; matrix_f16(a, b, c, d): v_mfma_f32_16x16x16_f16; matrix_bf16(a, b, c, d): v_mfma_f32_16x16x16_bf16
; (the builtin is ..._bf16_1k; the mnemonic has no suffix). Per lane l:
;   a[4 l .. 4 l + 3]  (f16 / bf16)  A[l mod 16][4 floor(l / 16) + e], e = 0 .. 3
;   b[4 l .. 4 l + 3]  (f16 / bf16)  B[4 floor(l / 16) + e][l mod 16]
;%else
; matrix_f16(a, b, c, d): v_mfma_f32_16x16x32_f16; matrix_bf16(a, b, c, d): v_mfma_f32_16x16x32_bf16.
; Per lane l:
;   a[8 l .. 8 l + 7]  (f16 / bf16)  A[l mod 16][8 floor(l / 16) + e], e = 0 .. 7
;   b[8 l .. 8 l + 7]  (f16 / bf16)  B[8 floor(l / 16) + e][l mod 16]
;%endif
;   c[4 l .. 4 l + 3], d[4 l .. 4 l + 3]  (f32)  C / D[4 floor(l / 16) + r][l mod 16], r = 0 .. 3
; Products are exact and accumulate in f32: with small-integer data every result is exact, so
; D equals numpy's A @ B + C exactly; with general data within a few f32 ulps of it.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected matrix_f16
	.globl matrix_f16
	.p2align 8
	.type matrix_f16,@function
matrix_f16:
	s_load_dwordx8 s[4:11], s[0:1], 0x0
;%if gfx942
	v_lshlrev_b32_e32 v1, 3, v0
;%else
;%endif
	v_lshlrev_b32_e32 v4, 4, v0
	s_waitcnt lgkmcnt(0)
;%if gfx942
	global_load_dwordx2 v[6:7], v1, s[4:5]
	global_load_dwordx2 v[8:9], v1, s[6:7]
	s_nop 0
;%else
	global_load_dwordx4 v[6:9], v4, s[4:5]
	global_load_dwordx4 v[10:13], v4, s[6:7]
;%endif
	global_load_dwordx4 v[0:3], v4, s[8:9]
	s_waitcnt vmcnt(0)
;%if gfx942
	v_mfma_f32_16x16x16_f16 v[0:3], v[6:7], v[8:9], v[0:3]
;%else
	v_mfma_f32_16x16x32_f16 v[0:3], v[6:9], v[10:13], v[0:3]
;%endif
	; the MFMA result is read by the store only after these wait states (a hardware hazard)
;%if gfx942
	s_nop 6
;%else
	s_nop 7
;%endif
	global_store_dwordx4 v4, v[0:3], s[10:11]
	s_endpgm
.Lmatrix_f16_end:
	.size matrix_f16, .Lmatrix_f16_end-matrix_f16

	.protected matrix_bf16
	.globl matrix_bf16
	.p2align 8
	.type matrix_bf16,@function
matrix_bf16:
	s_load_dwordx8 s[4:11], s[0:1], 0x0
;%if gfx942
	v_lshlrev_b32_e32 v1, 3, v0
;%else
;%endif
	v_lshlrev_b32_e32 v4, 4, v0
	s_waitcnt lgkmcnt(0)
;%if gfx942
	global_load_dwordx2 v[6:7], v1, s[4:5]
	global_load_dwordx2 v[8:9], v1, s[6:7]
	s_nop 0
;%else
	global_load_dwordx4 v[6:9], v4, s[4:5]
	global_load_dwordx4 v[10:13], v4, s[6:7]
;%endif
	global_load_dwordx4 v[0:3], v4, s[8:9]
	s_waitcnt vmcnt(0)
;%if gfx942
	v_mfma_f32_16x16x16_bf16 v[0:3], v[6:7], v[8:9], v[0:3]
;%else
	v_mfma_f32_16x16x32_bf16 v[0:3], v[6:9], v[10:13], v[0:3]
;%endif
	; the MFMA result is read by the store only after these wait states (a hardware hazard)
;%if gfx942
	s_nop 6
;%else
	s_nop 7
;%endif
	global_store_dwordx4 v4, v[0:3], s[10:11]
	s_endpgm
.Lmatrix_bf16_end:
	.size matrix_bf16, .Lmatrix_bf16_end-matrix_bf16

	.rodata
	.p2align 6
	.amdhsa_kernel matrix_f16
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
;%if gfx942
		.amdhsa_next_free_vgpr 10
;%else
		.amdhsa_next_free_vgpr 14
;%endif
		.amdhsa_next_free_sgpr 12
;%if gfx942
		.amdhsa_accum_offset 12
;%else
		.amdhsa_accum_offset 16
;%endif
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel matrix_bf16
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
;%if gfx942
		.amdhsa_next_free_vgpr 10
;%else
		.amdhsa_next_free_vgpr 14
;%endif
		.amdhsa_next_free_sgpr 12
;%if gfx942
		.amdhsa_accum_offset 12
;%else
		.amdhsa_accum_offset 16
;%endif
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

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
    .wavefront_size: 64
    .sgpr_count: 14
;%if gfx942
    .vgpr_count: 10
;%else
    .vgpr_count: 14
;%endif
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 64
    .uniform_work_group_size: 1
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
    .wavefront_size: 64
    .sgpr_count: 14
;%if gfx942
    .vgpr_count: 10
;%else
    .vgpr_count: 14
;%endif
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 64
    .uniform_work_group_size: 1
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: d, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
