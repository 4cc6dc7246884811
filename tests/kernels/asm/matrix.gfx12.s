; matrix (wave32, @ARCH@): RDNA4 WMMA operand and result lane layouts (isa_notes.md §5.14,
; shared/reference/matrix_layouts.md §6.1), D = A B + C with A, B 16x16 and C, D 16x16 f32.
; Same mnemonic as gfx11 but half the A/B registers, no replication and another D layout.
; Each lane loads its own fragments, runs one instruction and stores its D fragment, so the test
; places the matrices by the layout and compares with numpy. Launch: grid 1, block 32 (one wave).
;
; matrix_f16(a, b, c, d): v_wmma_f32_16x16x16_f16; matrix_bf16(a, b, c, d): v_wmma_f32_16x16x16_bf16.
; Per lane l:
;   a[8 l .. 8 l + 7]  (f16 / bf16)  A[l mod 16][8 floor(e / 4) + 4 floor(l / 16) + e mod 4], e = 0 .. 7
;   b[8 l .. 8 l + 7]  (f16 / bf16)  B[the same k][l mod 16]   (4 VGPRs each)
;   c[8 l .. 8 l + 7], d[8 l .. 8 l + 7]  (f32)  C / D[8 floor(l / 16) + r][l mod 16], r = 0 .. 7
; Products are exact and accumulate in f32: with small-integer data every result is exact, so
; D equals numpy's A @ B + C exactly; with general data within a few f32 ulps of it.
; gfx12 has no s_waitcnt: loads are waited for with s_wait_kmcnt / s_wait_loadcnt.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected matrix_f16
	.globl matrix_f16
	.p2align 8
	.type matrix_f16,@function
matrix_f16:
	s_load_b256 s[0:7], s[0:1], 0x0
	v_lshlrev_b32_e32 v1, 4, v0
	v_lshlrev_b32_e32 v16, 5, v0
	s_wait_kmcnt 0x0
	global_load_b128 v[8:11], v1, s[0:1]
	global_load_b128 v[12:15], v1, s[2:3]
	global_load_b128 v[0:3], v16, s[4:5]
	global_load_b128 v[4:7], v16, s[4:5] offset:16
	s_wait_loadcnt 0x0
	v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
	global_store_b128 v16, v[0:3], s[6:7]
	global_store_b128 v16, v[4:7], s[6:7] offset:16
	s_endpgm
.Lmatrix_f16_end:
	.size matrix_f16, .Lmatrix_f16_end-matrix_f16

	.protected matrix_bf16
	.globl matrix_bf16
	.p2align 8
	.type matrix_bf16,@function
matrix_bf16:
	s_load_b256 s[0:7], s[0:1], 0x0
	v_lshlrev_b32_e32 v1, 4, v0
	v_lshlrev_b32_e32 v16, 5, v0
	s_wait_kmcnt 0x0
	global_load_b128 v[8:11], v1, s[0:1]
	global_load_b128 v[12:15], v1, s[2:3]
	global_load_b128 v[0:3], v16, s[4:5]
	global_load_b128 v[4:7], v16, s[4:5] offset:16
	s_wait_loadcnt 0x0
	v_wmma_f32_16x16x16_bf16 v[0:7], v[8:11], v[12:15], v[0:7]
	global_store_b128 v16, v[0:3], s[6:7]
	global_store_b128 v16, v[4:7], s[6:7] offset:16
	s_endpgm
.Lmatrix_bf16_end:
	.size matrix_bf16, .Lmatrix_bf16_end-matrix_bf16

	.rodata
	.p2align 6
	.amdhsa_kernel matrix_f16
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 17
		.amdhsa_next_free_sgpr 8
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel matrix_bf16
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 17
		.amdhsa_next_free_sgpr 8
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
    .wavefront_size: 32
    .sgpr_count: 8
    .vgpr_count: 17
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 32
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1
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
    .wavefront_size: 32
    .sgpr_count: 8
    .vgpr_count: 17
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 32
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: d, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
