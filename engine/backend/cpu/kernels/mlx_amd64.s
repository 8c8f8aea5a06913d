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

// func mlx4DequantAVX512(dst *float32, w *byte, s, b *float32, gsel, nchunks int)
// Dequantizes the nchunks full 128-code chunks of a 4-bit row laid out as
// mlxPermute lays out activations: dst[128c+16k+d] = s·q + b (one FMA)
// for code k of word d of chunk c, s and b being its group's scale and
// bias. gsel is 0, 1, 2 for group sizes 32, 64, 128; s and b are read up to 3
// floats past their last group.
TEXT ·mlx4DequantAVX512(SB), NOSPLIT, $0-48
	MOVQ      dst+0(FP), DI
	MOVQ      w+8(FP), SI
	MOVQ      s+16(FP), DX
	MOVQ      b+24(FP), R8
	MOVQ      gsel+32(FP), CX
	MOVQ      CX, R10
	SHLQ      $6, R10
	LEAQ      mlxIdx<>(SB), R11
	VMOVDQU32 (R11)(R10*1), Z14
	MOVQ      $16, BX
	SHRQ      CX, BX               // scale bytes per chunk
	MOVQ      nchunks+40(FP), CX
	VMOVUPS   mlxLUT4<>(SB), Z15
	TESTQ     CX, CX
	JZ        done

chunk:
	VMOVDQU32 (SI), Z13
	VMOVUPS   (DX), X12
	VPERMPS   Z12, Z14, Z12
	VMOVUPS   (R8), X11
	VPERMPS   Z11, Z14, Z11
	VPERMPS   Z15, Z13, Z0
	VPSRLD    $4, Z13, Z1
	VPERMPS   Z15, Z1, Z1
	VPSRLD    $8, Z13, Z2
	VPERMPS   Z15, Z2, Z2
	VPSRLD    $12, Z13, Z3
	VPERMPS   Z15, Z3, Z3
	VPSRLD    $16, Z13, Z4
	VPERMPS   Z15, Z4, Z4
	VPSRLD    $20, Z13, Z5
	VPERMPS   Z15, Z5, Z5
	VPSRLD    $24, Z13, Z6
	VPERMPS   Z15, Z6, Z6
	VPSRLD    $28, Z13, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z11, Z12, Z0
	VFMADD213PS Z11, Z12, Z1
	VFMADD213PS Z11, Z12, Z2
	VFMADD213PS Z11, Z12, Z3
	VFMADD213PS Z11, Z12, Z4
	VFMADD213PS Z11, Z12, Z5
	VFMADD213PS Z11, Z12, Z6
	VFMADD213PS Z11, Z12, Z7
	VMOVUPS   Z0, 0(DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	VMOVUPS   Z4, 256(DI)
	VMOVUPS   Z5, 320(DI)
	VMOVUPS   Z6, 384(DI)
	VMOVUPS   Z7, 448(DI)
	ADDQ      $64, SI
	ADDQ      $512, DI
	ADDQ      BX, DX
	ADDQ      BX, R8
	DECQ      CX
	JNZ       chunk

done:
	VZEROUPPER
	RET

// func mlx4Fused1x4AVX512(xp *float32, w *byte, wstride int, s, b *float32, sstride, gsel, nchunks int, out *[4]float32)
// The product of the permuted activation row xp with 4 MLX 4-bit rows
// w + i·wstride (scales and biases s, b + i·sstride; strides in bytes),
// dequantizing in registers exactly as mlx4DequantAVX512 does and
// accumulating as f32Tile1x4AVX512 does over its output, so each result is
// bit-identical to that two-step path, without the scratch round trip.
TEXT ·mlx4Fused1x4AVX512(SB), NOSPLIT, $0-72
	MOVQ      gsel+48(FP), CX
	MOVQ      CX, R12
	SHLQ      $6, R12
	LEAQ      mlxIdx<>(SB), R11
	VMOVDQU32 (R11)(R12*1), Z14
	MOVQ      $16, BX
	SHRQ      CX, BX               // scale bytes per chunk
	MOVQ      nchunks+56(FP), CX
	MOVQ      xp+0(FP), SI
	MOVQ      w+8(FP), DI
	MOVQ      wstride+16(FP), R13
	LEAQ      (R13)(R13*2), AX
	LEAQ      (DI)(R13*4), R9      // the next 4 rows, prefetched as we go
	MOVQ      s+24(FP), DX
	MOVQ      b+32(FP), R8
	MOVQ      sstride+40(FP), R10
	LEAQ      (R10)(R10*2), R11
	VMOVUPS   mlxLUT4<>(SB), Z15
	VPXORD    Z0, Z0, Z0
	VPXORD    Z1, Z1, Z1
	VPXORD    Z2, Z2, Z2
	VPXORD    Z3, Z3, Z3
	TESTQ     CX, CX
	JZ        done

chunk:
	PREFETCHT0 (R9)
	PREFETCHT0 (R9)(R13*1)
	PREFETCHT0 (R9)(R13*2)
	PREFETCHT0 (R9)(AX*1)
	VMOVDQU32 (DI), Z16
	VMOVUPS   (DX), X20
	VPERMPS   Z20, Z14, Z20
	VMOVUPS   (R8), X24
	VPERMPS   Z24, Z14, Z24
	VMOVDQU32 (DI)(R13*1), Z17
	VMOVUPS   (DX)(R10*1), X21
	VPERMPS   Z21, Z14, Z21
	VMOVUPS   (R8)(R10*1), X25
	VPERMPS   Z25, Z14, Z25
	VMOVDQU32 (DI)(R13*2), Z18
	VMOVUPS   (DX)(R10*2), X22
	VPERMPS   Z22, Z14, Z22
	VMOVUPS   (R8)(R10*2), X26
	VPERMPS   Z26, Z14, Z26
	VMOVDQU32 (DI)(AX*1), Z19
	VMOVUPS   (DX)(R11*1), X23
	VPERMPS   Z23, Z14, Z23
	VMOVUPS   (R8)(R11*1), X27
	VPERMPS   Z27, Z14, Z27
	VMOVUPS   0(SI), Z8
	VPERMPS   Z15, Z16, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPERMPS   Z15, Z17, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPERMPS   Z15, Z18, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPERMPS   Z15, Z19, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   64(SI), Z8
	VPSRLD    $4, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $4, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $4, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $4, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   128(SI), Z8
	VPSRLD    $8, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $8, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $8, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $8, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   192(SI), Z8
	VPSRLD    $12, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $12, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $12, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $12, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   256(SI), Z8
	VPSRLD    $16, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $16, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $16, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $16, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   320(SI), Z8
	VPSRLD    $20, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $20, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $20, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $20, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   384(SI), Z8
	VPSRLD    $24, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $24, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $24, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $24, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	VMOVUPS   448(SI), Z8
	VPSRLD    $28, Z16, Z4
	VPERMPS   Z15, Z4, Z4
	VFMADD213PS Z24, Z20, Z4
	VFMADD231PS Z8, Z4, Z0
	VPSRLD    $28, Z17, Z5
	VPERMPS   Z15, Z5, Z5
	VFMADD213PS Z25, Z21, Z5
	VFMADD231PS Z8, Z5, Z1
	VPSRLD    $28, Z18, Z6
	VPERMPS   Z15, Z6, Z6
	VFMADD213PS Z26, Z22, Z6
	VFMADD231PS Z8, Z6, Z2
	VPSRLD    $28, Z19, Z7
	VPERMPS   Z15, Z7, Z7
	VFMADD213PS Z27, Z23, Z7
	VFMADD231PS Z8, Z7, Z3
	ADDQ      $512, SI
	ADDQ      $64, DI
	ADDQ      $64, R9
	ADDQ      BX, DX
	ADDQ      BX, R8
	DECQ      CX
	JNZ       chunk

done:
	MOVQ      out+64(FP), DX
	HSUMZ(Z0, Y0, X0, Y8, X8)
	VMOVSS X0, 0(DX)
	HSUMZ(Z1, Y1, X1, Y8, X8)
	VMOVSS X1, 4(DX)
	HSUMZ(Z2, Y2, X2, Y8, X8)
	VMOVSS X2, 8(DX)
	HSUMZ(Z3, Y3, X3, Y8, X8)
	VMOVSS X3, 12(DX)
	VZEROUPPER
	RET
