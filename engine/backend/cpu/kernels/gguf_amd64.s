//go:build amd64 && !purego

#include "textflag.h"
#include "asm_amd64.h"

DATA ggOnes16<>+0(SB)/2, $1
GLOBL ggOnes16<>(SB), RODATA|NOPTR, $2

DATA ggLow4<>+0(SB)/1, $0x0f
GLOBL ggLow4<>(SB), RODATA|NOPTR, $1

DATA ggEight<>+0(SB)/1, $8
GLOBL ggEight<>(SB), RODATA|NOPTR, $1

DATA ggHigh2<>+0(SB)/1, $0x30
GLOBL ggHigh2<>(SB), RODATA|NOPTR, $1

DATA ggThirtyTwo<>+0(SB)/1, $32
GLOBL ggThirtyTwo<>(SB), RODATA|NOPTR, $1

// Q6_K scale shuffles: for 32-element block k of a half super-block, the
// low lane gets int16 scale 2k, the high lane scale 2k+1, each repeated.
DATA ggQ6Shuf<>+0(SB)/8, $0x0100010001000100
DATA ggQ6Shuf<>+8(SB)/8, $0x0100010001000100
DATA ggQ6Shuf<>+16(SB)/8, $0x0302030203020302
DATA ggQ6Shuf<>+24(SB)/8, $0x0302030203020302
DATA ggQ6Shuf<>+32(SB)/8, $0x0504050405040504
DATA ggQ6Shuf<>+40(SB)/8, $0x0504050405040504
DATA ggQ6Shuf<>+48(SB)/8, $0x0706070607060706
DATA ggQ6Shuf<>+56(SB)/8, $0x0706070607060706
DATA ggQ6Shuf<>+64(SB)/8, $0x0908090809080908
DATA ggQ6Shuf<>+72(SB)/8, $0x0908090809080908
DATA ggQ6Shuf<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA ggQ6Shuf<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA ggQ6Shuf<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA ggQ6Shuf<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA ggQ6Shuf<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA ggQ6Shuf<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL ggQ6Shuf<>(SB), RODATA|NOPTR, $128

// F16SCALAR widens the fp16 at mem into the low lane of x via GPR AX.
#define F16SCALAR(mem, x) \
	MOVWLZX   mem, AX; \
	VMOVD     AX, x; \
	VCVTPH2PS x, x

// SIGNDOT: Y3 = 8 int32 partial sums of the signed bytes Y1·Y2 (Y2 is
// clobbered), using |Y1| and Y2·sign(Y1) so that vpmaddubsw cannot
// saturate (|w| ≤ 128, |x| ≤ 127).
#define SIGNDOT \
	VPSIGNB    Y1, Y1, Y3; \
	VPSIGNB    Y1, Y2, Y2; \
	VPMADDUBSW Y2, Y3, Y3; \
	VPMADDWD   Y15, Y3, Y3

