//go:build amd64 && !purego

#include "textflag.h"
#include "asm_amd64.h"

// Shift counts putting code k of a 4-bit word into lane k.
DATA mlxShift4<>+0(SB)/4, $0
DATA mlxShift4<>+4(SB)/4, $4
DATA mlxShift4<>+8(SB)/4, $8
DATA mlxShift4<>+12(SB)/4, $12
DATA mlxShift4<>+16(SB)/4, $16
DATA mlxShift4<>+20(SB)/4, $20
DATA mlxShift4<>+24(SB)/4, $24
DATA mlxShift4<>+28(SB)/4, $28
GLOBL mlxShift4<>(SB), RODATA|NOPTR, $32

DATA mlxMask4<>+0(SB)/4, $15
GLOBL mlxMask4<>(SB), RODATA|NOPTR, $4

// The floats 0..15: a 4-bit code is its own index into this table.
DATA mlxLUT4<>+0(SB)/4, $0.0
DATA mlxLUT4<>+4(SB)/4, $1.0
DATA mlxLUT4<>+8(SB)/4, $2.0
DATA mlxLUT4<>+12(SB)/4, $3.0
DATA mlxLUT4<>+16(SB)/4, $4.0
DATA mlxLUT4<>+20(SB)/4, $5.0
DATA mlxLUT4<>+24(SB)/4, $6.0
DATA mlxLUT4<>+28(SB)/4, $7.0
DATA mlxLUT4<>+32(SB)/4, $8.0
DATA mlxLUT4<>+36(SB)/4, $9.0
DATA mlxLUT4<>+40(SB)/4, $10.0
DATA mlxLUT4<>+44(SB)/4, $11.0
DATA mlxLUT4<>+48(SB)/4, $12.0
DATA mlxLUT4<>+52(SB)/4, $13.0
DATA mlxLUT4<>+56(SB)/4, $14.0
DATA mlxLUT4<>+60(SB)/4, $15.0
GLOBL mlxLUT4<>(SB), RODATA|NOPTR, $64

// Indices spreading 4 consecutive scales over the 16 words of a
// 128-element chunk, for group sizes 32, 64 and 128.
DATA mlxIdx<>+0(SB)/8, $0x0000000000000000
DATA mlxIdx<>+8(SB)/8, $0x0000000000000000
DATA mlxIdx<>+16(SB)/8, $0x0000000100000001
DATA mlxIdx<>+24(SB)/8, $0x0000000100000001
DATA mlxIdx<>+32(SB)/8, $0x0000000200000002
DATA mlxIdx<>+40(SB)/8, $0x0000000200000002
DATA mlxIdx<>+48(SB)/8, $0x0000000300000003
DATA mlxIdx<>+56(SB)/8, $0x0000000300000003
DATA mlxIdx<>+64(SB)/8, $0x0000000000000000
DATA mlxIdx<>+72(SB)/8, $0x0000000000000000
DATA mlxIdx<>+80(SB)/8, $0x0000000000000000
DATA mlxIdx<>+88(SB)/8, $0x0000000000000000
DATA mlxIdx<>+96(SB)/8, $0x0000000100000001
DATA mlxIdx<>+104(SB)/8, $0x0000000100000001
DATA mlxIdx<>+112(SB)/8, $0x0000000100000001
DATA mlxIdx<>+120(SB)/8, $0x0000000100000001
DATA mlxIdx<>+128(SB)/8, $0
DATA mlxIdx<>+136(SB)/8, $0
DATA mlxIdx<>+144(SB)/8, $0
DATA mlxIdx<>+152(SB)/8, $0
DATA mlxIdx<>+160(SB)/8, $0
DATA mlxIdx<>+168(SB)/8, $0
DATA mlxIdx<>+176(SB)/8, $0
DATA mlxIdx<>+184(SB)/8, $0
GLOBL mlxIdx<>(SB), RODATA|NOPTR, $192

// MLXBIAS adds b[g]·xsum[g] (at R8, R9) to X13 and advances both.
#define MLXBIAS \
	VMOVSS      (R8), X3; \
	VFMADD231SS (R9), X3, X13; \
	ADDQ        $4, R8; \
	ADDQ        $4, R9

// func mlx4AVX2(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32
// Σ_g (s[g]·Σ_{i∈g} x[i]·q[i] + b[g]·xsum[g]); group is 32, 64 or 128.
TEXT ·mlx4AVX2(SB), NOSPLIT, $0-60
	MOVQ         x+0(FP), SI
	MOVQ         w+8(FP), DI
	MOVQ         s+16(FP), DX
	MOVQ         b+24(FP), R8
	MOVQ         xsum+32(FP), R9
	MOVQ         ngroups+40(FP), CX
	MOVQ         group+48(FP), BX
	SHRQ         $5, BX
	VMOVDQU      mlxShift4<>(SB), Y15
	VPBROADCASTD mlxMask4<>(SB), Y14
	VXORPS       Y0, Y0, Y0
	VXORPS       Y13, Y13, Y13

group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	MOVQ   BX, AX

step:
	VPBROADCASTD (DI), Y3
	VPBROADCASTD 4(DI), Y4
	VPBROADCASTD 8(DI), Y5
	VPBROADCASTD 12(DI), Y6
	VPSRLVD      Y15, Y3, Y3
	VPSRLVD      Y15, Y4, Y4
	VPSRLVD      Y15, Y5, Y5
	VPSRLVD      Y15, Y6, Y6
	VPAND        Y14, Y3, Y3
	VPAND        Y14, Y4, Y4
	VPAND        Y14, Y5, Y5
	VPAND        Y14, Y6, Y6
	VCVTDQ2PS    Y3, Y3
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VFMADD231PS  (SI), Y3, Y1
	VFMADD231PS  32(SI), Y4, Y2
	VFMADD231PS  64(SI), Y5, Y1
	VFMADD231PS  96(SI), Y6, Y2
	ADDQ         $16, DI
	ADDQ         $128, SI
	DECQ         AX
	JNZ          step

	VADDPS       Y2, Y1, Y1
	VBROADCASTSS (DX), Y3
	VFMADD231PS  Y3, Y1, Y0
	ADDQ         $4, DX
	MLXBIAS
	DECQ         CX
	JNZ          group

	HSUMY(Y0, X0, X1)
	VADDSS X13, X0, X0
	VMOVSS X0, ret+56(FP)
	VZEROUPPER
	RET

// func mlx8AVX2(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32
TEXT ·mlx8AVX2(SB), NOSPLIT, $0-60
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   s+16(FP), DX
	MOVQ   b+24(FP), R8
	MOVQ   xsum+32(FP), R9
	MOVQ   ngroups+40(FP), CX
	MOVQ   group+48(FP), BX
	SHRQ   $5, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y13, Y13, Y13

group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	MOVQ   BX, AX

step:
	VPMOVZXBD   (DI), Y3
	VPMOVZXBD   8(DI), Y4
	VPMOVZXBD   16(DI), Y5
	VPMOVZXBD   24(DI), Y6
	VCVTDQ2PS   Y3, Y3
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VCVTDQ2PS   Y6, Y6
	VFMADD231PS (SI), Y3, Y1
	VFMADD231PS 32(SI), Y4, Y2
	VFMADD231PS 64(SI), Y5, Y1
	VFMADD231PS 96(SI), Y6, Y2
	ADDQ        $32, DI
	ADDQ        $128, SI
	DECQ        AX
	JNZ         step

	VADDPS       Y2, Y1, Y1
	VBROADCASTSS (DX), Y3
	VFMADD231PS  Y3, Y1, Y0
	ADDQ         $4, DX
	MLXBIAS
	DECQ         CX
	JNZ          group

	HSUMY(Y0, X0, X1)
	VADDSS X13, X0, X0
	VMOVSS X0, ret+56(FP)
	VZEROUPPER
	RET

// MLX4CODE multiplies code k of the 16 words in Z1 (shifted by sh) with
// the 16 permuted activations at off(SI) into accumulator acc.
#define MLX4CODE(sh, off, acc) \
	VPSRLD      $sh, Z1, Z2; \
	VPERMPS     Z15, Z2, Z2; \
	VFMADD231PS off(SI), Z2, acc

