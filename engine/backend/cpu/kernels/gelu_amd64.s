//go:build amd64 && !purego

#include "textflag.h"

// GELU x·Φ(x) = h + h·erf(x/√2), h = x/2, with erf(z) for z clamped to
// [-4, 4] as z·P(z²)/Q(z²), P of degree 6 and Q of degree 4 (the
// minimax rational form Eigen and XLA use for float erf; it is within
// 7e-8 of erf, under an f32 ulp of 1): Horner steps with FMA and one
// division. Constants: 1/√2, -4, 4, 1/2, P from z¹² down, Q from z⁸ down.
DATA geluC<>+0(SB)/4, $0x3f3504f3
DATA geluC<>+4(SB)/4, $0xc0800000
DATA geluC<>+8(SB)/4, $0x40800000
DATA geluC<>+12(SB)/4, $0x3f000000
DATA geluC<>+16(SB)/4, $0xaf95df0b
DATA geluC<>+20(SB)/4, $0x32edffee
DATA geluC<>+24(SB)/4, $0xb60cff51
DATA geluC<>+28(SB)/4, $0xb86ec2d2
DATA geluC<>+32(SB)/4, $0xba40ac63
DATA geluC<>+36(SB)/4, $0xbb41a1f6
DATA geluC<>+40(SB)/4, $0xbc83dbd4
DATA geluC<>+44(SB)/4, $0xb77460cd
DATA geluC<>+48(SB)/4, $0xb95fbd29
DATA geluC<>+52(SB)/4, $0xbadc924e
DATA geluC<>+56(SB)/4, $0xbbf19bf8
DATA geluC<>+60(SB)/4, $0xbc69b6a7
GLOBL geluC<>(SB), RODATA|NOPTR, $64

// GELUV computes GELU of x into x with the constants in c0-c15 (register
// names of one width: Z for 16 lanes, Y for 8) and temporaries z, z2, p, q.
#define GELUV(x, z, z2, p, q, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15) \
	VMULPS      c0, x, z; \
	VMAXPS      c1, z, z; \
	VMINPS      c2, z, z; \
	VMULPS      z, z, z2; \
	VMOVAPS     c4, p; \
	VFMADD213PS c5, z2, p; \
	VFMADD213PS c6, z2, p; \
	VFMADD213PS c7, z2, p; \
	VFMADD213PS c8, z2, p; \
	VFMADD213PS c9, z2, p; \
	VFMADD213PS c10, z2, p; \
	VMULPS      z, p, p; \
	VMOVAPS     c11, q; \
	VFMADD213PS c12, z2, q; \
	VFMADD213PS c13, z2, q; \
	VFMADD213PS c14, z2, q; \
	VFMADD213PS c15, z2, q; \
	VDIVPS      q, p, p; \
	VMULPS      c3, x, x; \
	VFMADD231PS p, x, x

// func geluAVX512(dst, x *float32, n int)
// n a multiple of 16.
TEXT ·geluAVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	LEAQ         geluC<>(SB), AX
	VBROADCASTSS 0(AX), Z16
	VBROADCASTSS 4(AX), Z17
	VBROADCASTSS 8(AX), Z18
	VBROADCASTSS 12(AX), Z19
	VBROADCASTSS 16(AX), Z20
	VBROADCASTSS 20(AX), Z21
	VBROADCASTSS 24(AX), Z22
	VBROADCASTSS 28(AX), Z23
	VBROADCASTSS 32(AX), Z24
	VBROADCASTSS 36(AX), Z25
	VBROADCASTSS 40(AX), Z26
	VBROADCASTSS 44(AX), Z27
	VBROADCASTSS 48(AX), Z28
	VBROADCASTSS 52(AX), Z29
	VBROADCASTSS 56(AX), Z30
	VBROADCASTSS 60(AX), Z31
	TESTQ        CX, CX
	JZ           done

loop:
	VMOVUPS (SI), Z0
	GELUV(Z0, Z1, Z2, Z3, Z4, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31)
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop

done:
	VZEROUPPER
	RET
