;%targets gfx9 gfx12
; fp8cvt (gfx942, gfx950, gfx1201; gfx11 has no fp8 conversions): the fp8 conversion instructions
; (isa_notes.md §5.7). Their numbers are FNUZ on gfx942: E4M3 "fp8" bias 8, max 240 (0x7f), no
; inf, no -0, NaN only 0x80; E5M2 "bf8" bias 16, max 57344 (0x7f), no inf, no -0, NaN only 0x80.
; They are OCP on gfx950 (although the opcodes are gfx942's) and gfx1201: E4M3 "fp8" bias 7, max
; 448 (0x7e), no inf, -0 = 0x80, NaN 0x7f / 0xff; E5M2 "bf8" bias 15, max 57344 (0x7b),
; +-inf 0x7c / 0xfc, NaN 0x7d .. 0x7f (either sign).
; Launch: grid 1, block n (any multiple of the wave size up to 256).
;
; fp8cvt(x, y, q, out), per work-item i with x[i], y[i] (f32) and q[i] (u32 = four fp8/bf8 bytes),
; writes the record out[16 i : 16 i + 16] (u32); decodes are exact (FNUZ: 0x80 -> NaN):
;   0, 1    v_cvt_pk_f32_fp8(q word 0): fp8 bytes 0, 1 as f32
;   2, 3    the same with SDWA src0_sel:WORD_1 (gfx12, which has no SDWA: VOP3 op_sel:[1,0]):
;           bytes 2, 3
;   4 .. 7  v_cvt_pk_f32_bf8, words 0 and 1: bf8 bytes 0 .. 3 as f32
;   8 .. 11 v_cvt_f32_fp8: fp8 bytes 0 .. 3 as f32; on gfx942 with SDWA src0_sel:BYTE_0 .. BYTE_3;
;           on gfx950 byte 0 in the e32 form (as clang emits it) and SDWA src0_sel:BYTE_1 .. BYTE_3;
;           on gfx12 byte 0 in the e32 form and byte_sel:1 .. 3
;   12      v_cvt_pk_fp8_f32(x, y) into bits 15:0 of 0x5a5a5a5a: byte 0 = fp8(x), byte 1 = fp8(y),
;           bits 31:16 kept (0x5a5a)
;   13      v_cvt_pk_bf8_f32(x, y) op_sel:[0,0,1] into bits 31:16 of 0x5a5a5a5a: byte 2 = bf8(x),
;           byte 3 = bf8(y), bits 15:0 kept
;   14, 15  gfx950 only (not written elsewhere): v_cvt_scalef32_pk_f32_fp8(q word 1,
;           scale = -0.75) op_sel:[1,0,0]: fp8 bytes 2, 3 times 2^(E - 127), E = the scale's
;           biased exponent field (126): x 0.5, the scale's sign and mantissa ignored
;   Encoding rounds to nearest even (never by MODE); with FP16_OVFL = 0 (clang's setting):
;   FNUZ: a value whose rounded magnitude exceeds the maximum, +-inf and NaN all give 0x80; a
;   result that rounds to zero is +0 (0x00) whatever the sign, as the format has no -0.
;   OCP: a value whose rounded magnitude exceeds the maximum gives NaN (fp8) or +-inf (bf8),
;   +-inf gives NaN (fp8) or +-inf (bf8), NaN gives NaN.
;
; fp8cvt_sat(x, y, out): out[i] = fp8(x) | fp8(y) << 8 | bf8(x) << 16 | bf8(y) << 24 with
; MODE.FP16_OVFL = 1 (kernel descriptor): finite values past the maximum saturate to +-max
; instead of becoming NaN / inf: FNUZ 0x7f / 0xff for both formats, NaN stays 0x80; OCP fp8
; 0x7e / 0xfe, bf8 0x7b / 0xfb, NaN stays NaN. Same launch.
;
; gfx12 has no s_waitcnt: loads are waited for with s_wait_kmcnt / s_wait_loadcnt.
	.amdgcn_target "amdgcn-amd-amdhsa--@ARCH@"
	.amdhsa_code_object_version 6
	.text
	.protected fp8cvt
	.globl fp8cvt
	.p2align 8
	.type fp8cvt,@function
fp8cvt:
	s_load_dwordx8 s[4:11], s[0:1], 0x0	;%gfx9
	s_load_b256 s[4:11], s[0:1], 0x0	;%gfx12
	v_lshlrev_b32_e32 v1, 2, v0
	v_lshlrev_b32_e32 v2, 6, v0
	s_waitcnt lgkmcnt(0)			;%gfx9
	s_wait_kmcnt 0x0			;%gfx12
	global_load_dword v3, v1, s[4:5]	;%gfx9
	global_load_b32 v3, v1, s[4:5]		;%gfx12
	global_load_dword v4, v1, s[6:7]	;%gfx9
	global_load_b32 v4, v1, s[6:7]		;%gfx12
	global_load_dword v5, v1, s[8:9]	;%gfx9
	global_load_b32 v5, v1, s[8:9]		;%gfx12
	v_mov_b32_e32 v18, 0x5a5a5a5a
	v_mov_b32_e32 v19, 0x5a5a5a5a
	s_waitcnt vmcnt(0)			;%gfx9
	s_wait_loadcnt 0x0			;%gfx12
	v_cvt_pk_f32_fp8_e32 v[6:7], v5
	v_cvt_pk_f32_fp8_sdwa v[8:9], v5 src0_sel:WORD_1	;%gfx9
	v_cvt_pk_f32_fp8_e64 v[8:9], v5 op_sel:[1,0]		;%gfx12
	v_cvt_pk_f32_bf8_e32 v[10:11], v5
	v_cvt_pk_f32_bf8_sdwa v[12:13], v5 src0_sel:WORD_1	;%gfx9
	v_cvt_pk_f32_bf8_e64 v[12:13], v5 op_sel:[1,0]		;%gfx12
	v_cvt_f32_fp8_sdwa v14, v5 src0_sel:BYTE_0		;%gfx942
	v_cvt_f32_fp8_e32 v14, v5				;%gfx950 gfx12
	v_cvt_f32_fp8_sdwa v15, v5 src0_sel:BYTE_1		;%gfx9
	v_cvt_f32_fp8_e64 v15, v5 byte_sel:1			;%gfx12
	v_cvt_f32_fp8_sdwa v16, v5 src0_sel:BYTE_2		;%gfx9
	v_cvt_f32_fp8_e64 v16, v5 byte_sel:2			;%gfx12
	v_cvt_f32_fp8_sdwa v17, v5 src0_sel:BYTE_3		;%gfx9
	v_cvt_f32_fp8_e64 v17, v5 byte_sel:3			;%gfx12
	v_cvt_pk_fp8_f32 v18, v3, v4
	v_cvt_pk_bf8_f32 v19, v3, v4 op_sel:[0,0,1]
	s_mov_b32 s12, 0xbf400000				;%gfx950
	v_cvt_scalef32_pk_f32_fp8 v[20:21], v5, s12 op_sel:[1,0,0]	;%gfx950
	global_store_dwordx4 v2, v[6:9], s[10:11]		;%gfx9
	global_store_b128 v2, v[6:9], s[10:11]			;%gfx12
	global_store_dwordx4 v2, v[10:13], s[10:11] offset:16	;%gfx9
	global_store_b128 v2, v[10:13], s[10:11] offset:16	;%gfx12
	global_store_dwordx4 v2, v[14:17], s[10:11] offset:32	;%gfx9
	global_store_b128 v2, v[14:17], s[10:11] offset:32	;%gfx12
	global_store_dwordx2 v2, v[18:19], s[10:11] offset:48	;%gfx942
	global_store_dwordx4 v2, v[18:21], s[10:11] offset:48	;%gfx950
	global_store_b64 v2, v[18:19], s[10:11] offset:48	;%gfx12
	s_endpgm
.Lfp8cvt_end:
	.size fp8cvt, .Lfp8cvt_end-fp8cvt

	.protected fp8cvt_sat
	.globl fp8cvt_sat
	.p2align 8
	.type fp8cvt_sat,@function
fp8cvt_sat:
	s_load_dwordx4 s[4:7], s[0:1], 0x0	;%gfx9
	s_load_b128 s[4:7], s[0:1], 0x0		;%gfx12
	s_load_dwordx2 s[8:9], s[0:1], 0x10	;%gfx9
	s_load_b64 s[8:9], s[0:1], 0x10		;%gfx12
	v_lshlrev_b32_e32 v1, 2, v0
	s_waitcnt lgkmcnt(0)			;%gfx9
	s_wait_kmcnt 0x0			;%gfx12
	global_load_dword v2, v1, s[4:5]	;%gfx9
	global_load_b32 v2, v1, s[4:5]		;%gfx12
	global_load_dword v3, v1, s[6:7]	;%gfx9
	global_load_b32 v3, v1, s[6:7]		;%gfx12
	v_mov_b32_e32 v4, 0
	s_waitcnt vmcnt(0)			;%gfx9
	s_wait_loadcnt 0x0			;%gfx12
	v_cvt_pk_fp8_f32 v4, v2, v3
	v_cvt_pk_bf8_f32 v4, v2, v3 op_sel:[0,0,1]
	global_store_dword v1, v4, s[8:9]	;%gfx9
	global_store_b32 v1, v4, s[8:9]		;%gfx12
	s_endpgm
.Lfp8cvt_sat_end:
	.size fp8cvt_sat, .Lfp8cvt_sat_end-fp8cvt_sat

	.rodata
	.p2align 6
	.amdhsa_kernel fp8cvt
		.amdhsa_kernarg_size 32
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_wavefront_size32 1		;%gfx12
		.amdhsa_next_free_vgpr 20		;%gfx942 gfx12
		.amdhsa_next_free_vgpr 22		;%gfx950
		.amdhsa_next_free_sgpr 12		;%gfx942 gfx12
		.amdhsa_next_free_sgpr 13		;%gfx950
		.amdhsa_accum_offset 20			;%gfx942
		.amdhsa_accum_offset 24			;%gfx950
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
	.end_amdhsa_kernel

	.p2align 6
	.amdhsa_kernel fp8cvt_sat
		.amdhsa_kernarg_size 24
		.amdhsa_user_sgpr_count 2
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_wavefront_size32 1		;%gfx12
		.amdhsa_next_free_vgpr 5
		.amdhsa_next_free_sgpr 10
		.amdhsa_accum_offset 8			;%gfx9
		.amdhsa_float_denorm_mode_32 3
		.amdhsa_float_denorm_mode_16_64 3
		.amdhsa_fp16_overflow 1
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--@ARCH@
amdhsa.kernels:
  - .name: fp8cvt
    .symbol: fp8cvt.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 14	;%gfx942 gfx12
    .sgpr_count: 15	;%gfx950
    .vgpr_count: 20	;%gfx942 gfx12
    .vgpr_count: 22	;%gfx950
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx12
    .args:
      - { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: y, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: q, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: out, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: fp8cvt_sat
    .symbol: fp8cvt_sat.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: @WAVE@
    .sgpr_count: 12
    .vgpr_count: 5
    .agpr_count: 0
    .sgpr_spill_count: 0
    .vgpr_spill_count: 0
    .max_flat_workgroup_size: 256
    .uniform_work_group_size: 1
    .workgroup_processor_mode: 1	;%gfx12
    .args:
      - { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: y, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: out, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
...
	.end_amdgpu_metadata