// func mlx4AVX512(xp *float32, w *byte, s, b, xsum *float32, gsel, nchunks int) float32
// The 4-bit row over full 128-element chunks, with xp laid out as
// mlxPermute does; gsel is 0, 1, 2 for group sizes 32, 64, 128. Each chunk
// reads 4 floats of s (the caller pads s) and spreads them over the 16
// words with the mlxIdx indices; then the bias terms of all those groups
// are added.
TEXT ·mlx4AVX512(SB), NOSPLIT, $0-60
	MOVQ      xp+0(FP), SI
	MOVQ      w+8(FP), DI
	MOVQ      s+16(FP), DX
	MOVQ      b+24(FP), R8
	MOVQ      xsum+32(FP), R9
	MOVQ      gsel+40(FP), CX
	MOVQ      CX, R10
	SHLQ      $6, R10
	LEAQ      mlxIdx<>(SB), R11
	VMOVDQU32 (R11)(R10*1), Z14
	MOVQ      $16, BX
	SHRQ      CX, BX               // scale bytes per chunk
	MOVQ      $4, R12
	SHRQ      CX, R12              // groups per chunk
	MOVQ      nchunks+48(FP), CX
	IMULQ     CX, R12              // groups in all
	VMOVUPS   mlxLUT4<>(SB), Z15
	VXORPS    Z0, Z0, Z0
	VXORPS    X13, X13, X13

chunk:
	VMOVDQU32 (DI), Z1
	VPERMPS   Z15, Z1, Z2
	VMULPS    (SI), Z2, Z8
	VPSRLD    $4, Z1, Z3
	VPERMPS   Z15, Z3, Z3
	VMULPS    64(SI), Z3, Z9
	MLX4CODE(8, 128, Z8)
	MLX4CODE(12, 192, Z9)
	MLX4CODE(16, 256, Z8)
	MLX4CODE(20, 320, Z9)
	MLX4CODE(24, 384, Z8)
	MLX4CODE(28, 448, Z9)
	VADDPS      Z9, Z8, Z8
	VMOVUPS     (DX), X4
	VPERMPS     Z4, Z14, Z4
	VFMADD231PS Z4, Z8, Z0
	ADDQ        $64, DI
	ADDQ        $512, SI
	ADDQ        BX, DX
	DECQ        CX
	JNZ         chunk

bias:
	MLXBIAS
	DECQ R12
	JNZ  bias

	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS X13, X0, X0
	VMOVSS X0, ret+56(FP)
	VZEROUPPER
	RET

// func mlx8AVX512(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32
TEXT ·mlx8AVX512(SB), NOSPLIT, $0-60
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   s+16(FP), DX
	MOVQ   b+24(FP), R8
	MOVQ   xsum+32(FP), R9
	MOVQ   ngroups+40(FP), CX
	MOVQ   group+48(FP), BX
	SHRQ   $5, BX
	VXORPS Z0, Z0, Z0
	VXORPS X13, X13, X13

group:
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	MOVQ   BX, AX

step:
	VPMOVZXBD   (DI), Z3
	VPMOVZXBD   16(DI), Z4
	VCVTDQ2PS   Z3, Z3
	VCVTDQ2PS   Z4, Z4
	VFMADD231PS (SI), Z3, Z1
	VFMADD231PS 64(SI), Z4, Z2
	ADDQ        $32, DI
	ADDQ        $128, SI
	DECQ        AX
	JNZ         step

	VADDPS       Z2, Z1, Z1
	VBROADCASTSS (DX), Z3
	VFMADD231PS  Z3, Z1, Z0
	ADDQ         $4, DX
	MLXBIAS
	DECQ         CX
	JNZ          group

	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS X13, X0, X0
	VMOVSS X0, ret+56(FP)
	VZEROUPPER
	RET

