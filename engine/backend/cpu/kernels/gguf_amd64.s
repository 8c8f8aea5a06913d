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

// func q6KRowsAVX2(xq *int8, xd *float32, w *byte, nsb, nrows int, dst *float32)
// dst[r] = the product of the activation row with weight row r of nrows
// consecutive rows of nsb Q6_K super-blocks at w.
// Stack: 0..31 factors d·d_x for the 8 blocks of 32 of a super-block.
TEXT ·q6KRowsAVX2(SB), NOSPLIT, $32-48
	MOVQ         w+16(FP), DI
	MOVQ         nrows+32(FP), R12
	MOVQ         dst+40(FP), R13
	VPBROADCASTB ggLow4<>(SB), Y14
	VPBROADCASTB ggHigh2<>(SB), Y13
	VPBROADCASTB ggThirtyTwo<>(SB), Y12

row:
	MOVQ   xq+0(FP), SI
	MOVQ   xd+8(FP), DX
	MOVQ   nsb+24(FP), CX
	VXORPS Y0, Y0, Y0

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
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    row
	VZEROUPPER
	RET

// Q4KUNPACK reads super-block DI's d and dmin (broadcast in Y10, Y11) and
// its 6-bit scales and mins (the 8 bytes of each in X1, X2).
#define Q4KUNPACK \
	F16SCALAR((DI), X10); \
	VBROADCASTSS X10, Y10; \
	F16SCALAR(2(DI), X11); \
	VBROADCASTSS X11, Y11; \
	MOVL  4(DI), R8; \
	MOVL  8(DI), R9; \
	MOVL  12(DI), R10; \
	MOVL  R10, AX; \
	ANDL  $0x0f0f0f0f, AX; \
	MOVL  R8, R11; \
	SHRL  $6, R11; \
	ANDL  $0x03030303, R11; \
	SHLL  $4, R11; \
	ORL   R11, AX; \
	SHLQ  $32, AX; \
	ANDL  $0x3f3f3f3f, R8; \
	ORQ   R8, AX; \
	VMOVQ AX, X1; \
	MOVL  R10, AX; \
	SHRL  $4, AX; \
	ANDL  $0x0f0f0f0f, AX; \
	MOVL  R9, R11; \
	SHRL  $6, R11; \
	ANDL  $0x03030303, R11; \
	SHLL  $4, R11; \
	ORL   R11, AX; \
	SHLQ  $32, AX; \
	ANDL  $0x3f3f3f3f, R9; \
	ORQ   R9, AX; \
	VMOVQ AX, X2

// The 4-row Q4_K kernels share their code; DOT(mem, z) sets the 16 int32
// lanes of z to the sums of 4 products of the nibbles in Z3 with the
// activation bytes at mem: VPMADDUBSW+VPMADDWD (Z15 = ones), or VPDPBUSD
// on a zeroed z where the CPU has VNNI. Both give the same exact sums.
#define Q4KDOT_MADD(mem, z) VPMADDUBSW mem, Z3, z; VPMADDWD Z15, z, z
#define Q4KDOT_VNNI(mem, z) VPXORD z, z, z; VPDPBUSD mem, Z3, z

#define Q4KX4SETUP \
	VPBROADCASTB ggLow4<>(SB), Z14; \
	VMOVDQU32    ggQ4KIdx<>+0(SB), Z16; \
	VMOVDQU32    ggQ4KIdx<>+64(SB), Z17; \
	VMOVDQU32    ggQ4KIdx<>+128(SB), Z18; \
	VMOVDQU32    ggQ4KIdx<>+192(SB), Z19; \
	VPXORD       Z20, Z20, Z20; \
	VPXORD       Z24, Z24, Z24; \
	VPXORD       Z21, Z21, Z21; \
	VPXORD       Z25, Z25, Z25; \
	VPXORD       Z22, Z22, Z22; \
	VPXORD       Z26, Z26, Z26; \
	VPXORD       Z23, Z23, Z23; \
	VPXORD       Z27, Z27, Z27

// Q4KX4CHUNK multiplies the 64 codes at woff(DI) with 64 activation
// bytes of each of the 4 rows at xoff(SI) and accumulates them, scaled by
// the block factors (Z28-Z31 permuted by idx), into Z20-Z23.
#define Q4KX4CHUNK(DOT, woff, xoff, idx) \
	VMOVDQU      woff(DI), Y3; \
	VPSRLW       $4, Y3, Y9; \
	VINSERTI64X4 $1, Y9, Z3, Z3; \
	VPANDD       Z14, Z3, Z3; \
	DOT(xoff(SI), Z4); \
	VCVTDQ2PS    Z4, Z4; \
	VPERMPS      Z28, idx, Z8; \
	VFMADD231PS  Z8, Z4, Z20; \
	DOT(xoff(SI)(R13*1), Z5); \
	VCVTDQ2PS    Z5, Z5; \
	VPERMPS      Z29, idx, Z9; \
	VFMADD231PS  Z9, Z5, Z21; \
	DOT(xoff(SI)(R13*2), Z6); \
	VCVTDQ2PS    Z6, Z6; \
	VPERMPS      Z30, idx, Z10; \
	VFMADD231PS  Z10, Z6, Z22; \
	DOT(xoff(SI)(R10*1), Z7); \
	VCVTDQ2PS    Z7, Z7; \
	VPERMPS      Z31, idx, Z11; \
	VFMADD231PS  Z11, Z7, Z23

#define Q4KX4STEP(DOT) \
	Q4KUNPACK; \
	LEAQ  (R13)(R13*2), R10; \
	LEAQ  (R12)(R12*2), R11; \
	VPMOVZXBD X1, Y1; \
	VCVTDQ2PS Y1, Y1; \
	VPMOVZXBD X2, Y2; \
	VCVTDQ2PS Y2, Y2; \
	VMULPS      (DX), Y1, Y28; \
	VMULPS      Y10, Y28, Y28; \
	VMULPS      (BX), Y2, Y4; \
	VFMADD231PS Y11, Y4, Y24; \
	VMULPS      (DX)(R12*1), Y1, Y29; \
	VMULPS      Y10, Y29, Y29; \
	VMULPS      (BX)(R12*1), Y2, Y5; \
	VFMADD231PS Y11, Y5, Y25; \
	VMULPS      (DX)(R12*2), Y1, Y30; \
	VMULPS      Y10, Y30, Y30; \
	VMULPS      (BX)(R12*2), Y2, Y6; \
	VFMADD231PS Y11, Y6, Y26; \
	VMULPS      (DX)(R11*1), Y1, Y31; \
	VMULPS      Y10, Y31, Y31; \
	VMULPS      (BX)(R11*1), Y2, Y7; \
	VFMADD231PS Y11, Y7, Y27; \
	Q4KX4CHUNK(DOT, 16, 0, Z16); \
	Q4KX4CHUNK(DOT, 48, 64, Z17); \
	Q4KX4CHUNK(DOT, 80, 128, Z18); \
	Q4KX4CHUNK(DOT, 112, 192, Z19); \
	ADDQ $144, DI; \
	ADDQ $256, SI; \
	ADDQ $32, DX; \
	ADDQ $32, BX; \
	DECQ CX

// Q4KX4ROWOUT stores row accumulator acc (both halves, minus the min
// terms in mins) at mem.
#define Q4KX4ROWOUT(acc, mins, mem) \
	VMOVAPS       acc, Z0; \
	VEXTRACTF64X4 $1, Z0, Y12; \
	VADDPS        Y12, Y0, Y0; \
	VSUBPS        mins, Y0, Y0; \
	HSUMY(Y0, X0, X1); \
	VMOVSS        X0, mem

#define Q4KX4OUT \
	Q4KX4ROWOUT(Z20, Y24, 0(DX)); \
	Q4KX4ROWOUT(Z21, Y25, 4(DX)); \
	Q4KX4ROWOUT(Z22, Y26, 8(DX)); \
	Q4KX4ROWOUT(Z23, Y27, 12(DX))

// func q4Kx4AVX512(xq *int8, qstride int, xd, xs *float32, dstride int, w *byte, nsb int, out *float32)
// q4KAVX512 of one weight row against 4 quantized activation rows (codes
// xq + r·qstride, scales and sums xd, xs + r·dstride, strides in bytes):
// the weight codes, scales and mins are unpacked once for the 4 rows and
// every row keeps the one-row kernel's accumulators and order, so out[r]
// is bit-identical to it.
TEXT ·q4Kx4AVX512(SB), NOSPLIT, $0-64
	MOVQ         xq+0(FP), SI
	MOVQ         qstride+8(FP), R13
	MOVQ         xd+16(FP), DX
	MOVQ         xs+24(FP), BX
	MOVQ         dstride+32(FP), R12
	MOVQ         w+40(FP), DI
	MOVQ         nsb+48(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Z15
	Q4KX4SETUP

loop:
	Q4KX4STEP(Q4KDOT_MADD)
	JNZ  loop
	MOVQ out+56(FP), DX
	Q4KX4OUT
	VZEROUPPER
	RET

// func q6Kx4RowsAVX512(xq *int8, qstride int, xd *float32, dstride int, w *byte, nsb, nrows int, dst *float32, ostride int)
// q6KAVX2 of nrows consecutive weight rows against 4 quantized activation
// rows (codes xq + j·qstride, scales xd + j·dstride, strides in bytes),
// the result of activation row j and weight row r at dst + j·ostride +
// 4·r bytes: each weight row's codes and scales are unpacked once for the
// 4 rows and every row keeps the one-row kernel's accumulator and order,
// so each result is bit-identical to it.
// Stack: 4 rows × 32 bytes of factors d·d_x.
TEXT ·q6Kx4RowsAVX512(SB), NOSPLIT, $128-72
	MOVQ         qstride+8(FP), R13
	MOVQ         dstride+24(FP), R12
	MOVQ         w+32(FP), DI
	MOVQ         nrows+48(FP), R15
	MOVQ         dst+56(FP), R14
	LEAQ         (R13)(R13*2), R10
	LEAQ         (R12)(R12*2), R11
	VPBROADCASTB ggLow4<>(SB), Y14
	VPBROADCASTB ggHigh2<>(SB), Y13
	VPBROADCASTB ggThirtyTwo<>(SB), Y12

row6:
	MOVQ   xq+0(FP), SI
	MOVQ   xd+16(FP), DX
	MOVQ   nsb+40(FP), CX
	VPXORD Y16, Y16, Y16
	VPXORD Y17, Y17, Y17
	VPXORD Y18, Y18, Y18
	VPXORD Y19, Y19, Y19

loop:
	F16SCALAR(208(DI), X2)
	VBROADCASTSS X2, Y2
	VMULPS       (DX), Y2, Y20
	VMOVUPS      Y20, 0(SP)
	VMULPS       (DX)(R12*1), Y2, Y21
	VMOVUPS      Y21, 32(SP)
	VMULPS       (DX)(R12*2), Y2, Y22
	VMOVUPS      Y22, 64(SP)
	VMULPS       (DX)(R11*1), Y2, Y23
	VMOVUPS      Y23, 96(SP)
	VMOVDQU     0(DI), Y3
	VMOVDQU     32(DI), Y4
	VMOVDQU     128(DI), Y5
	VPMOVSXBW   192(DI), X6
	VINSERTI128 $1, X6, Y6, Y6
	VPAND       Y14, Y3, Y7
	VPSLLW      $4, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+0(SB), Y6, Y9
	VMOVDQU8     (SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 0(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     (SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 32(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     (SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 64(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     (SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 96(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPAND       Y14, Y4, Y7
	VPSLLW      $2, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+32(SB), Y6, Y9
	VMOVDQU8     32(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 4(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     32(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 36(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     32(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 68(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     32(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 100(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPSRLW      $4, Y3, Y7
	VPAND       Y14, Y7, Y7
	VPAND       Y13, Y5, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+64(SB), Y6, Y9
	VMOVDQU8     64(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 8(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     64(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 40(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     64(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 72(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     64(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 104(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPSRLW      $4, Y4, Y7
	VPAND       Y14, Y7, Y7
	VPSRLW      $2, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+96(SB), Y6, Y9
	VMOVDQU8     96(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 12(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     96(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 44(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     96(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 76(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     96(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 108(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VMOVDQU     64(DI), Y3
	VMOVDQU     96(DI), Y4
	VMOVDQU     160(DI), Y5
	VPMOVSXBW   200(DI), X6
	VINSERTI128 $1, X6, Y6, Y6
	VPAND       Y14, Y3, Y7
	VPSLLW      $4, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+0(SB), Y6, Y9
	VMOVDQU8     128(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 16(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     128(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 48(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     128(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 80(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     128(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 112(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPAND       Y14, Y4, Y7
	VPSLLW      $2, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+32(SB), Y6, Y9
	VMOVDQU8     160(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 20(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     160(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 52(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     160(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 84(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     160(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 116(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPSRLW      $4, Y3, Y7
	VPAND       Y14, Y7, Y7
	VPAND       Y13, Y5, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+64(SB), Y6, Y9
	VMOVDQU8     192(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 24(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     192(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 56(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     192(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 88(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     192(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 120(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	VPSRLW      $4, Y4, Y7
	VPAND       Y14, Y7, Y7
	VPSRLW      $2, Y5, Y8
	VPAND       Y13, Y8, Y8
	VPOR        Y8, Y7, Y7
	VPSHUFB      ggQ6Shuf<>+96(SB), Y6, Y9
	VMOVDQU8     224(SI), Y20
	VPMADDUBSW   Y20, Y7, Y24
	VPMADDUBSW   Y20, Y12, Y28
	VPSUBW       Y28, Y24, Y24
	VPMADDWD     Y9, Y24, Y24
	VCVTDQ2PS    Y24, Y24
	VBROADCASTSS 28(SP), Y28
	VFMADD231PS  Y28, Y24, Y16
	VMOVDQU8     224(SI)(R13*1), Y21
	VPMADDUBSW   Y21, Y7, Y25
	VPMADDUBSW   Y21, Y12, Y29
	VPSUBW       Y29, Y25, Y25
	VPMADDWD     Y9, Y25, Y25
	VCVTDQ2PS    Y25, Y25
	VBROADCASTSS 60(SP), Y29
	VFMADD231PS  Y29, Y25, Y17
	VMOVDQU8     224(SI)(R13*2), Y22
	VPMADDUBSW   Y22, Y7, Y26
	VPMADDUBSW   Y22, Y12, Y30
	VPSUBW       Y30, Y26, Y26
	VPMADDWD     Y9, Y26, Y26
	VCVTDQ2PS    Y26, Y26
	VBROADCASTSS 92(SP), Y30
	VFMADD231PS  Y30, Y26, Y18
	VMOVDQU8     224(SI)(R10*1), Y23
	VPMADDUBSW   Y23, Y7, Y27
	VPMADDUBSW   Y23, Y12, Y31
	VPSUBW       Y31, Y27, Y27
	VPMADDWD     Y9, Y27, Y27
	VCVTDQ2PS    Y27, Y27
	VBROADCASTSS 124(SP), Y31
	VFMADD231PS  Y31, Y27, Y19
	ADDQ $210, DI
	ADDQ $256, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  loop

	MOVQ    ostride+64(FP), DX
	LEAQ    (DX)(DX*2), BX
	VMOVAPS Y16, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, (R14)
	VMOVAPS Y17, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, (R14)(DX*1)
	VMOVAPS Y18, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, (R14)(DX*2)
	VMOVAPS Y19, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, (R14)(BX*1)
	ADDQ    $4, R14
	DECQ    R15
	JNZ     row6
	VZEROUPPER
	RET


// func q8_0x4AVX512(xq *int8, qstride int, xd *float32, dstride int, w *byte, nb int, out *float32)
// q8_0AVX2 of one weight row against 4 quantized activation rows, laid
// out as for q6Kx4AVX512, bit-identical to it row by row.
TEXT ·q8_0x4AVX512(SB), NOSPLIT, $0-56
	MOVQ         xq+0(FP), SI
	MOVQ         qstride+8(FP), R13
	MOVQ         xd+16(FP), DX
	MOVQ         dstride+24(FP), R12
	MOVQ         w+32(FP), DI
	MOVQ         nb+40(FP), CX
	LEAQ         (R13)(R13*2), R10
	LEAQ         (R12)(R12*2), R11
	VPBROADCASTW ggOnes16<>(SB), Y15
	VPXORD       Y16, Y16, Y16
	VPXORD       Y17, Y17, Y17
	VPXORD       Y18, Y18, Y18
	VPXORD       Y19, Y19, Y19

loop:
	F16SCALAR((DI), X12)
	VMOVDQU      2(DI), Y1
	VPSIGNB      Y1, Y1, Y3
	VMOVDQU      (SI), Y4
	VPSIGNB      Y1, Y4, Y4
	VPMADDUBSW   Y4, Y3, Y4
	VPMADDWD     Y15, Y4, Y4
	VCVTDQ2PS    Y4, Y4
	VMULSS       (DX), X12, X8
	VBROADCASTSS X8, Y8
	VFMADD231PS  Y8, Y4, Y16
	VMOVDQU      (SI)(R13*1), Y5
	VPSIGNB      Y1, Y5, Y5
	VPMADDUBSW   Y5, Y3, Y5
	VPMADDWD     Y15, Y5, Y5
	VCVTDQ2PS    Y5, Y5
	VMULSS       (DX)(R12*1), X12, X9
	VBROADCASTSS X9, Y9
	VFMADD231PS  Y9, Y5, Y17
	VMOVDQU      (SI)(R13*2), Y6
	VPSIGNB      Y1, Y6, Y6
	VPMADDUBSW   Y6, Y3, Y6
	VPMADDWD     Y15, Y6, Y6
	VCVTDQ2PS    Y6, Y6
	VMULSS       (DX)(R12*2), X12, X10
	VBROADCASTSS X10, Y10
	VFMADD231PS  Y10, Y6, Y18
	VMOVDQU      (SI)(R10*1), Y7
	VPSIGNB      Y1, Y7, Y7
	VPMADDUBSW   Y7, Y3, Y7
	VPMADDWD     Y15, Y7, Y7
	VCVTDQ2PS    Y7, Y7
	VMULSS       (DX)(R11*1), X12, X11
	VBROADCASTSS X11, Y11
	VFMADD231PS  Y11, Y7, Y19
	ADDQ $34, DI
	ADDQ $32, SI
	ADDQ $4, DX
	DECQ CX
	JNZ  loop

	MOVQ out+48(FP), DX
	VMOVAPS Y16, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, 0(DX)
	VMOVAPS Y17, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, 4(DX)
	VMOVAPS Y18, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, 8(DX)
	VMOVAPS Y19, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS  X0, 12(DX)
	VZEROUPPER
	RET
DATA ggQ4KIdx<>+0(SB)/8, $0x0
DATA ggQ4KIdx<>+8(SB)/8, $0x0
DATA ggQ4KIdx<>+16(SB)/8, $0x0
DATA ggQ4KIdx<>+24(SB)/8, $0x0
DATA ggQ4KIdx<>+32(SB)/8, $0x100000001
DATA ggQ4KIdx<>+40(SB)/8, $0x100000001
DATA ggQ4KIdx<>+48(SB)/8, $0x100000001
DATA ggQ4KIdx<>+56(SB)/8, $0x100000001
DATA ggQ4KIdx<>+64(SB)/8, $0x200000002
DATA ggQ4KIdx<>+72(SB)/8, $0x200000002
DATA ggQ4KIdx<>+80(SB)/8, $0x200000002
DATA ggQ4KIdx<>+88(SB)/8, $0x200000002
DATA ggQ4KIdx<>+96(SB)/8, $0x300000003
DATA ggQ4KIdx<>+104(SB)/8, $0x300000003
DATA ggQ4KIdx<>+112(SB)/8, $0x300000003
DATA ggQ4KIdx<>+120(SB)/8, $0x300000003
DATA ggQ4KIdx<>+128(SB)/8, $0x400000004
DATA ggQ4KIdx<>+136(SB)/8, $0x400000004
DATA ggQ4KIdx<>+144(SB)/8, $0x400000004
DATA ggQ4KIdx<>+152(SB)/8, $0x400000004
DATA ggQ4KIdx<>+160(SB)/8, $0x500000005
DATA ggQ4KIdx<>+168(SB)/8, $0x500000005
DATA ggQ4KIdx<>+176(SB)/8, $0x500000005
DATA ggQ4KIdx<>+184(SB)/8, $0x500000005
DATA ggQ4KIdx<>+192(SB)/8, $0x600000006
DATA ggQ4KIdx<>+200(SB)/8, $0x600000006
DATA ggQ4KIdx<>+208(SB)/8, $0x600000006
DATA ggQ4KIdx<>+216(SB)/8, $0x600000006
DATA ggQ4KIdx<>+224(SB)/8, $0x700000007
DATA ggQ4KIdx<>+232(SB)/8, $0x700000007
DATA ggQ4KIdx<>+240(SB)/8, $0x700000007
DATA ggQ4KIdx<>+248(SB)/8, $0x700000007
GLOBL ggQ4KIdx<>(SB), RODATA|NOPTR, $256

// Q4KSCALES reads super-block DI's d, dmin and 6-bit scales and mins:
// Y1 = d·sc_j·xd_j for its 8 blocks, and Y13 += dmin·m_j·xs_j.
#define Q4KSCALES \
	Q4KUNPACK; \
	VPMOVZXBD   X1, Y1; \
	VCVTDQ2PS   Y1, Y1; \
	VMULPS      (DX), Y1, Y1; \
	VMULPS      Y10, Y1, Y1; \
	VPMOVZXBD   X2, Y2; \
	VCVTDQ2PS   Y2, Y2; \
	VMULPS      (BX), Y2, Y2; \
	VFMADD231PS Y11, Y2, Y13

// func q4KAVX512(xq *int8, xd, xs *float32, w *byte, nsb int) float32
// q4KAVX2 with both nibble halves of a 64-element chunk in one Z
// register: lanes 0-7 carry the AVX2 kernel's low-nibble accumulator and
// lanes 8-15 its high-nibble one, with the same products and order, so
// the result is bit-identical to q4KAVX2.
TEXT ·q4KAVX512(SB), NOSPLIT, $0-44
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         xs+16(FP), BX
	MOVQ         w+24(FP), DI
	MOVQ         nsb+32(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Z15
	VPBROADCASTB ggLow4<>(SB), Z14
	VMOVDQU32    ggQ4KIdx<>+0(SB), Z16
	VMOVDQU32    ggQ4KIdx<>+64(SB), Z17
	VMOVDQU32    ggQ4KIdx<>+128(SB), Z18
	VMOVDQU32    ggQ4KIdx<>+192(SB), Z19
	VPXORD       Z0, Z0, Z0
	VXORPS       Y13, Y13, Y13

loop:
	Q4KSCALES

	VMOVDQU      16(DI), Y3
	VPSRLW       $4, Y3, Y4
	VINSERTI64X4 $1, Y4, Z3, Z3
	VPANDD       Z14, Z3, Z3
	VPMADDUBSW   0(SI), Z3, Z3
	VPMADDWD     Z15, Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VPERMPS      Z1, Z16, Z5
	VFMADD231PS  Z5, Z3, Z0
	VMOVDQU      48(DI), Y3
	VPSRLW       $4, Y3, Y4
	VINSERTI64X4 $1, Y4, Z3, Z3
	VPANDD       Z14, Z3, Z3
	VPMADDUBSW   64(SI), Z3, Z3
	VPMADDWD     Z15, Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VPERMPS      Z1, Z17, Z5
	VFMADD231PS  Z5, Z3, Z0
	VMOVDQU      80(DI), Y3
	VPSRLW       $4, Y3, Y4
	VINSERTI64X4 $1, Y4, Z3, Z3
	VPANDD       Z14, Z3, Z3
	VPMADDUBSW   128(SI), Z3, Z3
	VPMADDWD     Z15, Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VPERMPS      Z1, Z18, Z5
	VFMADD231PS  Z5, Z3, Z0
	VMOVDQU      112(DI), Y3
	VPSRLW       $4, Y3, Y4
	VINSERTI64X4 $1, Y4, Z3, Z3
	VPANDD       Z14, Z3, Z3
	VPMADDUBSW   192(SI), Z3, Z3
	VPMADDWD     Z15, Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VPERMPS      Z1, Z19, Z5
	VFMADD231PS  Z5, Z3, Z0

	ADDQ $144, DI
	ADDQ $256, SI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  loop

	VEXTRACTF64X4 $1, Z0, Y12
	VADDPS Y12, Y0, Y0
	VSUBPS Y13, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+40(FP)
	VZEROUPPER
	RET

// func q4KRowsAVX512VNNI(xq *int8, xd, xs *float32, w *byte, nsb, nrows int, dst *float32)
// dst[r] = the product of the activation row with weight row r of nrows
// consecutive rows of nsb super-blocks at w: q4KAVX512 with VPDPBUSD for
// VPMADDUBSW+VPMADDWD (the same exact int32 sums of 4 byte products per
// lane) and one 64-byte load for the nibbles of two 64-element chunks, so
// each result is bit-identical to q4KAVX512. Looping over the rows here
// saves a Go call per row, which cost a tenth of a decode step.
TEXT ·q4KRowsAVX512VNNI(SB), NOSPLIT, $0-56
	MOVQ         w+24(FP), DI
	MOVQ         nrows+40(FP), R12
	MOVQ         dst+48(FP), R13
	VPBROADCASTB ggLow4<>(SB), Z14
	VMOVDQU32    ggQ4KIdx<>+0(SB), Z16
	VMOVDQU32    ggQ4KIdx<>+64(SB), Z17
	VMOVDQU32    ggQ4KIdx<>+128(SB), Z18
	VMOVDQU32    ggQ4KIdx<>+192(SB), Z19

vrow:
	MOVQ   xq+0(FP), SI
	MOVQ   xd+8(FP), DX
	MOVQ   xs+16(FP), BX
	MOVQ   nsb+32(FP), CX
	VPXORD Z0, Z0, Z0
	VXORPS Y13, Y13, Y13

vloop:
	Q4KSCALES

	// Chunks 0 and 1: Z5 = [low | high nibbles of chunk 0], Z6 chunk 1.
	VMOVDQU64   16(DI), Z3
	VPSRLW      $4, Z3, Z4
	VPANDD      Z14, Z3, Z3
	VPANDD      Z14, Z4, Z4
	VSHUFI64X2  $0x44, Z4, Z3, Z5
	VSHUFI64X2  $0xEE, Z4, Z3, Z6
	VPXORD      Z7, Z7, Z7
	VPDPBUSD    0(SI), Z5, Z7
	VPXORD      Z8, Z8, Z8
	VPDPBUSD    64(SI), Z6, Z8
	VCVTDQ2PS   Z7, Z7
	VPERMPS     Z1, Z16, Z9
	VFMADD231PS Z9, Z7, Z0
	VCVTDQ2PS   Z8, Z8
	VPERMPS     Z1, Z17, Z9
	VFMADD231PS Z9, Z8, Z0

	// Chunks 2 and 3.
	VMOVDQU64   80(DI), Z3
	VPSRLW      $4, Z3, Z4
	VPANDD      Z14, Z3, Z3
	VPANDD      Z14, Z4, Z4
	VSHUFI64X2  $0x44, Z4, Z3, Z5
	VSHUFI64X2  $0xEE, Z4, Z3, Z6
	VPXORD      Z7, Z7, Z7
	VPDPBUSD    128(SI), Z5, Z7
	VPXORD      Z8, Z8, Z8
	VPDPBUSD    192(SI), Z6, Z8
	VCVTDQ2PS   Z7, Z7
	VPERMPS     Z1, Z18, Z9
	VFMADD231PS Z9, Z7, Z0
	VCVTDQ2PS   Z8, Z8
	VPERMPS     Z1, Z19, Z9
	VFMADD231PS Z9, Z8, Z0

	ADDQ $144, DI
	ADDQ $256, SI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  vloop

	VEXTRACTF64X4 $1, Z0, Y12
	VADDPS Y12, Y0, Y0
	VSUBPS Y13, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, (R13)
	ADDQ   $4, R13
	DECQ   R12
	JNZ    vrow
	VZEROUPPER
	RET

// func q4Kx4RowsAVX512VNNI(xq *int8, qstride int, xd, xs *float32, dstride int, w *byte, nsb, nrows int, dst *float32, ostride int)
// q4Kx4AVX512 with VPDPBUSD for VPMADDUBSW+VPMADDWD (the same exact int32
// sums of 4 byte products per lane), so it is bit-identical to it, for
// nrows consecutive weight rows at w in one call: the result of
// activation row j and weight row r goes to dst + j·ostride + 4·r bytes.
// A prompt's product made a Go call per weight row and group of 4
// activation rows.
TEXT ·q4Kx4RowsAVX512VNNI(SB), NOSPLIT, $0-80
	MOVQ qstride+8(FP), R13
	MOVQ dstride+32(FP), R12
	MOVQ w+40(FP), DI
	MOVQ nrows+56(FP), R15
	MOVQ dst+64(FP), R14

vrow4:
	MOVQ xq+0(FP), SI
	MOVQ xd+16(FP), DX
	MOVQ xs+24(FP), BX
	MOVQ nsb+48(FP), CX
	Q4KX4SETUP

vloop4:
	Q4KX4STEP(Q4KDOT_VNNI)
	JNZ  vloop4
	MOVQ ostride+72(FP), DX
	LEAQ (DX)(DX*2), BX
	Q4KX4ROWOUT(Z20, Y24, (R14))
	Q4KX4ROWOUT(Z21, Y25, (R14)(DX*1))
	Q4KX4ROWOUT(Z22, Y26, (R14)(DX*2))
	Q4KX4ROWOUT(Z23, Y27, (R14)(BX*1))
	ADDQ $4, R14
	DECQ R15
	JNZ  vrow4
	VZEROUPPER
	RET

DATA ggBit4<>+0(SB)/1, $0x10
GLOBL ggBit4<>(SB), RODATA|NOPTR, $1

DATA ggBit2<>+0(SB)/1, $0x04
GLOBL ggBit2<>(SB), RODATA|NOPTR, $1

DATA ggLow2<>+0(SB)/1, $0x03
GLOBL ggLow2<>(SB), RODATA|NOPTR, $1

// Q5KCHUNK is Q4KCHUNK for Q5_K: the nibbles at wo(DI) get their fifth
// bits from qh (Y5) bits sh and sh+1 (sh = 2j; Y9 = 0x10 bytes). The
// 5-bit codes are unsigned and at most 31, so vpmaddubsw cannot saturate
// (2·31·127 < 2¹⁵).
#define Q5KCHUNK(wo, sh, xo0, xo1, fo0, fo1) \
	VMOVDQU      wo(DI), Y1; \
	VPSRLW       $4, Y1, Y2; \
	VPAND        Y14, Y1, Y1; \
	VPAND        Y14, Y2, Y2; \
	VPSRLW       $sh, Y5, Y6; \
	VPSLLW       $4, Y6, Y7; \
	VPSLLW       $3, Y6, Y6; \
	VPAND        Y9, Y7, Y7; \
	VPAND        Y9, Y6, Y6; \
	VPOR         Y7, Y1, Y1; \
	VPOR         Y6, Y2, Y2; \
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

// func q5KAVX2(xq *int8, xd, xs *float32, w *byte, nsb int) float32
// q4KAVX2 for Q5_K: the same d, dmin, scales and mins, qh at 16, the
// nibbles at 48, 176 bytes a super-block.
// Stack: 0..31 per-sub-block factors.
TEXT ·q5KAVX2(SB), NOSPLIT, $32-44
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         xs+16(FP), BX
	MOVQ         w+24(FP), DI
	MOVQ         nsb+32(FP), CX
	VPBROADCASTW ggOnes16<>(SB), Y15
	VPBROADCASTB ggLow4<>(SB), Y14
	VPBROADCASTB ggBit4<>(SB), Y9
	VXORPS       Y0, Y0, Y0
	VXORPS       Y12, Y12, Y12
	VXORPS       Y13, Y13, Y13

q5loop:
	Q4KUNPACK

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

	VMOVDQU 16(DI), Y5
	Q5KCHUNK(48, 0, 0, 32, 0, 4)
	Q5KCHUNK(80, 2, 64, 96, 8, 12)
	Q5KCHUNK(112, 4, 128, 160, 16, 20)
	Q5KCHUNK(144, 6, 192, 224, 24, 28)

	ADDQ $176, DI
	ADDQ $256, SI
	ADDQ $32, DX
	ADDQ $32, BX
	DECQ CX
	JNZ  q5loop

	VADDPS Y12, Y0, Y0
	VSUBPS Y13, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+40(FP)
	VZEROUPPER
	RET

// Q3KBLOCK multiplies 32-element block j = 4·half + k of a Q3_K
// super-block with the activations at xo(SI): codes (Y3 >> 2k) & 3 from
// the half's 32 qs bytes (Y3), plus 4 where hmask (Y5) bit j is set, so
// c = q + 4 in 0..7; Σ c·x − 4·Σ x per pair (Y12 = 4 bytes) is Σ q·x,
// weighted per 16 by the int16 scales shuffled from Y6 (ggQ6Shuf+so) and
// added to Y0 times d·d_x (fo(SP)).
#define Q3KBLOCK(k, j, xo, so, fo) \
	VPSRLW       $(2*k), Y3, Y7; \
	VPAND        Y14, Y7, Y7; \
	VPSRLW       $j, Y5, Y8; \
	VPSLLW       $2, Y8, Y8; \
	VPAND        Y13, Y8, Y8; \
	VPOR         Y8, Y7, Y7; \
	VMOVDQU      xo(SI), Y9; \
	VPMADDUBSW   Y9, Y7, Y10; \
	VPMADDUBSW   Y9, Y12, Y11; \
	VPSUBW       Y11, Y10, Y10; \
	VPSHUFB      ggQ6Shuf<>+so(SB), Y6, Y11; \
	VPMADDWD     Y11, Y10, Y10; \
	VCVTDQ2PS    Y10, Y10; \
	VBROADCASTSS fo(SP), Y11; \
	VFMADD231PS  Y11, Y10, Y0

// func q3KAVX2(xq *int8, xd *float32, w *byte, nsb int) float32
// Stack: 0..31 factors d·d_x for the 8 blocks of 32 of a super-block.
TEXT ·q3KAVX2(SB), NOSPLIT, $32-36
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         w+16(FP), DI
	MOVQ         nsb+24(FP), CX
	VPBROADCASTB ggLow2<>(SB), Y14
	VPBROADCASTB ggBit2<>(SB), Y13
	VPBROADCASTB ggBit2<>(SB), Y12
	VPBROADCASTB ggThirtyTwo<>(SB), Y15
	VXORPS       Y0, Y0, Y0

q3loop:
	F16SCALAR(108(DI), X2)
	VBROADCASTSS X2, Y2
	VMULPS       (DX), Y2, Y2
	VMOVUPS      Y2, 0(SP)

	// The sixteen 6-bit scales: low nibbles of bytes 96-103 (scales 0-7
	// low, 8-15 high), bits 2·(j/4) of byte 104 + j%4 on top.
	MOVQ  96(DI), R8
	MOVQ  R8, R9
	SHRQ  $4, R9
	MOVQ  $0x0f0f0f0f0f0f0f0f, AX
	ANDQ  AX, R8
	ANDQ  AX, R9
	MOVL  104(DI), R10
	MOVL  R10, AX
	ANDL  $0x03030303, AX
	MOVL  R10, R11
	SHRL  $2, R11
	ANDL  $0x03030303, R11
	SHLQ  $32, R11
	ORQ   R11, AX
	SHLQ  $4, AX
	ORQ   AX, R8
	MOVL  R10, AX
	SHRL  $4, AX
	ANDL  $0x03030303, AX
	MOVL  R10, R11
	SHRL  $6, R11
	ANDL  $0x03030303, R11
	SHLQ  $32, R11
	ORQ   R11, AX
	SHLQ  $4, AX
	ORQ   AX, R9
	VMOVQ R8, X4
	VMOVQ R9, X1
	VPSUBB X15, X4, X4
	VPSUBB X15, X1, X1

	VMOVDQU 0(DI), Y5

	VMOVDQU     32(DI), Y3
	VPMOVSXBW   X4, X6
	VINSERTI128 $1, X6, Y6, Y6
	Q3KBLOCK(0, 0, 0, 0, 0)
	Q3KBLOCK(1, 1, 32, 32, 4)
	Q3KBLOCK(2, 2, 64, 64, 8)
	Q3KBLOCK(3, 3, 96, 96, 12)

	VMOVDQU     64(DI), Y3
	VPMOVSXBW   X1, X6
	VINSERTI128 $1, X6, Y6, Y6
	Q3KBLOCK(0, 4, 128, 0, 16)
	Q3KBLOCK(1, 5, 160, 32, 20)
	Q3KBLOCK(2, 6, 192, 64, 24)
	Q3KBLOCK(3, 7, 224, 96, 28)

	ADDQ $110, DI
	ADDQ $256, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  q3loop

	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET

// Q2KBLOCK multiplies 32-element block k of a half of a Q2_K
// super-block with the activations at xo(SI): codes (Y3 >> 2k) & 3 (Y14 =
// 3 bytes), the pair sums weighted per 16 by the scales (Y6) and, for the
// mins, the activations' pair sums (Y12 = 1 bytes) by the mins (Y4), both
// shuffled by ggQ6Shuf+so; Y0 += d·d_x·(scaled sums) from fo(SP), Y1 +=
// dmin·d_x·(min sums) from fm(SP).
#define Q2KBLOCK(k, xo, so, fo, fm) \
	VPSRLW       $(2*k), Y3, Y7; \
	VPAND        Y14, Y7, Y7; \
	VMOVDQU      xo(SI), Y9; \
	VPMADDUBSW   Y9, Y7, Y10; \
	VPMADDUBSW   Y9, Y12, Y11; \
	VPSHUFB      ggQ6Shuf<>+so(SB), Y6, Y8; \
	VPMADDWD     Y8, Y10, Y10; \
	VPSHUFB      ggQ6Shuf<>+so(SB), Y4, Y8; \
	VPMADDWD     Y8, Y11, Y11; \
	VCVTDQ2PS    Y10, Y10; \
	VCVTDQ2PS    Y11, Y11; \
	VBROADCASTSS fo(SP), Y8; \
	VFMADD231PS  Y8, Y10, Y0; \
	VBROADCASTSS fm(SP), Y8; \
	VFMADD231PS  Y8, Y11, Y1

// Q2KHALF loads the half's 32 code bytes (qo(DI)) and widens the 8
// scales and mins of its 4 blocks (the low 8 bytes of xs and xm) to
// int16 in both lanes of Y6 and Y4.
#define Q2KHALF(qo, xs, xm) \
	VMOVDQU     qo(DI), Y3; \
	VPMOVZXBW   xs, X6; \
	VINSERTI128 $1, X6, Y6, Y6; \
	VPMOVZXBW   xm, X4; \
	VINSERTI128 $1, X4, Y4, Y4

// func q2KAVX2(xq *int8, xd *float32, w *byte, nsb int) float32
// Stack: 0..31 factors d·d_x, 32..63 dmin·d_x for the 8 blocks of 32 of
// a super-block.
TEXT ·q2KAVX2(SB), NOSPLIT, $64-36
	MOVQ         xq+0(FP), SI
	MOVQ         xd+8(FP), DX
	MOVQ         w+16(FP), DI
	MOVQ         nsb+24(FP), CX
	VPBROADCASTB ggLow2<>(SB), Y14
	VPBROADCASTB ggLow4<>(SB), Y13
	VPBROADCASTB ggOnes16<>(SB), Y12
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

q2loop:
	F16SCALAR(80(DI), X2)
	VBROADCASTSS X2, Y2
	VMULPS       (DX), Y2, Y2
	VMOVUPS      Y2, 0(SP)
	F16SCALAR(82(DI), X2)
	VBROADCASTSS X2, Y2
	VMULPS       (DX), Y2, Y2
	VMOVUPS      Y2, 32(SP)

	// Scales (low nibbles) in X15, mins (high nibbles) in X5.
	VMOVDQU (DI), X2
	VPAND   X13, X2, X15
	VPSRLW  $4, X2, X5
	VPAND   X13, X5, X5

	Q2KHALF(16, X15, X5)
	Q2KBLOCK(0, 0, 0, 0, 32)
	Q2KBLOCK(1, 32, 32, 4, 36)
	Q2KBLOCK(2, 64, 64, 8, 40)
	Q2KBLOCK(3, 96, 96, 12, 44)

	VPSRLDQ $8, X15, X15
	VPSRLDQ $8, X5, X5
	Q2KHALF(48, X15, X5)
	Q2KBLOCK(0, 128, 0, 16, 48)
	Q2KBLOCK(1, 160, 32, 20, 52)
	Q2KBLOCK(2, 192, 64, 24, 56)
	Q2KBLOCK(3, 224, 96, 28, 60)

	ADDQ $84, DI
	ADDQ $256, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  q2loop

	VSUBPS Y1, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+32(FP)
	VZEROUPPER
	RET
