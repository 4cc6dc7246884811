; rounding (every arch): f32/f16 rounding, overflow, denormals and NaNs of the instructions clang
; emits for (_Float16)x, (float)h, fmaf, x * y and x + y (isa_notes.md §5.0, §5.4, §5.7).
; MODE as clang sets it: round to nearest even, f32 and f16/f64 denormals kept, FP16_OVFL = 0,
; IEEE mode (gfx12 has no IEEE-mode bit). Launch: grid 1, block n (any multiple of the wave size
; up to 256).
;
; rounding(x, y, z, h, out), per work-item i with inputs x[i], y[i], z[i] (f32) and h[i] (u32
; holding two f16), writes the record out[8 i : 8 i + 8] (u32):
;   0  v_cvt_f16_f32(x) into a register holding 0xbeef0000: RNE to f16, |x| >= 65520 -> inf,
;      f16 denormals kept (2^-25 -> 0 by the tie rule, 3 * 2^-25 -> 2^-23), NaN -> quiet NaN;
;      gfx9 zeroes bits 31:16 of a 16-bit result, so the word is just the f16 bits; gfx10+ keeps
;      bits 31:16 of the destination, so the word is 0xbeef0000 | f16 bits
;   1  v_cvt_f32_f16(h bits 15:0): exact; a signalling NaN comes back quiet (bit 22 set)
;   2  v_cvt_f32_f16(h bits 31:16), in clang's form for each ISA: through SDWA src0_sel:WORD_1 on
;      gfx9; through the true16 operand v6.h on gfx11 (clang-22 emits true16 code for gfx11:
;      16-bit operands name a register half, vN.l / vN.h); as v_cvt_f32_f16(h >> 16) on gfx12
;   3  v_fma_f32(x, y, z): one rounding of the exact x * y + z (e.g. x = y = 1 + 2^-12,
;      z = -1 -> 2^-11 + 2^-24, where rounding the product first gives 2^-11)
;   4  v_fmac_f32 (z += x * y): the same value as 3
;   5  v_mul_f32(x, y)        6  v_add_f32(x, y)        7  v_add_f32(v_mul_f32(x, y), z)
;      each correctly rounded (RNE), denormal results kept, overflow -> inf, NaN results quiet.
;
; rounding_ovfl(x, out): out[i] = v_cvt_f16_f32(x[i]) (u32, upper half 0: on gfx11/gfx12 written
; into a zeroed register) with MODE.FP16_OVFL = 1 (kernel descriptor): a finite x that would
; round to inf gives +-65504 (0x7bff / 0xfbff); +-inf stays +-inf and NaN stays NaN.
; Launch: grid 1, block n (multiple of the wave size up to 256).
;
; gfx1100 pads the user SGPRs to 15 (LLVM's user-SGPR-init workaround); these kernels do not
; read the work-group id but keep the layout clang gives gfx1100 kernels. gfx12 has no
; s_waitcnt: loads are waited for with s_wait_kmcnt / s_wait_loadcnt.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected rounding
	.globl rounding
	.p2align 8
	.type rounding,@function
rounding:
	s_load_dwordx8 s[4:11], s[0:1], 0x0	;%gfx9
	s_load_b256 s[4:11], s[0:1], 0x0	;%gfx11 gfx12
	s_load_dwordx2 s[12:13], s[0:1], 0x20	;%gfx9
	s_load_b64 s[12:13], s[0:1], 0x20	;%gfx11 gfx12
	v_lshlrev_b32_e32 v1, 2, v0
	v_lshlrev_b32_e32 v2, 5, v0
	s_waitcnt lgkmcnt(0)			;%gfx9 gfx11
	s_wait_kmcnt 0x0			;%gfx12
	global_load_dword v3, v1, s[4:5]	;%gfx9
	global_load_b32 v3, v1, s[4:5]		;%gfx11 gfx12
	global_load_dword v4, v1, s[6:7]	;%gfx9
	global_load_b32 v4, v1, s[6:7]		;%gfx11 gfx12
	global_load_dword v5, v1, s[8:9]	;%gfx9
	global_load_b32 v5, v1, s[8:9]		;%gfx11 gfx12
	global_load_dword v6, v1, s[10:11]	;%gfx9
	global_load_b32 v6, v1, s[10:11]	;%gfx11 gfx12
	v_mov_b32_e32 v8, 0xbeef0000
	s_waitcnt vmcnt(0)			;%gfx9 gfx11
	s_wait_loadcnt 0x0			;%gfx12
;%if gfx9
	v_cvt_f16_f32_e32 v8, v3
	v_cvt_f32_f16_e32 v9, v6
	v_cvt_f32_f16_sdwa v10, v6 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1
;%elif gfx11
	v_cvt_f16_f32_e32 v8.l, v3
	v_cvt_f32_f16_e32 v9, v6.l
	v_cvt_f32_f16_e32 v10, v6.h
;%else
	v_cvt_f16_f32_e32 v8, v3
	v_cvt_f32_f16_e32 v9, v6
	v_lshrrev_b32_e32 v10, 16, v6
	v_cvt_f32_f16_e32 v10, v10
;%endif
	v_fma_f32 v11, v3, v4, v5
	v_mov_b32_e32 v12, v5
	v_fmac_f32_e32 v12, v3, v4
	v_mul_f32_e32 v13, v3, v4
	v_add_f32_e32 v14, v3, v4
	v_add_f32_e32 v15, v13, v5
	global_store_dwordx4 v2, v[8:11], s[12:13]		;%gfx9
	global_store_b128 v2, v[8:11], s[12:13]			;%gfx11 gfx12
	global_store_dwordx4 v2, v[12:15], s[12:13] offset:16	;%gfx9
	global_store_b128 v2, v[12:15], s[12:13] offset:16	;%gfx11 gfx12
	s_endpgm
.Lrounding_end:
	.size rounding, .Lrounding_end-rounding

	.protected rounding_ovfl
	.globl rounding_ovfl
	.p2align 8
	.type rounding_ovfl,@function
rounding_ovfl:
	s_load_dwordx4 s[4:7], s[0:1], 0x0	;%gfx9
	s_load_b128 s[4:7], s[0:1], 0x0		;%gfx11 gfx12
	v_lshlrev_b32_e32 v1, 2, v0
	s_waitcnt lgkmcnt(0)			;%gfx9 gfx11
	s_wait_kmcnt 0x0			;%gfx12
	global_load_dword v2, v1, s[4:5]	;%gfx9
	global_load_b32 v2, v1, s[4:5]		;%gfx11 gfx12
	v_mov_b32_e32 v3, 0			;%gfx11 gfx12
	s_waitcnt vmcnt(0)			;%gfx9 gfx11
	s_wait_loadcnt 0x0			;%gfx12
	v_cvt_f16_f32_e32 v2, v2		;%gfx9
	v_cvt_f16_f32_e32 v3.l, v2		;%gfx11
	v_cvt_f16_f32_e32 v3, v2		;%gfx12
	global_store_dword v1, v2, s[6:7]	;%gfx9
	global_store_b32 v1, v3, s[6:7]		;%gfx11 gfx12
	s_endpgm
.Lrounding_ovfl_end:
	.size rounding_ovfl, .Lrounding_ovfl_end-rounding_ovfl

	.rodata
	.p2align 6
	.amdhsa_kernel rounding
		.amdhsa_kernarg_size 40
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 16
		.amdhsa_next_free_sgpr 14
		.amdhsa_accum_offset 16			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel rounding_ovfl
		.amdhsa_kernarg_size 16
		.amdhsa_user_sgpr_count 15		;%gfx1100
		.amdhsa_user_sgpr_count 2		;%gfx9 gfx1151 gfx12
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_wavefront_size32 1		;%gfx11 gfx12
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 3		;%gfx9
		.amdhsa_next_free_vgpr 4		;%gfx11 gfx12
		.amdhsa_next_free_sgpr 8
		.amdhsa_accum_offset 4			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
		.amdhsa_fp16_overflow 1
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - .name: rounding
    .symbol: rounding.kd
    .kernarg_segment_size: 40
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 16
    .vgpr_count: 16
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: y, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: z, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: h, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: out, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: rounding_ovfl
    .symbol: rounding_ovfl.kd
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 10
    .vgpr_count: 3	;%gfx9
    .vgpr_count: 4	;%gfx11 gfx12
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx11 gfx12
    .args:
      - { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: out, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