// func mlx4x4AVX512(xp *float32, xstride int, w *byte, s, b, xsum *float32, sstride, gsel, nchunks int, out *float32)
// mlx4AVX512 of one weight row against 4 permuted activation rows xp +
// r·xstride (bytes) with sums xsum + r·sstride (bytes): the codes of each
// chunk are decoded once for the 4 rows, and every row keeps the one-row
// kernel's accumulators and summation order, so out[r] is bit-identical
// to it.
TEXT ·mlx4x4AVX512(SB), NOSPLIT, $0-80
	MOVQ      gsel+56(FP), CX
	MOVQ      CX, R10
	SHLQ      $6, R10
	LEAQ      mlxIdx<>(SB), R11
	VMOVDQU32 (R11)(R10*1), Z14
	MOVQ      $16, BX
	SHRQ      CX, BX               // scale bytes per chunk
	MOVQ      $4, R12
	SHRQ      CX, R12              // groups per chunk
	MOVQ      nchunks+64(FP), CX
	IMULQ     CX, R12              // groups in all
	MOVQ      xp+0(FP), SI
	MOVQ      xstride+8(FP), R13
	LEAQ      (R13)(R13*2), AX
	MOVQ      w+16(FP), DI
	MOVQ      s+24(FP), DX
	VMOVUPS   mlxLUT4<>(SB), Z15
	VPXORD    Z0, Z0, Z0
	VPXORD    Z1, Z1, Z1
	VPXORD    Z2, Z2, Z2
	VPXORD    Z3, Z3, Z3

chunk:
	VMOVDQU32 (DI), Z13
	VPERMPS   Z15, Z13, Z16
	VPSRLD    $4, Z13, Z17
	VPERMPS   Z15, Z17, Z17
	VPSRLD    $8, Z13, Z18
	VPERMPS   Z15, Z18, Z18
	VPSRLD    $12, Z13, Z19
	VPERMPS   Z15, Z19, Z19
	VPSRLD    $16, Z13, Z20
	VPERMPS   Z15, Z20, Z20
	VPSRLD    $20, Z13, Z21
	VPERMPS   Z15, Z21, Z21
	VPSRLD    $24, Z13, Z22
	VPERMPS   Z15, Z22, Z22
	VPSRLD    $28, Z13, Z23
	VPERMPS   Z15, Z23, Z23
	VMOVUPS   (DX), X12
	VPERMPS   Z12, Z14, Z12
	VMULPS      (SI), Z16, Z4
	VMULPS      64(SI), Z17, Z5
	VFMADD231PS 128(SI), Z18, Z4
	VFMADD231PS 192(SI), Z19, Z5
	VFMADD231PS 256(SI), Z20, Z4
	VFMADD231PS 320(SI), Z21, Z5
	VFMADD231PS 384(SI), Z22, Z4
	VFMADD231PS 448(SI), Z23, Z5
	VADDPS      Z5, Z4, Z4
	VFMADD231PS Z12, Z4, Z0
	VMULPS      (SI)(R13*1), Z16, Z6
	VMULPS      64(SI)(R13*1), Z17, Z7
	VFMADD231PS 128(SI)(R13*1), Z18, Z6
	VFMADD231PS 192(SI)(R13*1), Z19, Z7
	VFMADD231PS 256(SI)(R13*1), Z20, Z6
	VFMADD231PS 320(SI)(R13*1), Z21, Z7
	VFMADD231PS 384(SI)(R13*1), Z22, Z6
	VFMADD231PS 448(SI)(R13*1), Z23, Z7
	VADDPS      Z7, Z6, Z6
	VFMADD231PS Z12, Z6, Z1
	VMULPS      (SI)(R13*2), Z16, Z8
	VMULPS      64(SI)(R13*2), Z17, Z9
	VFMADD231PS 128(SI)(R13*2), Z18, Z8
	VFMADD231PS 192(SI)(R13*2), Z19, Z9
	VFMADD231PS 256(SI)(R13*2), Z20, Z8
	VFMADD231PS 320(SI)(R13*2), Z21, Z9
	VFMADD231PS 384(SI)(R13*2), Z22, Z8
	VFMADD231PS 448(SI)(R13*2), Z23, Z9
	VADDPS      Z9, Z8, Z8
	VFMADD231PS Z12, Z8, Z2
	VMULPS      (SI)(AX*1), Z16, Z10
	VMULPS      64(SI)(AX*1), Z17, Z11
	VFMADD231PS 128(SI)(AX*1), Z18, Z10
	VFMADD231PS 192(SI)(AX*1), Z19, Z11
	VFMADD231PS 256(SI)(AX*1), Z20, Z10
	VFMADD231PS 320(SI)(AX*1), Z21, Z11
	VFMADD231PS 384(SI)(AX*1), Z22, Z10
	VFMADD231PS 448(SI)(AX*1), Z23, Z11
	VADDPS      Z11, Z10, Z10
	VFMADD231PS Z12, Z10, Z3
	ADDQ        $64, DI
	ADDQ        $512, SI
	ADDQ        BX, DX
	DECQ        CX
	JNZ         chunk

	MOVQ   b+32(FP), R8
	MOVQ   xsum+40(FP), R9
	MOVQ   sstride+48(FP), R10
	LEAQ   (R10)(R10*2), R11
	VXORPS X4, X4, X4
	VXORPS X5, X5, X5
	VXORPS X6, X6, X6
	VXORPS X7, X7, X7

bias:
	VMOVSS      (R8), X8
	VFMADD231SS (R9), X8, X4
	VFMADD231SS (R9)(R10*1), X8, X5
	VFMADD231SS (R9)(R10*2), X8, X6
	VFMADD231SS (R9)(R11*1), X8, X7
	ADDQ        $4, R8
	ADDQ        $4, R9
	DECQ        R12
	JNZ         bias

	MOVQ   out+72(FP), DX
	HSUMZ(Z0, Y0, X0, Y12, X12)
	VADDSS X4, X0, X0
	VMOVSS X0, 0(DX)
	HSUMZ(Z1, Y1, X1, Y12, X12)
	VADDSS X5, X1, X1
	VMOVSS X1, 4(DX)
	HSUMZ(Z2, Y2, X2, Y12, X12)
	VADDSS X6, X2, X2
	VMOVSS X2, 8(DX)
	HSUMZ(Z3, Y3, X3, Y12, X12)
	VADDSS X7, X3, X3
	VMOVSS X3, 12(DX)
	VZEROUPPER
	RET

// func mlx8x4AVX512(x *float32, xstride int, w *byte, s, b, xsum *float32, sstride, ngroups, group int, out *float32)
// mlx8AVX512 of one weight row against 4 activation rows x + r·xstride
// with sums xsum + r·sstride (strides in bytes): the codes are widened
// once for the 4 rows and every row keeps the one-row kernel's
// accumulators and order, so out[r] is bit-identical to it.
TEXT ·mlx8x4AVX512(SB), NOSPLIT, $0-80
	MOVQ   x+0(FP), SI
	MOVQ   xstride+8(FP), R13
	LEAQ   (R13)(R13*2), R10
	MOVQ   w+16(FP), DI
	MOVQ   s+24(FP), DX
	MOVQ   b+32(FP), R8
	MOVQ   xsum+40(FP), R9
	MOVQ   sstride+48(FP), R12
	LEAQ   (R12)(R12*2), R11
	MOVQ   ngroups+56(FP), CX
	MOVQ   group+64(FP), BX
	SHRQ   $5, BX
	VPXORD Z16, Z16, Z16
	VXORPS X4, X4, X4
	VPXORD Z17, Z17, Z17
	VXORPS X5, X5, X5
	VPXORD Z18, Z18, Z18
	VXORPS X6, X6, X6
	VPXORD Z19, Z19, Z19
	VXORPS X7, X7, X7

group:
	VPXORD Z20, Z20, Z20
	VPXORD Z24, Z24, Z24
	VPXORD Z21, Z21, Z21
	VPXORD Z25, Z25, Z25
	VPXORD Z22, Z22, Z22
	VPXORD Z26, Z26, Z26
	VPXORD Z23, Z23, Z23
	VPXORD Z27, Z27, Z27
	MOVQ   BX, AX

step:
	VPMOVZXBD   (DI), Z8
	VPMOVZXBD   16(DI), Z9
	VCVTDQ2PS   Z8, Z8
	VCVTDQ2PS   Z9, Z9
	VFMADD231PS (SI), Z8, Z20
	VFMADD231PS 64(SI), Z9, Z24
	VFMADD231PS (SI)(R13*1), Z8, Z21
	VFMADD231PS 64(SI)(R13*1), Z9, Z25
	VFMADD231PS (SI)(R13*2), Z8, Z22
	VFMADD231PS 64(SI)(R13*2), Z9, Z26
	VFMADD231PS (SI)(R10*1), Z8, Z23
	VFMADD231PS 64(SI)(R10*1), Z9, Z27
	ADDQ        $32, DI
	ADDQ        $128, SI
	DECQ        AX
	JNZ         step

	VBROADCASTSS (DX), Z12
	VADDPS      Z24, Z20, Z20
	VFMADD231PS Z12, Z20, Z16
	VADDPS      Z25, Z21, Z21
	VFMADD231PS Z12, Z21, Z17
	VADDPS      Z26, Z22, Z22
	VFMADD231PS Z12, Z22, Z18
	VADDPS      Z27, Z23, Z23
	VFMADD231PS Z12, Z23, Z19
	ADDQ         $4, DX
	VMOVSS      (R8), X14
	VFMADD231SS (R9), X14, X4
	VFMADD231SS (R9)(R12*1), X14, X5
	VFMADD231SS (R9)(R12*2), X14, X6
	VFMADD231SS (R9)(R11*1), X14, X7
	ADDQ        $4, R8
	ADDQ        $4, R9
	DECQ        CX
	JNZ         group

	MOVQ out+72(FP), DX
	VMOVAPS Z16, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS  X4, X0, X0
	VMOVSS  X0, 0(DX)
	VMOVAPS Z17, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS  X5, X0, X0
	VMOVSS  X0, 4(DX)
	VMOVAPS Z18, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS  X6, X0, X0
	VMOVSS  X0, 8(DX)
	VMOVAPS Z19, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VADDSS  X7, X0, X0
	VMOVSS  X0, 12(DX)
	VZEROUPPER
	RET

// func mlx4x8AVX512(xp *float32, xstride int, w *byte, s, b, xsum *float32, sstride, gsel, nchunks int, out *float32)
// mlx4x4AVX512 for 8 activation rows xp + r·xstride (xsum + r·sstride for
// their group sums, strides in bytes): each chunk's codes are widened
// once for the 8 rows, and every row keeps the one-row kernel's
// accumulators and summation order, so each result is bit-identical to
// mlx4AVX512 of its row.
TEXT ·mlx4x8AVX512(SB), NOSPLIT, $0-80
	MOVQ      gsel+56(FP), CX
	MOVQ      CX, R10
	SHLQ      $6, R10
	LEAQ      mlxIdx<>(SB), R11
	VMOVDQU32 (R11)(R10*1), Z14
	MOVQ      $16, BX
	SHRQ      CX, BX               // scale bytes per chunk
	MOVQ      $4, R12
	SHRQ      CX, R12              // groups per chunk
	MOVQ      nchunks+64(FP), CX
	IMULQ     CX, R12              // groups in all
	MOVQ      xp+0(FP), SI
	MOVQ      xstride+8(FP), R13
	LEAQ      (R13)(R13*2), AX
	LEAQ      (SI)(R13*4), R9      // rows 4 to 7
	MOVQ      w+16(FP), DI
	MOVQ      s+24(FP), DX
	VMOVUPS   mlxLUT4<>(SB), Z15
	VPXORD    Z0, Z0, Z0
	VPXORD    Z1, Z1, Z1
	VPXORD    Z2, Z2, Z2
	VPXORD    Z3, Z3, Z3
	VPXORD    Z4, Z4, Z4
	VPXORD    Z5, Z5, Z5
	VPXORD    Z6, Z6, Z6
	VPXORD    Z7, Z7, Z7

