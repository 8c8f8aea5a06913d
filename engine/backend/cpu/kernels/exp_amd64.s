//go:build amd64 && !purego

#include "textflag.h"
#include "asm_amd64.h"

// Constants of the vector e^x, each a full 8-float vector: the same
// algorithm as expf in exp.go (Cody-Waite reduction by ln 2, degree-5
// Cephes polynomial).
#define EXPC(off, bits) \
	DATA expConsts<>+(off+0)(SB)/4, $bits; \
	DATA expConsts<>+(off+4)(SB)/4, $bits; \
	DATA expConsts<>+(off+8)(SB)/4, $bits; \
	DATA expConsts<>+(off+12)(SB)/4, $bits; \
	DATA expConsts<>+(off+16)(SB)/4, $bits; \
	DATA expConsts<>+(off+20)(SB)/4, $bits; \
	DATA expConsts<>+(off+24)(SB)/4, $bits; \
	DATA expConsts<>+(off+28)(SB)/4, $bits

EXPC(0, 0x3fb8aa3b)   // log2(e)
EXPC(32, 0x3f318000)  // ln2 high part 0.693359375
EXPC(64, 0xb95e8083)  // ln2 low part -2.12194440e-4
EXPC(96, 0x39506967)  // 1.9875691500e-4
EXPC(128, 0x3ab743ce) // 1.3981999507e-3
EXPC(160, 0x3c088908) // 8.3334519073e-3
EXPC(192, 0x3d2aa9c1) // 4.1665795894e-2
EXPC(224, 0x3e2aaaaa) // 1.6666665459e-1
EXPC(256, 0x3f000000) // 5.0000001201e-1
EXPC(288, 0x3f800000) // 1
EXPC(320, 0x0000007f) // 127 (int)
EXPC(352, 0xc2aeac4f) // -87.33654: below, e^x is 0
EXPC(384, 0x42b17217) // 88.72283: above, e^x is +Inf
EXPC(416, 0x7f800000) // +Inf
GLOBL expConsts<>(SB), RODATA|NOPTR, $448

#define LOG2E expConsts<>+0(SB)
#define LN2HI expConsts<>+32(SB)
#define LN2LO expConsts<>+64(SB)
#define EXPP0 expConsts<>+96(SB)
#define EXPP1 expConsts<>+128(SB)
#define EXPP2 expConsts<>+160(SB)
#define EXPP3 expConsts<>+192(SB)
#define EXPP4 expConsts<>+224(SB)
#define EXPP5 expConsts<>+256(SB)
#define ONE expConsts<>+288(SB)
#define I127 expConsts<>+320(SB)
#define XLO expConsts<>+352(SB)
#define XHI expConsts<>+384(SB)
#define PINF expConsts<>+416(SB)

// EXPY sets Y3 = e^Y0 for 8 floats, using Y1, Y2, Y4 and Y5 (Y0 is
// clobbered): 0 below -87.34, +Inf above 88.72, NaN for NaN.
#define EXPY \
	VMOVUPS      Y0, Y5; \
	VMULPS       LOG2E, Y0, Y1; \
	VCVTPS2DQ    Y1, Y2; \
	VCVTDQ2PS    Y2, Y1; \
	VFNMADD231PS LN2HI, Y1, Y0; \
	VFNMADD231PS LN2LO, Y1, Y0; \
	VMOVUPS      EXPP0, Y3; \
	VFMADD213PS  EXPP1, Y0, Y3; \
	VFMADD213PS  EXPP2, Y0, Y3; \
	VFMADD213PS  EXPP3, Y0, Y3; \
	VFMADD213PS  EXPP4, Y0, Y3; \
	VFMADD213PS  EXPP5, Y0, Y3; \
	VMULPS       Y0, Y0, Y4; \
	VFMADD213PS  Y0, Y4, Y3; \
	VADDPS       ONE, Y3, Y3; \
	VPSRAD       $1, Y2, Y4; \
	VPSUBD       Y4, Y2, Y2; \
	VPADDD       I127, Y4, Y4; \
	VPADDD       I127, Y2, Y2; \
	VPSLLD       $23, Y4, Y4; \
	VPSLLD       $23, Y2, Y2; \
	VMULPS       Y4, Y3, Y3; \
	VMULPS       Y2, Y3, Y3; \
	VCMPPS       $1, XLO, Y5, Y4; \
	VANDNPS      Y3, Y4, Y3; \
	VCMPPS       $0x0e, XHI, Y5, Y4; \
	VBLENDVPS    Y4, PINF, Y3, Y3

// func expSubSumAVX2(x *float32, n int, m float32) float32
// x[i] = e^(x[i]-m); returns Σ x[i]. n is a multiple of 8.
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Y6
	VXORPS       Y7, Y7, Y7

loop:
	CMPQ    CX, $8
	JLT     done
	VMOVUPS (DI), Y0
	VSUBPS  Y6, Y0, Y0
	EXPY
	VMOVUPS Y3, (DI)
	VADDPS  Y3, Y7, Y7
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     loop

done:
	HSUMY(Y7, X7, X1)
	VMOVSS X7, ret+24(FP)
	VZEROUPPER
	RET

// func swigluAVX2(dst, gate, up *float32, n int)
// dst[i] = g[i]·u[i]/(1+e^(-g[i])). n is a multiple of 8.
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ   dst+0(FP), DI
	MOVQ   gate+8(FP), SI
	MOVQ   up+16(FP), DX
	MOVQ   n+24(FP), CX
	VXORPS Y6, Y6, Y6

loop:
	CMPQ    CX, $8
	JLT     done
	VMOVUPS (SI), Y7
	VSUBPS  Y7, Y6, Y0
	EXPY
	VADDPS  ONE, Y3, Y3
	VMULPS  (DX), Y7, Y7
	VDIVPS  Y3, Y7, Y7
	VMOVUPS Y7, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     loop

done:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
// max of x[0:n], n a positive multiple of 8 (NaNs may be skipped).
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ    $32, SI
	SUBQ    $8, CX

loop:
	CMPQ    CX, $8
	JLT     done
	VMAXPS  (SI), Y0, Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     loop

done:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXSS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET
