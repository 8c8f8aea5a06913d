//go:build amd64 && !purego

#include "textflag.h"

DATA actAbs<>+0(SB)/4, $0x7fffffff
GLOBL actAbs<>(SB), RODATA|NOPTR, $4
DATA actSign<>+0(SB)/4, $0x80000000
GLOBL actSign<>(SB), RODATA|NOPTR, $4
DATA act127<>+0(SB)/4, $127.0
GLOBL act127<>(SB), RODATA|NOPTR, $4
DATA actHalf<>+0(SB)/4, $0.5
GLOBL actHalf<>(SB), RODATA|NOPTR, $4
DATA actOne<>+0(SB)/4, $1.0
GLOBL actOne<>(SB), RODATA|NOPTR, $4

// ROUNDAWAY rounds the 16 floats of z to the nearest integer, ties away
// from zero, as math.Round: t = trunc(z), plus sign(z) where |z−t| ≥ 0.5
// (z − t is exact below 2^23). Uses Z2, Z3, Z4 and K1.
#define ROUNDAWAY(z) \
	VRNDSCALEPS $3, z, Z2; \
	VSUBPS      Z2, z, Z3; \
	VANDPS      Z15, Z3, Z3; \
	VCMPPS      $0x1d, Z13, Z3, K1; \
	VANDPS      Z11, z, Z4; \
	VORPS       Z12, Z4, Z4; \
	VADDPS      Z4, Z2, K1, Z2; \
	VCVTTPS2DQ  Z2, z

// func quantizeQ8AVX512(x *float32, q *int8, d, s *float32, nb int)
// quantizeQ8Generic for nb blocks of 32, with the same results: amax is
// exact, d = amax/127 and id = 127/amax are the same f32 divisions, v·id
// the same f32 product, and the rounding is math.Round's.
TEXT ·quantizeQ8AVX512(SB), NOSPLIT, $0-40
	MOVQ         x+0(FP), SI
	MOVQ         q+8(FP), DI
	MOVQ         d+16(FP), DX
	MOVQ         s+24(FP), BX
	MOVQ         nb+32(FP), CX
	VPBROADCASTD actAbs<>(SB), Z15
	VBROADCASTSS act127<>(SB), X14
	VBROADCASTSS actHalf<>(SB), Z13
	VBROADCASTSS actOne<>(SB), Z12
	VPBROADCASTD actSign<>(SB), Z11
	TESTQ        CX, CX
	JZ           done

loop:
	VMOVUPS       (SI), Z0
	VMOVUPS       64(SI), Z1
	VANDPS        Z15, Z0, Z6
	VANDPS        Z15, Z1, Z7
	VMAXPS        Z7, Z6, Z6
	VEXTRACTF64X4 $1, Z6, Y7
	VMAXPS        Y7, Y6, Y6
	VEXTRACTF128  $1, Y6, X7
	VMAXPS        X7, X6, X6
	VPERMILPS     $0x4e, X6, X7
	VMAXPS        X7, X6, X6
	VPERMILPS     $0xb1, X6, X7
	VMAXPS        X7, X6, X6
	VXORPS        X7, X7, X7
	VUCOMISS      X7, X6
	JEQ           zero

	VDIVSS       X6, X14, X8      // id = 127/amax
	VDIVSS       X14, X6, X9      // d = amax/127
	VMOVSS       X9, (DX)
	VBROADCASTSS X8, Z8
	VMULPS       Z8, Z0, Z0
	VMULPS       Z8, Z1, Z1
	ROUNDAWAY(Z0)
	ROUNDAWAY(Z1)
	VPMOVDB      Z0, X2
	VMOVDQU      X2, (DI)
	VPMOVDB      Z1, X3
	VMOVDQU      X3, 16(DI)
	VPADDD        Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPADDD        X1, X0, X0
	VCVTDQ2PS     X0, X0          // isum, exact
	VMULSS        X0, X9, X0
	VMOVSS        X0, (BX)
	JMP           next

zero:
	MOVL    $0, (DX)
	MOVL    $0, (BX)
	VPXORD  X2, X2, X2
	VMOVDQU X2, (DI)
	VMOVDQU X2, 16(DI)

next:
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, BX
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