chunk:
	VMOVDQU32 (DI), Z13
	VPERMPS   Z15, Z13, Z16
	VPSRLD    $4, Z13, Z17
	VPERMPS   Z15, Z17, Z17
	VPSRLD    $8, Z13, Z18
	VPERMPS   Z15, Z18, Z18
	VPSRLD    $12, Z13, Z19
	VPERMPS   Z15, Z19, Z19
	VPSRLD    $16, Z13, Z20
	VPERMPS   Z15, Z20, Z20
	VPSRLD    $20, Z13, Z21
	VPERMPS   Z15, Z21, Z21
	VPSRLD    $24, Z13, Z22
	VPERMPS   Z15, Z22, Z22
	VPSRLD    $28, Z13, Z23
	VPERMPS   Z15, Z23, Z23
	VMOVUPS   (DX), X12
	VPERMPS   Z12, Z14, Z12
	VMULPS      (SI), Z16, Z24
	VMULPS      64(SI), Z17, Z25
	VFMADD231PS 128(SI), Z18, Z24
	VFMADD231PS 192(SI), Z19, Z25
	VFMADD231PS 256(SI), Z20, Z24
	VFMADD231PS 320(SI), Z21, Z25
	VFMADD231PS 384(SI), Z22, Z24
	VFMADD231PS 448(SI), Z23, Z25
	VADDPS      Z25, Z24, Z24
	VFMADD231PS Z12, Z24, Z0
	VMULPS      (SI)(R13*1), Z16, Z26
	VMULPS      64(SI)(R13*1), Z17, Z27
	VFMADD231PS 128(SI)(R13*1), Z18, Z26
	VFMADD231PS 192(SI)(R13*1), Z19, Z27
	VFMADD231PS 256(SI)(R13*1), Z20, Z26
	VFMADD231PS 320(SI)(R13*1), Z21, Z27
	VFMADD231PS 384(SI)(R13*1), Z22, Z26
	VFMADD231PS 448(SI)(R13*1), Z23, Z27
	VADDPS      Z27, Z26, Z26
	VFMADD231PS Z12, Z26, Z1
	VMULPS      (SI)(R13*2), Z16, Z28
	VMULPS      64(SI)(R13*2), Z17, Z29
	VFMADD231PS 128(SI)(R13*2), Z18, Z28
	VFMADD231PS 192(SI)(R13*2), Z19, Z29
	VFMADD231PS 256(SI)(R13*2), Z20, Z28
	VFMADD231PS 320(SI)(R13*2), Z21, Z29
	VFMADD231PS 384(SI)(R13*2), Z22, Z28
	VFMADD231PS 448(SI)(R13*2), Z23, Z29
	VADDPS      Z29, Z28, Z28
	VFMADD231PS Z12, Z28, Z2
	VMULPS      (SI)(AX*1), Z16, Z30
	VMULPS      64(SI)(AX*1), Z17, Z31
	VFMADD231PS 128(SI)(AX*1), Z18, Z30
	VFMADD231PS 192(SI)(AX*1), Z19, Z31
	VFMADD231PS 256(SI)(AX*1), Z20, Z30
	VFMADD231PS 320(SI)(AX*1), Z21, Z31
	VFMADD231PS 384(SI)(AX*1), Z22, Z30
	VFMADD231PS 448(SI)(AX*1), Z23, Z31
	VADDPS      Z31, Z30, Z30
	VFMADD231PS Z12, Z30, Z3
	VMULPS      (R9), Z16, Z24
	VMULPS      64(R9), Z17, Z25
	VFMADD231PS 128(R9), Z18, Z24
	VFMADD231PS 192(R9), Z19, Z25
	VFMADD231PS 256(R9), Z20, Z24
	VFMADD231PS 320(R9), Z21, Z25
	VFMADD231PS 384(R9), Z22, Z24
	VFMADD231PS 448(R9), Z23, Z25
	VADDPS      Z25, Z24, Z24
	VFMADD231PS Z12, Z24, Z4
	VMULPS      (R9)(R13*1), Z16, Z26
	VMULPS      64(R9)(R13*1), Z17, Z27
	VFMADD231PS 128(R9)(R13*1), Z18, Z26
	VFMADD231PS 192(R9)(R13*1), Z19, Z27
	VFMADD231PS 256(R9)(R13*1), Z20, Z26
	VFMADD231PS 320(R9)(R13*1), Z21, Z27
	VFMADD231PS 384(R9)(R13*1), Z22, Z26
	VFMADD231PS 448(R9)(R13*1), Z23, Z27
	VADDPS      Z27, Z26, Z26
	VFMADD231PS Z12, Z26, Z5
	VMULPS      (R9)(R13*2), Z16, Z28
	VMULPS      64(R9)(R13*2), Z17, Z29
	VFMADD231PS 128(R9)(R13*2), Z18, Z28
	VFMADD231PS 192(R9)(R13*2), Z19, Z29
	VFMADD231PS 256(R9)(R13*2), Z20, Z28
	VFMADD231PS 320(R9)(R13*2), Z21, Z29
	VFMADD231PS 384(R9)(R13*2), Z22, Z28
	VFMADD231PS 448(R9)(R13*2), Z23, Z29
	VADDPS      Z29, Z28, Z28
	VFMADD231PS Z12, Z28, Z6
	VMULPS      (R9)(AX*1), Z16, Z30
	VMULPS      64(R9)(AX*1), Z17, Z31
	VFMADD231PS 128(R9)(AX*1), Z18, Z30
	VFMADD231PS 192(R9)(AX*1), Z19, Z31
	VFMADD231PS 256(R9)(AX*1), Z20, Z30
	VFMADD231PS 320(R9)(AX*1), Z21, Z31
	VFMADD231PS 384(R9)(AX*1), Z22, Z30
	VFMADD231PS 448(R9)(AX*1), Z23, Z31
	VADDPS      Z31, Z30, Z30
	VFMADD231PS Z12, Z30, Z7
	ADDQ        $64, DI
	ADDQ        $512, SI
	ADDQ        $512, R9
	ADDQ        BX, DX
	DECQ        CX
	JNZ         chunk

	MOVQ   b+32(FP), R8
	MOVQ   xsum+40(FP), R9
	MOVQ   sstride+48(FP), R10
	LEAQ   (R10)(R10*2), R11
	LEAQ   (R9)(R10*4), R13
	VXORPS X16, X16, X16
	VXORPS X17, X17, X17
	VXORPS X18, X18, X18
	VXORPS X19, X19, X19
	VXORPS X20, X20, X20
	VXORPS X21, X21, X21
	VXORPS X22, X22, X22
	VXORPS X23, X23, X23

bias:
	VMOVSS      (R8), X24
	VFMADD231SS (R9), X24, X16
	VFMADD231SS (R9)(R10*1), X24, X17
	VFMADD231SS (R9)(R10*2), X24, X18
	VFMADD231SS (R9)(R11*1), X24, X19
	VFMADD231SS (R13), X24, X20
	VFMADD231SS (R13)(R10*1), X24, X21
	VFMADD231SS (R13)(R10*2), X24, X22
	VFMADD231SS (R13)(R11*1), X24, X23
	ADDQ        $4, R8
	ADDQ        $4, R9
	ADDQ        $4, R13
	DECQ        R12
	JNZ         bias

	MOVQ   out+72(FP), DX
	HSUMZ(Z0, Y0, X0, Y8, X8)
	VADDSS X16, X0, X0
	VMOVSS X0, 0(DX)
	HSUMZ(Z1, Y1, X1, Y8, X8)
	VADDSS X17, X1, X1
	VMOVSS X1, 4(DX)
	HSUMZ(Z2, Y2, X2, Y8, X8)
	VADDSS X18, X2, X2
	VMOVSS X2, 8(DX)
	HSUMZ(Z3, Y3, X3, Y8, X8)
	VADDSS X19, X3, X3
	VMOVSS X3, 12(DX)
	HSUMZ(Z4, Y4, X4, Y8, X8)
	VADDSS X20, X4, X4
	VMOVSS X4, 16(DX)
	HSUMZ(Z5, Y5, X5, Y8, X8)
	VADDSS X21, X5, X5
	VMOVSS X5, 20(DX)
	HSUMZ(Z6, Y6, X6, Y8, X8)
	VADDSS X22, X6, X6
	VMOVSS X6, 24(DX)
	HSUMZ(Z7, Y7, X7, Y8, X8)
	VADDSS X23, X7, X7
	VMOVSS X7, 28(DX)
	VZEROUPPER
	RET
