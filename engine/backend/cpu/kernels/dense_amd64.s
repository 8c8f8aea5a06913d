//go:build amd64 && !purego

#include "textflag.h"
#include "asm_amd64.h"

// func dotF32AVX2(a, b *float32, n int) float32
// n is a multiple of 8.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JLT         loop8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JLT         done
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF32BAVX2(x *float32, w *byte, n int) float32
// dotF32AVX2 with the weights as bytes of any alignment.
TEXT ·dotF32BAVX2(SB), NOSPLIT, $0-28
	JMP ·dotF32AVX2(SB)

// func dotBF16AVX2(x *float32, w *byte, n int) float32
// n is a multiple of 8.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JLT         loop8
	VPMOVZXWD   (DI), Y4
	VPMOVZXWD   16(DI), Y5
	VPMOVZXWD   32(DI), Y6
	VPMOVZXWD   48(DI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JLT         done
	VPMOVZXWD   (DI), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $16, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16AVX2(x *float32, w *byte, n int) float32
// n is a multiple of 8.
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ        CX, $32
	JLT         loop8
	VCVTPH2PS   (DI), Y4
	VCVTPH2PS   16(DI), Y5
	VCVTPH2PS   32(DI), Y6
	VCVTPH2PS   48(DI), Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	JMP         loop32

loop8:
	CMPQ        CX, $8
	JLT         done
	VCVTPH2PS   (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $16, DI
	SUBQ        $8, CX
	JMP         loop8

done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUMY(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF32AVX512(a, b *float32, n int) float32
// n is a multiple of 16.
TEXT ·dotF32AVX512(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

loop64:
	CMPQ        CX, $64
	JLT         loop16
	VMOVUPS     (SI), Z4
	VMOVUPS     64(SI), Z5
	VMOVUPS     128(SI), Z6
	VMOVUPS     192(SI), Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $256, DI
	SUBQ        $64, CX
	JMP         loop64

loop16:
	CMPQ        CX, $16
	JLT         done
	VMOVUPS     (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         loop16

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF32BAVX512(x *float32, w *byte, n int) float32
TEXT ·dotF32BAVX512(SB), NOSPLIT, $0-28
	JMP ·dotF32AVX512(SB)

// func dotBF16AVX512(x *float32, w *byte, n int) float32
// n is a multiple of 16.
TEXT ·dotBF16AVX512(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

loop64:
	CMPQ        CX, $64
	JLT         loop16
	VPMOVZXWD   (DI), Z4
	VPMOVZXWD   32(DI), Z5
	VPMOVZXWD   64(DI), Z6
	VPMOVZXWD   96(DI), Z7
	VPSLLD      $16, Z4, Z4
	VPSLLD      $16, Z5, Z5
	VPSLLD      $16, Z6, Z6
	VPSLLD      $16, Z7, Z7
	VFMADD231PS (SI), Z4, Z0
	VFMADD231PS 64(SI), Z5, Z1
	VFMADD231PS 128(SI), Z6, Z2
	VFMADD231PS 192(SI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $128, DI
	SUBQ        $64, CX
	JMP         loop64

loop16:
	CMPQ        CX, $16
	JLT         done
	VPMOVZXWD   (DI), Z4
	VPSLLD      $16, Z4, Z4
	VFMADD231PS (SI), Z4, Z0
	ADDQ        $64, SI
	ADDQ        $32, DI
	SUBQ        $16, CX
	JMP         loop16

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16AVX512(x *float32, w *byte, n int) float32
// n is a multiple of 16.
TEXT ·dotF16AVX512(SB), NOSPLIT, $0-28
	MOVQ   x+0(FP), SI
	MOVQ   w+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

loop64:
	CMPQ        CX, $64
	JLT         loop16
	VCVTPH2PS   (DI), Z4
	VCVTPH2PS   32(DI), Z5
	VCVTPH2PS   64(DI), Z6
	VCVTPH2PS   96(DI), Z7
	VFMADD231PS (SI), Z4, Z0
	VFMADD231PS 64(SI), Z5, Z1
	VFMADD231PS 128(SI), Z6, Z2
	VFMADD231PS 192(SI), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $128, DI
	SUBQ        $64, CX
	JMP         loop64

loop16:
	CMPQ        CX, $16
	JLT         done
	VCVTPH2PS   (DI), Z4
	VFMADD231PS (SI), Z4, Z0
	ADDQ        $64, SI
	ADDQ        $32, DI
	SUBQ        $16, CX
	JMP         loop16

done:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUMZ(Z0, Y0, X0, Y1, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *byte, n int)
// n is a multiple of 8.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loop:
	CMPQ      CX, $8
	JLT       done
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func widenF16AVX2(dst *float32, src *byte, n int)
// n is a multiple of 8.
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loop:
	CMPQ      CX, $8
	JLT       done
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       loop

done:
	VZEROUPPER
	RET