// func q8_0AVX2(xq *int8, xd *float32, w *byte, nb int) float32
TEXT ·q8_0AVX2(SB), NOSPLIT, $0-36
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         w+16(FP), DI
	MOVQ         nb+24(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Y15
	VXORPS       Y0, Y0, Y0

loop:
	F16SCALAR((DI), X6)
	VMULSS       (DX), X6, X6
	VBROADCASTSS X6, Y6
	VMOVDQU      2(DI), Y1
	VMOVDQU      (SI), Y2
	SIGNDOT
	VCVTDQ2PS    Y3, Y3
	VFMADD231PS  Y6, Y3, Y0
	ADDQ         $34, DI
	ADDQ         $32, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          loop

	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// func q4_0AVX2(xq *int8, xd *float32, w *byte, nb int) float32
TEXT ·q4_0AVX2(SB), NOSPLIT, $0-36
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         w+16(FP), DI
	MOVQ         nb+24(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Y15
	VPBROADCASTB ggLow4<>(SB), Y14
	VPBROADCASTB ggEight<>(SB), Y13
	VXORPS       Y0, Y0, Y0

loop:
	F16SCALAR((DI), X6)
	VMULSS       (DX), X6, X6
	VBROADCASTSS X6, Y6
	VMOVDQU      2(DI), X1
	VPSRLW       $4, X1, X2
	VINSERTI128  $1, X2, Y1, Y1
	VPAND        Y14, Y1, Y1
	VPSUBB       Y13, Y1, Y1
	VMOVDQU      (SI), Y2
	SIGNDOT
	VCVTDQ2PS    Y3, Y3
	VFMADD231PS  Y6, Y3, Y0
	ADDQ         $18, DI
	ADDQ         $32, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          loop

	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// Q4KCHUNK handles 64 elements of a Q4_K super-block: 32 bytes of codes
// at wo(DI) (low nibbles: sub-block 2j, high: 2j+1) against activations
// at xo(SI) and xo+32(SI), with factors d·sc·d_x at fo(SP) and fo+4(SP).
#define Q4KCHUNK(wo, xo0, xo1, fo0, fo1) \
	VMOVDQU      wo(DI), Y1; \
	VPSRLW       $4, Y1, Y2; \
	VPAND        Y14, Y1, Y1; \
	VPAND        Y14, Y2, Y2; \
	VPMADDUBSW   xo0(SI), Y1, Y1; \
	VPMADDUBSW   xo1(SI), Y2, Y2; \
	VPMADDWD     Y15, Y1, Y1; \
	VPMADDWD     Y15, Y2, Y2; \
	VCVTDQ2PS    Y1, Y1; \
	VCVTDQ2PS    Y2, Y2; \
	VBROADCASTSS fo0(SP), Y3; \
	VBROADCASTSS fo1(SP), Y4; \
	VFMADD231PS  Y3, Y1, Y0; \
	VFMADD231PS  Y4, Y2, Y12

// func q4KAVX2(xq *int8, xd, xs *float32, w *byte, nsb int) float32
// Stack: 0..31 per-sub-block factors.
TEXT ·q4KAVX2(SB), NOSPLIT, $32-44
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         xs+16(FP), BX
	MOVQ         w+24(FP), DI
	MOVQ         nsb+32(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Y15
	VPBROADCASTB ggLow4<>(SB), Y14
	VXORPS       Y0, Y0, Y0
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13

loop:
	F16SCALAR((DI), X10)
	VBROADCASTSS X10, Y10
	F16SCALAR(2(DI), X11)
	VBROADCASTSS X11, Y11

	// Unpack the 6-bit scales and mins (get_scale_min_k4): scales 0-3 are
	// the low 6 bits of bytes 0-3, mins 0-3 of bytes 4-7; scales 4-7 are
	// the low nibbles of bytes 8-11 with bits 6-7 of bytes 0-3 on top,
	// mins 4-7 the high nibbles with bits 6-7 of bytes 4-7.
	MOVL  4(DI), R8
	MOVL  8(DI), R9
	MOVL  12(DI), R10
	MOVL  R10, AX
	ANDL  $0x0f0f0f0f, AX
	MOVL  R8, R11
	SHRL  $6, R11
	ANDL  $0x03030303, R11
	SHLL  $4, R11
	ORL   R11, AX
	SHLQ  $32, AX
	ANDL  $0x3f3f3f3f, R8
	ORQ   R8, AX
	VMOVQ AX, X1
	MOVL  R10, AX
	SHRL  $4, AX
	ANDL  $0x0f0f0f0f, AX
	MOVL  R9, R11
	SHRL  $6, R11
	ANDL  $0x03030303, R11
	SHLL  $4, R11
	ORL   R11, AX
	SHLQ  $32, AX
	ANDL  $0x3f3f3f3f, R9
	ORQ   R9, AX
	VMOVQ AX, X2

	// factors d·sc[j]·d_x[j]; mins dmin·mn[j]·Σx[j]
	VPMOVZXBD   X1, Y1
	VCVTDQ2PS   Y1, Y1
	VMULPS      (DX), Y1, Y1
	VMULPS      Y10, Y1, Y1
	VMOVUPS     Y1, 0(SP)
	VPMOVZXBD   X2, Y2
	VCVTDQ2PS   Y2, Y2
	VMULPS      (BX), Y2, Y2
	VFMADD231PS Y11, Y2, Y13

	Q4KCHUNK(16, 0, 32, 0, 4)
	Q4KCHUNK(48, 64, 96, 8, 12)
	Q4KCHUNK(80, 128, 160, 16, 20)
	Q4KCHUNK(112, 192, 224, 24, 28)

	ADDQ $144, DI
	ADDQ $256, SI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  loop

	VADDPS Y12, Y0, Y0
	VSUBPS Y13, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+40(FP)
	VZEROUPPER
	RET

// Q6KDOT multiplies the 32 6-bit codes in Y7 (0..63) with the activations
// at xo(SI), subtracts 32·Σ pairs, weights the two 16-element halves with
// scale shuffle so(SB) of Y6 and adds d·d_x (at fo(SP)) times the result.
#define Q6KDOT(xo, so, fo) \
	VMOVDQU      xo(SI), Y9; \
	VPMADDUBSW   Y9, Y7, Y10; \
	VPMADDUBSW   Y9, Y12, Y11; \
	VPSUBW       Y11, Y10, Y10; \
	VPSHUFB      ggQ6Shuf<>+so(SB), Y6, Y11; \
	VPMADDWD     Y11, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VBROADCASTSS fo(SP), Y11; \
	VFMADD231PS  Y11, Y10, Y0

// Q6KHALF handles one 128-element half of a Q6_K super-block: ql at
// ql0(DI) and ql1(DI) (= ql0+32), qh at qho(DI), int8 scales at sco(DI),
// activations from xo0(SI), factors from fo0(SP).
#define Q6KHALF(ql0, ql1, qho, sco, xo0, xo1, xo2, xo3, fo0, fo1, fo2, fo3) \
	VMOVDQU     ql0(DI), Y3; \
	VMOVDQU     ql1(DI), Y4; \
	VMOVDQU     qho(DI), Y5; \
	VPMOVSXBW   sco(DI), X6; \
	VINSERTI128 $1, X6, Y6, Y6; \
	VPAND       Y14, Y3, Y7; \
	VPSLLW      $4, Y5, Y8; \
	VPAND       Y13, Y8, Y8; \
	VPOR        Y8, Y7, Y7; \
	Q6KDOT(xo0, 0, fo0); \
	VPAND       Y14, Y4, Y7; \
	VPSLLW      $2, Y5, Y8; \
	VPAND       Y13, Y8, Y8; \
	VPOR        Y8, Y7, Y7; \
	Q6KDOT(xo1, 32, fo1); \
	VPSRLW      $4, Y3, Y7; \
	VPAND       Y14, Y7, Y7; \
	VPAND       Y13, Y5, Y8; \
	VPOR        Y8, Y7, Y7; \
	Q6KDOT(xo2, 64, fo2); \
	VPSRLW      $4, Y4, Y7; \
	VPAND       Y14, Y7, Y7; \
	VPSRLW      $2, Y5, Y8; \
	VPAND       Y13, Y8, Y8; \
	VPOR        Y8, Y7, Y7; \
	Q6KDOT(xo3, 96, fo3)

// func q6KAVX2(xq *int8, xd *float32, w *byte, nsb int) float32
// Stack: 0..31 factors d·d_x for the 8 blocks of 32 of a super-block.
TEXT ·q6KAVX2(SB), NOSPLIT, $32-36
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         w+16(FP), DI
	MOVQ         nsb+24(FP), CX
	VPBROADCASTB ggLow4<>(SB), Y14
	VPBROADCASTB ggHigh2<>(SB), Y13
	VPBROADCASTB ggThirtyTwo<>(SB), Y12
	VXORPS       Y0, Y0, Y0

loop:
	F16SCALAR(208(DI), X2)
	VBROADCASTSS X2, Y2
	VMULPS       (DX), Y2, Y2
	VMOVUPS      Y2, 0(SP)

	Q6KHALF(0, 32, 128, 192, 0, 32, 64, 96, 0, 4, 8, 12)
	Q6KHALF(64, 96, 160, 200, 128, 160, 192, 224, 16, 20, 24, 28)

	ADDQ $210, DI
	ADDQ $256, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  loop

	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET
