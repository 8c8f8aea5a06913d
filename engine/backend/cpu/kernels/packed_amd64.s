//go:build amd64 && !purego

#include "textflag.h"

// The packed-matrix kernels (see Packed): an outer product per column c,
// each activation value broadcast and multiplied into the 16 outputs of
// a panel by one FMA. Every output is one accumulator lane summed in
// column order from 0 with VFMADD231PS, so all tile shapes give the same
// bits. Panels of one call are pstride floats apart; ldx and ldd are the
// activation and output row strides in floats; k > 0 columns.

// FMA4 multiplies broadcast b into the 4 panel vectors Z16-Z19, adding
// to accumulators a0-a3.
#define FMA4(b, a0, a1, a2, a3) \
	VFMADD231PS Z16, b, a0; \
	VFMADD231PS Z17, b, a1; \
	VFMADD231PS Z18, b, a2; \
	VFMADD231PS Z19, b, a3

// func gemm4x64AVX512(x *float32, ldx int, p *float32, pstride int, k int, dst *float32, ldd int)
// 4 activation rows by 4 panels (64 outputs): 16 accumulators, 8 loads
// per 16 FMAs.
TEXT ·gemm4x64AVX512(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), R8
	MOVQ ldx+8(FP), AX
	SHLQ $2, AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ p+16(FP), R12
	MOVQ pstride+24(FP), AX
	SHLQ $2, AX
	LEAQ (R12)(AX*1), R13
	LEAQ (R13)(AX*1), SI
	LEAQ (SI)(AX*1), DI
	MOVQ k+32(FP), BX
	SHLQ $2, BX                    // end of the activation rows, in bytes
	XORQ CX, CX                    // activation offset (4 bytes a column)
	XORQ DX, DX                    // panel offset (64 bytes a column)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

loop:
	VMOVUPS      (R12)(DX*1), Z16
	VMOVUPS      (R13)(DX*1), Z17
	VMOVUPS      (SI)(DX*1), Z18
	VMOVUPS      (DI)(DX*1), Z19
	VBROADCASTSS (R8)(CX*1), Z20
	VBROADCASTSS (R9)(CX*1), Z21
	VBROADCASTSS (R10)(CX*1), Z22
	VBROADCASTSS (R11)(CX*1), Z23
	FMA4(Z20, Z0, Z1, Z2, Z3)
	FMA4(Z21, Z4, Z5, Z6, Z7)
	FMA4(Z22, Z8, Z9, Z10, Z11)
	FMA4(Z23, Z12, Z13, Z14, Z15)
	ADDQ         $4, CX
	ADDQ         $64, DX
	CMPQ         CX, BX
	JLT          loop

	MOVQ    dst+40(FP), DX
	MOVQ    ldd+48(FP), AX
	SHLQ    $2, AX
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	ADDQ    AX, DX
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	VMOVUPS Z6, 128(DX)
	VMOVUPS Z7, 192(DX)
	ADDQ    AX, DX
	VMOVUPS Z8, (DX)
	VMOVUPS Z9, 64(DX)
	VMOVUPS Z10, 128(DX)
	VMOVUPS Z11, 192(DX)
	ADDQ    AX, DX
	VMOVUPS Z12, (DX)
	VMOVUPS Z13, 64(DX)
	VMOVUPS Z14, 128(DX)
	VMOVUPS Z15, 192(DX)
	VZEROUPPER
	RET

// func gemm1x64AVX512(x *float32, p *float32, pstride int, k int, dst *float32)
// 1 activation row by 4 panels: 4 independent FMA chains, each panel
// read in order (a single-row product streams the weights).
TEXT ·gemm1x64AVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), R8
	MOVQ p+8(FP), R12
	MOVQ pstride+16(FP), AX
	SHLQ $2, AX
	LEAQ (R12)(AX*1), R13
	LEAQ (R13)(AX*1), SI
	LEAQ (SI)(AX*1), DI
	MOVQ k+24(FP), BX
	SHLQ $2, BX
	XORQ CX, CX
	XORQ DX, DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

loop:
	VBROADCASTSS (R8)(CX*1), Z20
	VMOVUPS      (R12)(DX*1), Z16
	VMOVUPS      (R13)(DX*1), Z17
	VMOVUPS      (SI)(DX*1), Z18
	VMOVUPS      (DI)(DX*1), Z19
	FMA4(Z20, Z0, Z1, Z2, Z3)
	ADDQ         $4, CX
	ADDQ         $64, DX
	CMPQ         CX, BX
	JLT          loop

	MOVQ    dst+32(FP), DX
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VZEROUPPER
	RET

// func gemm4x16AVX512(x *float32, ldx int, p *float32, k int, dst *float32, ldd int)
// 4 activation rows by one panel.
TEXT ·gemm4x16AVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), R8
	MOVQ ldx+8(FP), AX
	SHLQ $2, AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ p+16(FP), R12
	MOVQ k+24(FP), BX
	SHLQ $2, BX
	XORQ CX, CX
	XORQ DX, DX
	VPXORD Z0, Z0, Z0
	VPXORD Z4, Z4, Z4
	VPXORD Z8, Z8, Z8
	VPXORD Z12, Z12, Z12

loop:
	VMOVUPS      (R12)(DX*1), Z16
	VBROADCASTSS (R8)(CX*1), Z20
	VBROADCASTSS (R9)(CX*1), Z21
	VBROADCASTSS (R10)(CX*1), Z22
	VBROADCASTSS (R11)(CX*1), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z16, Z23, Z12
	ADDQ         $4, CX
	ADDQ         $64, DX
	CMPQ         CX, BX
	JLT          loop

	MOVQ    dst+32(FP), DX
	MOVQ    ldd+40(FP), AX
	SHLQ    $2, AX
	VMOVUPS Z0, (DX)
	ADDQ    AX, DX
	VMOVUPS Z4, (DX)
	ADDQ    AX, DX
	VMOVUPS Z8, (DX)
	ADDQ    AX, DX
	VMOVUPS Z12, (DX)
	VZEROUPPER
	RET

// func gemm1x16AVX512(x *float32, p *float32, k int, dst *float32)
// 1 activation row by one panel.
TEXT ·gemm1x16AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), R8
	MOVQ p+8(FP), R12
	MOVQ k+16(FP), BX
	SHLQ $2, BX
	XORQ CX, CX
	XORQ DX, DX
	VPXORD Z0, Z0, Z0

loop:
	VBROADCASTSS (R8)(CX*1), Z20
	VFMADD231PS  (R12)(DX*1), Z20, Z0
	ADDQ         $4, CX
	ADDQ         $64, DX
	CMPQ         CX, BX
	JLT          loop

	MOVQ    dst+24(FP), DX
	VMOVUPS Z0, (DX)
	VZEROUPPER
	RET
