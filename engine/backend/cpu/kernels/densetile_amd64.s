//go:build amd64 && !purego

#include "textflag.h"
#include "asm_amd64.h"

// The BF16 tile kernels multiply 1 or 4 activation rows by 4 weight rows
// at once: each 16-wide chunk of a weight row is widened once and used
// for every activation row, and each loaded activation chunk for every
// weight row, so a tile of 4×4 does 16 FMAs per 8 loads. Every
// (activation row, weight row) pair has one accumulator, summed chunk by
// chunk in column order and reduced by HSUMZ; the result is therefore the
// same bit for bit whatever the tile it was computed in.

// BF16W widens the 16 BF16 values at addr into z.
#define BF16W(addr, z) \
	VPMOVZXWD addr, z; \
	VPSLLD    $16, z, z

// SUMOUT reduces accumulator z (low halves y, x) into out[k] (out in DX),
// using Y14/X14 as temporaries.
#define SUMOUT(z, y, x, k) \
	HSUMZ(z, y, x, Y14, X14); \
	VMOVSS x, (4*k)(DX)

// func bf16Tile4x4AVX512(x *[4]*float32, w *[4]*byte, n int, out *[16]float32, pf int)
// out[4·j+i] = Σ x[j][c]·w[i][c] over c < n, n a multiple of 16. While
// it prefetches the 8·n bytes from w[0]+pf into L2, 128 bytes a step:
// the next 4 rows of a row-major matrix when pf is 4 rows' bytes (the
// hardware prefetcher alone leaves the FMAs waiting on memory with 4
// rows streaming at once). Into L2, not L1: PREFETCHT0 evicted the
// activation rows the tile reuses, and an 8-row product ran at 115-118
// GFLOP/s out of cache instead of 152-183 (2 threads).
TEXT ·bf16Tile4x4AVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), AX
	MOVQ 0(AX), R8
	MOVQ 8(AX), R9
	MOVQ 16(AX), R10
	MOVQ 24(AX), R11
	MOVQ w+8(FP), AX
	MOVQ 0(AX), R12
	MOVQ 8(AX), R13
	MOVQ 16(AX), SI
	MOVQ 24(AX), DI
	MOVQ n+16(FP), BX
	MOVQ pf+32(FP), R15
	ADDQ R12, R15                  // prefetch base; 4 bytes per weight byte
	SHLQ $1, BX                    // weight bytes per row
	XORQ CX, CX                    // weight byte offset; activations at 2·CX
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
	TESTQ BX, BX
	JZ    done

loop:
	PREFETCHT1 (R15)(CX*4)
	PREFETCHT1 64(R15)(CX*4)
	BF16W((R12)(CX*1), Z16)
	BF16W((R13)(CX*1), Z17)
	BF16W((SI)(CX*1), Z18)
	BF16W((DI)(CX*1), Z19)
	VMOVUPS     (R8)(CX*2), Z20
	VMOVUPS     (R9)(CX*2), Z21
	VMOVUPS     (R10)(CX*2), Z22
	VMOVUPS     (R11)(CX*2), Z23
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z18, Z22, Z10
	VFMADD231PS Z19, Z22, Z11
	VFMADD231PS Z16, Z23, Z12
	VFMADD231PS Z17, Z23, Z13
	VFMADD231PS Z18, Z23, Z14
	VFMADD231PS Z19, Z23, Z15
	ADDQ        $32, CX
	CMPQ        CX, BX
	JLT         loop

done:
	MOVQ    out+24(FP), DX
	VMOVAPS Z14, Z30
	VMOVAPS Z15, Z31
	SUMOUT(Z0, Y0, X0, 0)
	SUMOUT(Z1, Y1, X1, 1)
	SUMOUT(Z2, Y2, X2, 2)
	SUMOUT(Z3, Y3, X3, 3)
	SUMOUT(Z4, Y4, X4, 4)
	SUMOUT(Z5, Y5, X5, 5)
	SUMOUT(Z6, Y6, X6, 6)
	SUMOUT(Z7, Y7, X7, 7)
	SUMOUT(Z8, Y8, X8, 8)
	SUMOUT(Z9, Y9, X9, 9)
	SUMOUT(Z10, Y10, X10, 10)
	SUMOUT(Z11, Y11, X11, 11)
	SUMOUT(Z12, Y12, X12, 12)
	SUMOUT(Z13, Y13, X13, 13)
	VMOVAPS Z30, Z0
	VMOVAPS Z31, Z1
	SUMOUT(Z0, Y0, X0, 14)
	SUMOUT(Z1, Y1, X1, 15)
	VZEROUPPER
	RET

// The f32 tile kernels are the BF16 ones with f32 weight rows (the MLX
// 4-bit rows dequantized into scratch, see MLXAffine.mulRowsDequant).

// func f32Tile4x4AVX512(x *[4]*float32, w *[4]*float32, n int, out *[16]float32)
// out[4·j+i] = Σ x[j][c]·w[i][c] over c < n, n a multiple of 16.
TEXT ·f32Tile4x4AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), AX
	MOVQ 0(AX), R8
	MOVQ 8(AX), R9
	MOVQ 16(AX), R10
	MOVQ 24(AX), R11
	MOVQ w+8(FP), AX
	MOVQ 0(AX), R12
	MOVQ 8(AX), R13
	MOVQ 16(AX), SI
	MOVQ 24(AX), DI
	MOVQ n+16(FP), BX
	SHLQ $2, BX                    // bytes per row
	XORQ CX, CX                    // byte offset
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
	TESTQ BX, BX
	JZ    done

loop:
	VMOVUPS     (R12)(CX*1), Z16
	VMOVUPS     (R13)(CX*1), Z17
	VMOVUPS     (SI)(CX*1), Z18
	VMOVUPS     (DI)(CX*1), Z19
	VMOVUPS     (R8)(CX*1), Z20
	VMOVUPS     (R9)(CX*1), Z21
	VMOVUPS     (R10)(CX*1), Z22
	VMOVUPS     (R11)(CX*1), Z23
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z18, Z22, Z10
	VFMADD231PS Z19, Z22, Z11
	VFMADD231PS Z16, Z23, Z12
	VFMADD231PS Z17, Z23, Z13
	VFMADD231PS Z18, Z23, Z14
	VFMADD231PS Z19, Z23, Z15
	ADDQ        $64, CX
	CMPQ        CX, BX
	JLT         loop

done:
	MOVQ    out+24(FP), DX
	VMOVAPS Z14, Z30
	VMOVAPS Z15, Z31
	SUMOUT(Z0, Y0, X0, 0)
	SUMOUT(Z1, Y1, X1, 1)
	SUMOUT(Z2, Y2, X2, 2)
	SUMOUT(Z3, Y3, X3, 3)
	SUMOUT(Z4, Y4, X4, 4)
	SUMOUT(Z5, Y5, X5, 5)
	SUMOUT(Z6, Y6, X6, 6)
	SUMOUT(Z7, Y7, X7, 7)
	SUMOUT(Z8, Y8, X8, 8)
	SUMOUT(Z9, Y9, X9, 9)
	SUMOUT(Z10, Y10, X10, 10)
	SUMOUT(Z11, Y11, X11, 11)
	SUMOUT(Z12, Y12, X12, 12)
	SUMOUT(Z13, Y13, X13, 13)
	VMOVAPS Z30, Z0
	VMOVAPS Z31, Z1
	SUMOUT(Z0, Y0, X0, 14)
	SUMOUT(Z1, Y1, X1, 15)
	VZEROUPPER
	RET

// func f32Tile1x4AVX512(x *float32, w *[4]*float32, n int, out *[4]float32)
// out[i] = Σ x[c]·w[i][c] over c < n, n a multiple of 16; each result is
// bit-identical to the matching one of f32Tile4x4AVX512.
TEXT ·f32Tile1x4AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), R8
	MOVQ w+8(FP), AX
	MOVQ 0(AX), R12
	MOVQ 8(AX), R13
	MOVQ 16(AX), SI
	MOVQ 24(AX), DI
	MOVQ n+16(FP), BX
	SHLQ $2, BX
	XORQ CX, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ BX, BX
	JZ    done

loop:
	VMOVUPS     (R12)(CX*1), Z16
	VMOVUPS     (R13)(CX*1), Z17
	VMOVUPS     (SI)(CX*1), Z18
	VMOVUPS     (DI)(CX*1), Z19
	VMOVUPS     (R8)(CX*1), Z20
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	ADDQ        $64, CX
	CMPQ        CX, BX
	JLT         loop

done:
	MOVQ out+24(FP), DX
	SUMOUT(Z0, Y0, X0, 0)
	SUMOUT(Z1, Y1, X1, 1)
	SUMOUT(Z2, Y2, X2, 2)
	SUMOUT(Z3, Y3, X3, 3)
	VZEROUPPER
	RET

// func bf16Tile1x1AVX512(x *float32, w *byte, n int) float32
// One activation row by one weight row, bit-identical to the matching
// result of bf16Tile4x4AVX512 (one accumulator, chunks in column order).
// Batches under 4 use it: a weight row streams from memory in order,
// which the hardware prefetchers follow better than 4 rows at once.
TEXT ·bf16Tile1x1AVX512(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), R8
	MOVQ   w+8(FP), R12
	MOVQ   n+16(FP), BX
	SHLQ   $1, BX
	XORQ   CX, CX
	VPXORD Z0, Z0, Z0

loop64:
	LEAQ        96(CX), DX
	CMPQ        DX, BX
	JGE         loop
	BF16W((R12)(CX*1), Z16)
	BF16W(32(R12)(CX*1), Z17)
	BF16W(64(R12)(CX*1), Z18)
	BF16W(96(R12)(CX*1), Z19)
	VFMADD231PS (R8)(CX*2), Z16, Z0
	VFMADD231PS 64(R8)(CX*2), Z17, Z0
	VFMADD231PS 128(R8)(CX*2), Z18, Z0
	VFMADD231PS 192(R8)(CX*2), Z19, Z0
	ADDQ        $128, CX
	JMP         loop64

loop:
	CMPQ        CX, BX
	JGE         done
	BF16W((R12)(CX*1), Z16)
	VFMADD231PS (R8)(CX*2), Z16, Z0
	ADDQ        $32, CX
	JMP         loop

done:
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET
