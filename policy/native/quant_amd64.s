//go:build goexperiment.simd && amd64

#include "textflag.h"

// Products of one input row with four rows of a quantized matrix
// (quant.go), the decode step's kernels: y[j] = x · row j, for quads of
// rows j, j+1, j+2, j+3 from the blocks as they are. Per row and block:
//
//	t = x[0:w]·q[0:w] + x[w:2w]·q[w:2w] (... in lanes of w)   products, then fused adds
//	acc += t · d                                              fused, d broadcast
//
// and once per row, for Q4_1, macc = Σ_b m_b · sx_b in lanes of blocks
// (sx_b the block's input sum, precomputed by the caller), so that
// y = Σ lanes of (acc + macc), reduced in a fixed tree. The quantized
// values reach the floats exactly: Q4's nibbles through a 16-entry table
// (VPERMPS: 0..15 for Q4_1, -8..7 for Q4_0) or a conversion, Q8_0's
// bytes sign-extended and converted. The sums are float32 in another
// order than dequantize-then-multiply: QuantTolerance bounds the
// difference, and every output's bits are those of its row alone (a
// quad's rows never mix), whatever quad or task computes it.
//
// The scales are float16: a quad's d are converted 16 (AVX2: 8) at a
// time into dbuf, interleaved as [block][row] so that the main loop reads
// row r's d of block b at dbuf + 16b + 4r, beside the quantized values'
// offset 16b. The conversions read up to 30 bytes past a row's scales
// (into the next row, or the matrix's qmatPad); those lanes are never
// used, and the m lanes past the last block are masked to zero.
//
// All end with VZEROUPPER (see kernels_simd_amd64.go).

// qgemvArgs (quant_amd64.go) field offsets.
#define A_X 0
#define A_SX 8
#define A_ROWS 16
#define A_ROWBYTES 24
#define A_NB16 32
#define A_DOFF 40
#define A_MOFF 48
#define A_NGB 56
#define A_QUADS 64
#define A_DBUF 72
#define A_TABLE 80
#define A_MASK 88
#define A_Y 96
#define A_ACC 104

// QUAD_ROWS points R11, R12, R13 at the rows after R10's.
#define QUAD_ROWS \
	LEAQ (R10)(R8*1), R11; \
	LEAQ (R11)(R8*1), R12; \
	LEAQ (R12)(R8*1), R13

// --- AVX-512 ---

// ZERO8 clears the sums and m terms of a quad.
#define ZERO8(r0, r1, r2, r3, r4, r5, r6, r7) \
	VPXORD r0, r0, r0; VPXORD r1, r1, r1; VPXORD r2, r2, r2; VPXORD r3, r3, r3; \
	VPXORD r4, r4, r4; VPXORD r5, r5, r5; VPXORD r6, r6, r6; VPXORD r7, r7, r7

// DBUF512 converts 16 d of each of the quad's rows at offset BX and
// stores them in dbuf (AX) at 4·CX, interleaved [block][row]: the 4 x 16
// transpose of the unpacks and lane shuffles.
#define DBUF512 \
	VCVTPH2PS (R10)(BX*1), Z12; VCVTPH2PS (R11)(BX*1), Z13; \
	VCVTPH2PS (R12)(BX*1), Z14; VCVTPH2PS (R13)(BX*1), Z15; \
	VUNPCKLPS Z13, Z12, Z16; VUNPCKHPS Z13, Z12, Z17; \
	VUNPCKLPS Z15, Z14, Z18; VUNPCKHPS Z15, Z14, Z19; \
	VUNPCKLPD Z18, Z16, Z20; VUNPCKHPD Z18, Z16, Z21; \
	VUNPCKLPD Z19, Z17, Z22; VUNPCKHPD Z19, Z17, Z23; \
	VSHUFF32X4 $0x44, Z21, Z20, Z24; VSHUFF32X4 $0xEE, Z21, Z20, Z25; \
	VSHUFF32X4 $0x44, Z23, Z22, Z26; VSHUFF32X4 $0xEE, Z23, Z22, Z27; \
	VSHUFF32X4 $0x88, Z26, Z24, Z16; VSHUFF32X4 $0xDD, Z26, Z24, Z17; \
	VSHUFF32X4 $0x88, Z27, Z25, Z18; VSHUFF32X4 $0xDD, Z27, Z25, Z19; \
	VMOVUPS Z16, (AX)(CX*4); VMOVUPS Z17, 64(AX)(CX*4); \
	VMOVUPS Z18, 128(AX)(CX*4); VMOVUPS Z19, 192(AX)(CX*4)

// MLOAD512 converts 16 m of each row at offset DX into Z12-Z15;
// MMASK512 zeroes the lanes past the last block (Z31); MSUM512 adds
// their products with the input's block sums (SI at CX) to Z4-Z7.
#define MLOAD512 \
	VCVTPH2PS (R10)(DX*1), Z12; VCVTPH2PS (R11)(DX*1), Z13; \
	VCVTPH2PS (R12)(DX*1), Z14; VCVTPH2PS (R13)(DX*1), Z15

#define MMASK512 \
	VPANDD Z31, Z12, Z12; VPANDD Z31, Z13, Z13; VPANDD Z31, Z14, Z14; VPANDD Z31, Z15, Z15

#define MSUM512 \
	VMOVUPS (SI)(CX*1), Z16; \
	VFMADD231PS Z16, Z12, Z4; VFMADD231PS Z16, Z13, Z5; \
	VFMADD231PS Z16, Z14, Z6; VFMADD231PS Z16, Z15, Z7

// REDUCE512 folds the m terms into the sums and reduces Z0-Z3 to the
// quad's four outputs in X0, in a fixed tree.
#define REDUCE512 \
	VADDPS Z4, Z0, Z0; VADDPS Z5, Z1, Z1; VADDPS Z6, Z2, Z2; VADDPS Z7, Z3, Z3; \
	VEXTRACTF64X4 $1, Z0, Y12; VEXTRACTF64X4 $1, Z1, Y13; \
	VEXTRACTF64X4 $1, Z2, Y14; VEXTRACTF64X4 $1, Z3, Y15; \
	VADDPS Y12, Y0, Y0; VADDPS Y13, Y1, Y1; VADDPS Y14, Y2, Y2; VADDPS Y15, Y3, Y3; \
	VEXTRACTF128 $1, Y0, X12; VEXTRACTF128 $1, Y1, X13; \
	VEXTRACTF128 $1, Y2, X14; VEXTRACTF128 $1, Y3, X15; \
	VADDPS X12, X0, X0; VADDPS X13, X1, X1; VADDPS X14, X2, X2; VADDPS X15, X3, X3; \
	VHADDPS X1, X0, X0; VHADDPS X3, X2, X2; VHADDPS X2, X0, X0

// Q4 row r of the main loop (Z8, Z9: the block's input): its nibbles
// through the table Z30, products, then acc (Z0+r) += t·d.
#define Q4ROW512(row, t0, t1, zacc, doff) \
	VPMOVZXBD (row)(BX*1), t0; \
	VPSRLD $4, t0, t1; \
	VPERMPS Z30, t0, t0; \
	VPERMPS Z30, t1, t1; \
	VMULPS Z8, t0, t0; \
	VFMADD231PS Z9, t1, t0; \
	VFMADD231PS.BCST doff(AX)(BX*1), t0, zacc

// Q8 row r: 32 int8 sign-extended and converted.
#define Q8ROW512(row, t0, t1, zacc, doff) \
	VPMOVSXBD (row)(BX*2), t0; \
	VPMOVSXBD 16(row)(BX*2), t1; \
	VCVTDQ2PS t0, t0; \
	VCVTDQ2PS t1, t1; \
	VMULPS Z8, t0, t0; \
	VFMADD231PS Z9, t1, t0; \
	VFMADD231PS.BCST doff(AX)(BX*1), t0, zacc

// PROLOGUE512 converts the quad's d into dbuf and, for Q4_1 (DX, the m
// offset, not zero), sums m·sx into Z4-Z7; then points SI at the input
// and BX at block 0. Labels are per function: one use in each.
#define PROLOGUE512_START \
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7); \
	MOVQ A_SX(R15), SI; MOVQ A_DOFF(R15), BX; MOVQ A_MOFF(R15), DX; XORQ CX, CX

// func qgemv4Q4avx512(a *qgemvArgs)
//
// Q4_0 and Q4_1 (the table and A_MOFF tell them apart), quads of rows.
// Registers: R15 the arguments, R10-R13 the quad's rows, R8 their
// stride, DI the outputs, AX dbuf, SI the input, BX the block offset
// (16 per block), R14 the quads left; Z0-Z3 the sums, Z4-Z7 the m terms,
// Z8-Z9 the input block, Z30 the table, Z31 the last group's mask.
TEXT ·qgemv4Q4avx512(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ A_TABLE(R15), AX
	VMOVUPS (AX), Z30
	MOVQ A_MASK(R15), AX
	VMOVUPS (AX), Z31
	MOVQ A_ROWS(R15), R10
	MOVQ A_ROWBYTES(R15), R8
	MOVQ A_Y(R15), DI
	MOVQ A_DBUF(R15), AX
	MOVQ A_QUADS(R15), R14

quad:
	QUAD_ROWS
	PROLOGUE512_START

group:
	DBUF512
	TESTQ DX, DX
	JZ nom
	MLOAD512
	LEAQ 64(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	MMASK512

nomask:
	MSUM512
	ADDQ $32, DX

nom:
	ADDQ $32, BX
	ADDQ $64, CX
	CMPQ CX, A_NGB(R15)
	JLT group
	MOVQ A_X(R15), SI
	XORQ BX, BX

block:
	VMOVUPS (SI)(BX*8), Z8
	VMOVUPS 64(SI)(BX*8), Z9
	Q4ROW512(R10, Z10, Z11, Z0, 0)
	Q4ROW512(R11, Z12, Z13, Z1, 4)
	Q4ROW512(R12, Z14, Z15, Z2, 8)
	Q4ROW512(R13, Z16, Z17, Z3, 12)
	ADDQ $16, BX
	CMPQ BX, A_NB16(R15)
	JLT block

	REDUCE512
	CMPQ A_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// func qgemv4Q8avx512(a *qgemvArgs)
//
// Q8_0, quads of rows: qgemv4Q4avx512's plan, the values at 32 per block.
TEXT ·qgemv4Q8avx512(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ A_MASK(R15), AX
	VMOVUPS (AX), Z31
	MOVQ A_ROWS(R15), R10
	MOVQ A_ROWBYTES(R15), R8
	MOVQ A_Y(R15), DI
	MOVQ A_DBUF(R15), AX
	MOVQ A_QUADS(R15), R14

quad:
	QUAD_ROWS
	PROLOGUE512_START

group:
	DBUF512
	ADDQ $32, BX
	ADDQ $64, CX
	CMPQ CX, A_NGB(R15)
	JLT group
	MOVQ A_X(R15), SI
	XORQ BX, BX

block:
	VMOVUPS (SI)(BX*8), Z8
	VMOVUPS 64(SI)(BX*8), Z9
	Q8ROW512(R10, Z10, Z11, Z0, 0)
	Q8ROW512(R11, Z12, Z13, Z1, 4)
	Q8ROW512(R12, Z14, Z15, Z2, 8)
	Q8ROW512(R13, Z16, Z17, Z3, 12)
	ADDQ $16, BX
	CMPQ BX, A_NB16(R15)
	JLT block

	REDUCE512
	CMPQ A_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// --- AVX2 ---
//
// The same plan on 8 lanes and 16 registers: groups of 8 blocks in the
// prologue; a block's 32 values in four vectors of 8 (Q4: bytes 0-7 give
// values 0-7 in their low nibbles and 16-23 in their high ones, bytes
// 8-15 values 8-15 and 24-31), t = x0·q0 + x1·q1 + x2·q2 + x3·q3 in that
// order, the input read from memory by each product; d broadcast from
// dbuf. Y0-Y3 the sums, Y4-Y7 the m terms, Y8-Y13 scratch, Y14 the
// nibble mask (Q4) and Y15 the last group's mask (in the prologue) or
// Q4_0's offset 8.0 (in the main loop).

#define ZERO8Y \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7

#define PROLOGUE256_START \
	ZERO8Y; MOVQ A_SX(R15), SI; MOVQ A_DOFF(R15), BX; MOVQ A_MOFF(R15), DX; XORQ CX, CX

// DBUF256: 8 d of each row at BX, the 4 x 8 transpose, stored at 4·CX.
#define DBUF256 \
	VCVTPH2PS (R10)(BX*1), Y8; VCVTPH2PS (R11)(BX*1), Y9; \
	VCVTPH2PS (R12)(BX*1), Y10; VCVTPH2PS (R13)(BX*1), Y11; \
	VUNPCKLPS Y9, Y8, Y12; VUNPCKHPS Y9, Y8, Y13; \
	VUNPCKLPS Y11, Y10, Y8; VUNPCKHPS Y11, Y10, Y9; \
	VUNPCKLPD Y8, Y12, Y10; VUNPCKHPD Y8, Y12, Y11; \
	VUNPCKLPD Y9, Y13, Y12; VUNPCKHPD Y9, Y13, Y13; \
	VPERM2F128 $0x20, Y11, Y10, Y8; VPERM2F128 $0x20, Y13, Y12, Y9; \
	VPERM2F128 $0x31, Y11, Y10, Y10; VPERM2F128 $0x31, Y13, Y12, Y11; \
	VMOVUPS Y8, (AX)(CX*4); VMOVUPS Y9, 32(AX)(CX*4); \
	VMOVUPS Y10, 64(AX)(CX*4); VMOVUPS Y11, 96(AX)(CX*4)

#define MLOAD256 \
	VCVTPH2PS (R10)(DX*1), Y8; VCVTPH2PS (R11)(DX*1), Y9; \
	VCVTPH2PS (R12)(DX*1), Y10; VCVTPH2PS (R13)(DX*1), Y11

#define MMASK256 \
	MOVQ A_MASK(R15), R9; VMOVUPS (R9), Y15; \
	VANDPS Y15, Y8, Y8; VANDPS Y15, Y9, Y9; VANDPS Y15, Y10, Y10; VANDPS Y15, Y11, Y11

#define MSUM256 \
	VMOVUPS (SI)(CX*1), Y12; \
	VFMADD231PS Y12, Y8, Y4; VFMADD231PS Y12, Y9, Y5; \
	VFMADD231PS Y12, Y10, Y6; VFMADD231PS Y12, Y11, Y7

#define REDUCE256 \
	VADDPS Y4, Y0, Y0; VADDPS Y5, Y1, Y1; VADDPS Y6, Y2, Y2; VADDPS Y7, Y3, Y3; \
	VEXTRACTF128 $1, Y0, X12; VEXTRACTF128 $1, Y1, X13; \
	VEXTRACTF128 $1, Y2, X8; VEXTRACTF128 $1, Y3, X9; \
	VADDPS X12, X0, X0; VADDPS X13, X1, X1; VADDPS X8, X2, X2; VADDPS X9, X3, X3; \
	VHADDPS X1, X0, X0; VHADDPS X3, X2, X2; VHADDPS X2, X0, X0

// Q4NIB256 unpacks row's 16 bytes of nibbles into Y8-Y11 as int32:
// values 0-7, 8-15, 16-23, 24-31.
#define Q4NIB256(row) \
	VPMOVZXBD (row)(BX*1), Y8; VPMOVZXBD 8(row)(BX*1), Y9; \
	VPSRLD $4, Y8, Y10; VPSRLD $4, Y9, Y11; \
	VPAND Y14, Y8, Y8; VPAND Y14, Y9, Y9; \
	VCVTDQ2PS Y8, Y8; VCVTDQ2PS Y9, Y9; VCVTDQ2PS Y10, Y10; VCVTDQ2PS Y11, Y11

// SUB8: Q4_0's values less 8.0 (exact).
#define SUB8 \
	VSUBPS Y15, Y8, Y8; VSUBPS Y15, Y9, Y9; VSUBPS Y15, Y10, Y10; VSUBPS Y15, Y11, Y11

// DOT256 sums the block's products of Y8-Y11 with the input, then adds
// t·d of the row at doff to yacc.
#define DOT256(yacc, doff) \
	VMULPS (SI)(BX*8), Y8, Y12; \
	VFMADD231PS 32(SI)(BX*8), Y9, Y12; \
	VFMADD231PS 64(SI)(BX*8), Y10, Y12; \
	VFMADD231PS 96(SI)(BX*8), Y11, Y12; \
	VBROADCASTSS doff(AX)(BX*1), Y13; \
	VFMADD231PS Y13, Y12, yacc

// Q8VAL256: row's 32 int8 as floats in Y8-Y11.
#define Q8VAL256(row) \
	VPMOVSXBD (row)(BX*2), Y8; VPMOVSXBD 8(row)(BX*2), Y9; \
	VPMOVSXBD 16(row)(BX*2), Y10; VPMOVSXBD 24(row)(BX*2), Y11; \
	VCVTDQ2PS Y8, Y8; VCVTDQ2PS Y9, Y9; VCVTDQ2PS Y10, Y10; VCVTDQ2PS Y11, Y11

// func qgemv4Q4avx2(a *qgemvArgs)
//
// Q4_0 when A_TABLE is not nil (it then points at 8.0, the offset),
// else Q4_1; quads of rows.
TEXT ·qgemv4Q4avx2(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ A_ROWS(R15), R10
	MOVQ A_ROWBYTES(R15), R8
	MOVQ A_Y(R15), DI
	MOVQ A_DBUF(R15), AX
	MOVQ A_QUADS(R15), R14

quad:
	QUAD_ROWS
	PROLOGUE256_START

group:
	DBUF256
	TESTQ DX, DX
	JZ nom
	MLOAD256
	LEAQ 32(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	MMASK256

nomask:
	MSUM256
	ADDQ $16, DX

nom:
	ADDQ $16, BX
	ADDQ $32, CX
	CMPQ CX, A_NGB(R15)
	JLT group
	MOVQ A_X(R15), SI
	XORQ BX, BX
	MOVL $15, R9
	MOVQ R9, X14
	VPBROADCASTD X14, Y14
	MOVQ A_TABLE(R15), R9
	TESTQ R9, R9
	JZ q41

	VBROADCASTSS (R9), Y15

q40:
	Q4NIB256(R10)
	SUB8
	DOT256(Y0, 0)
	Q4NIB256(R11)
	SUB8
	DOT256(Y1, 4)
	Q4NIB256(R12)
	SUB8
	DOT256(Y2, 8)
	Q4NIB256(R13)
	SUB8
	DOT256(Y3, 12)
	ADDQ $16, BX
	CMPQ BX, A_NB16(R15)
	JLT q40
	JMP done

q41:
	Q4NIB256(R10)
	DOT256(Y0, 0)
	Q4NIB256(R11)
	DOT256(Y1, 4)
	Q4NIB256(R12)
	DOT256(Y2, 8)
	Q4NIB256(R13)
	DOT256(Y3, 12)
	ADDQ $16, BX
	CMPQ BX, A_NB16(R15)
	JLT q41

done:
	REDUCE256
	CMPQ A_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// func qgemv4Q8avx2(a *qgemvArgs)
TEXT ·qgemv4Q8avx2(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ A_ROWS(R15), R10
	MOVQ A_ROWBYTES(R15), R8
	MOVQ A_Y(R15), DI
	MOVQ A_DBUF(R15), AX
	MOVQ A_QUADS(R15), R14

quad:
	QUAD_ROWS
	PROLOGUE256_START

group:
	DBUF256
	ADDQ $16, BX
	ADDQ $32, CX
	CMPQ CX, A_NGB(R15)
	JLT group
	MOVQ A_X(R15), SI
	XORQ BX, BX

block:
	Q8VAL256(R10)
	DOT256(Y0, 0)
	Q8VAL256(R11)
	DOT256(Y1, 4)
	Q8VAL256(R12)
	DOT256(Y2, 8)
	Q8VAL256(R13)
	DOT256(Y3, 12)
	ADDQ $16, BX
	CMPQ BX, A_NB16(R15)
	JLT block

	REDUCE256
	CMPQ A_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// --- Several input rows (decoding a batch): one matrix row at a time,
// its values unpacked once for every input row. Per input row the
// operations are the quad kernels' (the same products, fused adds,
// m terms and reduction tree), so an output's bits are those its row
// would get alone. The inputs come interleaved (qgemvRows: block b of
// input row r at A_X + (b·R + r)·128, and with Q4_1 group g of its block
// sums at A_SX + (g·R + r)·(lanes·4)), the outputs go to A_Y as [row][R]
// floats; A_QUADS is the number of matrix rows. R10 the row, R8 the
// stride, DI the outputs, AX dbuf (one row's d), SI the inputs, BX the
// block offset (16 per block), CX dbuf's (4 per block), R14 the rows
// left, R13 the input stride per block (R·128) or per group.

// Extra argument offsets (qgemvArgs).
#define A_XSTRIDE 112
#define A_SXSTRIDE 120

// The R-row prologue's steps at a group: RDBUF512 converts its 16 d
// into dbuf; RMLOAD512 converts its m into Z17 (masked on the last group
// by the function), RMSUM512 adds m times input row r's sums to zm.
#define RDBUF512 \
	VCVTPH2PS (R10)(BX*1), Z16; VMOVUPS Z16, (AX)(CX*1)

#define RMLOAD512 \
	VCVTPH2PS (R10)(DX*1), Z17

#define RMSUM512(r, zm) \
	VFMADD231PS (r*64)(SI), Z17, zm

// Per input row of a block: Z16, Z17 the block's values as floats.
#define RROW512(r, zt, zacc) \
	VMULPS (r*128)(SI), Z16, zt; \
	VFMADD231PS (r*128+64)(SI), Z17, zt; \
	VFMADD231PS.BCST (AX)(CX*1), zt, zacc

#define RQ4VAL512 \
	VPMOVZXBD (R10)(BX*1), Z16; VPSRLD $4, Z16, Z17; VPERMPS Z30, Z16, Z16; VPERMPS Z30, Z17, Z17

#define RQ8VAL512 \
	VPMOVSXBD (R10)(BX*2), Z16; VPMOVSXBD 16(R10)(BX*2), Z17; VCVTDQ2PS Z16, Z16; VCVTDQ2PS Z17, Z17

// FOLD512 folds sum zacc plus m term zm to 4 floats in its X register
// (the quad reduction's first steps).
#define FOLD512(zacc, zm, yacc, xacc) \
	VADDPS zm, zacc, zacc; VEXTRACTF64X4 $1, zacc, Y18; VADDPS Y18, yacc, yacc; \
	VEXTRACTF32X4 $1, yacc, X18; VADDPS X18, xacc, xacc

// The R-row kernels' shared start: table, mask, pointers.
#define RSTART512 \
	MOVQ a+0(FP), R15; \
	MOVQ A_TABLE(R15), AX; TESTQ AX, AX; JZ 2(PC); VMOVUPS (AX), Z30; \
	MOVQ A_MASK(R15), AX; VMOVUPS (AX), Z31; \
	MOVQ A_ROWS(R15), R10; MOVQ A_ROWBYTES(R15), R8; MOVQ A_Y(R15), DI; \
	MOVQ A_DBUF(R15), AX; MOVQ A_QUADS(R15), R14

// RPROSTART512 and RPROSTEP512 begin and step the prologue's loop over
// groups of 16 blocks; RMAINSTART and RMAINSTEP the main loop's over
// blocks.
#define RPROSTART512 \
	MOVQ A_SX(R15), SI; MOVQ A_DOFF(R15), BX; MOVQ A_MOFF(R15), DX; XORQ CX, CX

#define RPROSTEP512 \
	ADDQ $32, BX; ADDQ $64, CX; CMPQ CX, A_NGB(R15)

#define RMAINSTART \
	MOVQ A_X(R15), SI; XORQ BX, BX; XORQ CX, CX

#define RMAINSTEP \
	ADDQ A_XSTRIDE(R15), SI; ADDQ $4, CX; ADDQ $16, BX; CMPQ BX, A_NB16(R15)

// func qgemvR8Q4avx512(a *qgemvArgs): 8 input rows, Q4_0 or Q4_1.
TEXT ·qgemvR8Q4avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	RPROSTART512

group:
	RDBUF512
	TESTQ DX, DX
	JZ nom
	RMLOAD512
	LEAQ 64(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	VPANDD Z31, Z17, Z17

nomask:
	RMSUM512(0, Z8)
	RMSUM512(1, Z9)
	RMSUM512(2, Z10)
	RMSUM512(3, Z11)
	RMSUM512(4, Z12)
	RMSUM512(5, Z13)
	RMSUM512(6, Z14)
	RMSUM512(7, Z15)
	ADDQ $32, DX
	ADDQ A_SXSTRIDE(R15), SI

nom:
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ4VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RROW512(2, Z22, Z2)
	RROW512(3, Z23, Z3)
	RROW512(4, Z24, Z4)
	RROW512(5, Z25, Z5)
	RROW512(6, Z26, Z6)
	RROW512(7, Z27, Z7)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	FOLD512(Z2, Z10, Y2, X2)
	FOLD512(Z3, Z11, Y3, X3)
	FOLD512(Z4, Z12, Y4, X4)
	FOLD512(Z5, Z13, Y5, X5)
	FOLD512(Z6, Z14, Y6, X6)
	FOLD512(Z7, Z15, Y7, X7)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VHADDPS X5, X4, X4
	VHADDPS X7, X6, X6
	VHADDPS X6, X4, X4
	VMOVUPS X0, (DI)
	VMOVUPS X4, 16(DI)
	ADDQ R8, R10
	ADDQ $32, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR4Q4avx512(a *qgemvArgs): 4 input rows.
TEXT ·qgemvR4Q4avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	RPROSTART512

group:
	RDBUF512
	TESTQ DX, DX
	JZ nom
	RMLOAD512
	LEAQ 64(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	VPANDD Z31, Z17, Z17

nomask:
	RMSUM512(0, Z8)
	RMSUM512(1, Z9)
	RMSUM512(2, Z10)
	RMSUM512(3, Z11)
	ADDQ $32, DX
	ADDQ A_SXSTRIDE(R15), SI

nom:
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ4VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RROW512(2, Z22, Z2)
	RROW512(3, Z23, Z3)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	FOLD512(Z2, Z10, Y2, X2)
	FOLD512(Z3, Z11, Y3, X3)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, (DI)
	ADDQ R8, R10
	ADDQ $16, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR2Q4avx512(a *qgemvArgs): 2 input rows.
TEXT ·qgemvR2Q4avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	RPROSTART512

group:
	RDBUF512
	TESTQ DX, DX
	JZ nom
	RMLOAD512
	LEAQ 64(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	VPANDD Z31, Z17, Z17

nomask:
	RMSUM512(0, Z8)
	RMSUM512(1, Z9)
	ADDQ $32, DX
	ADDQ A_SXSTRIDE(R15), SI

nom:
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ4VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	VHADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VMOVSD X0, (DI)
	ADDQ R8, R10
	ADDQ $8, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR8Q8avx512(a *qgemvArgs): 8 input rows, Q8_0.
TEXT ·qgemvR8Q8avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
	RPROSTART512

group:
	RDBUF512
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ8VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RROW512(2, Z22, Z2)
	RROW512(3, Z23, Z3)
	RROW512(4, Z24, Z4)
	RROW512(5, Z25, Z5)
	RROW512(6, Z26, Z6)
	RROW512(7, Z27, Z7)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	FOLD512(Z2, Z10, Y2, X2)
	FOLD512(Z3, Z11, Y3, X3)
	FOLD512(Z4, Z12, Y4, X4)
	FOLD512(Z5, Z13, Y5, X5)
	FOLD512(Z6, Z14, Y6, X6)
	FOLD512(Z7, Z15, Y7, X7)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VHADDPS X5, X4, X4
	VHADDPS X7, X6, X6
	VHADDPS X6, X4, X4
	VMOVUPS X0, (DI)
	VMOVUPS X4, 16(DI)
	ADDQ R8, R10
	ADDQ $32, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR4Q8avx512(a *qgemvArgs): 4 input rows, Q8_0.
TEXT ·qgemvR4Q8avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	RPROSTART512

group:
	RDBUF512
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ8VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RROW512(2, Z22, Z2)
	RROW512(3, Z23, Z3)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	FOLD512(Z2, Z10, Y2, X2)
	FOLD512(Z3, Z11, Y3, X3)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, (DI)
	ADDQ R8, R10
	ADDQ $16, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR2Q8avx512(a *qgemvArgs): 2 input rows, Q8_0.
TEXT ·qgemvR2Q8avx512(SB), NOSPLIT, $0-8
	RSTART512

row:
	ZERO8(Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	RPROSTART512

group:
	RDBUF512
	RPROSTEP512
	JLT group
	RMAINSTART

block:
	RQ8VAL512
	RROW512(0, Z20, Z0)
	RROW512(1, Z21, Z1)
	RMAINSTEP
	JLT block

	FOLD512(Z0, Z8, Y0, X0)
	FOLD512(Z1, Z9, Y1, X1)
	VHADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VMOVSD X0, (DI)
	ADDQ R8, R10
	ADDQ $8, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// AVX2 R-row kernels (R = 4, 2): the quad kernels' operations per input
// row; values in Y8-Y11, t in Y12, d in Y13.

#define RSTART256 \
	MOVQ a+0(FP), R15; \
	MOVQ A_ROWS(R15), R10; MOVQ A_ROWBYTES(R15), R8; MOVQ A_Y(R15), DI; \
	MOVQ A_DBUF(R15), AX; MOVQ A_QUADS(R15), R14; \
	MOVL $15, R9; MOVQ R9, X14; VPBROADCASTD X14, Y14

#define RPROSTART256 \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7; \
	MOVQ A_SX(R15), SI; MOVQ A_DOFF(R15), BX; MOVQ A_MOFF(R15), DX; XORQ CX, CX

#define RDBUF256 \
	VCVTPH2PS (R10)(BX*1), Y8; VMOVUPS Y8, (AX)(CX*1)

#define RMLOAD256 \
	VCVTPH2PS (R10)(DX*1), Y9

#define RMMASK256 \
	MOVQ A_MASK(R15), R9; VMOVUPS (R9), Y15; VANDPS Y15, Y9, Y9

#define RMSUM256(r, ym) \
	VFMADD231PS (r*32)(SI), Y9, ym

#define RPROSTEP256 \
	ADDQ $16, BX; ADDQ $32, CX; CMPQ CX, A_NGB(R15)

// RBEGIN256 ends the prologue: the inputs, and Q4_0's 8.0 in Y15.
#define RBEGIN256 \
	MOVQ A_X(R15), SI; XORQ BX, BX; XORQ CX, CX; \
	MOVQ A_TABLE(R15), R9; TESTQ R9, R9; JZ 2(PC); VBROADCASTSS (R9), Y15

#define RROW256(r, yacc) \
	VMULPS (r*128)(SI), Y8, Y12; \
	VFMADD231PS (r*128+32)(SI), Y9, Y12; \
	VFMADD231PS (r*128+64)(SI), Y10, Y12; \
	VFMADD231PS (r*128+96)(SI), Y11, Y12; \
	VFMADD231PS Y13, Y12, yacc

#define RQ4VAL256 \
	VPMOVZXBD (R10)(BX*1), Y8; VPMOVZXBD 8(R10)(BX*1), Y9; \
	VPSRLD $4, Y8, Y10; VPSRLD $4, Y9, Y11; \
	VPAND Y14, Y8, Y8; VPAND Y14, Y9, Y9; \
	VCVTDQ2PS Y8, Y8; VCVTDQ2PS Y9, Y9; VCVTDQ2PS Y10, Y10; VCVTDQ2PS Y11, Y11; \
	MOVQ A_TABLE(R15), R9; TESTQ R9, R9; JZ 5(PC); \
	SUB8

#define RQ8VAL256 \
	VPMOVSXBD (R10)(BX*2), Y8; VPMOVSXBD 8(R10)(BX*2), Y9; \
	VPMOVSXBD 16(R10)(BX*2), Y10; VPMOVSXBD 24(R10)(BX*2), Y11; \
	VCVTDQ2PS Y8, Y8; VCVTDQ2PS Y9, Y9; VCVTDQ2PS Y10, Y10; VCVTDQ2PS Y11, Y11

#define RDBC256 \
	VBROADCASTSS (AX)(CX*1), Y13

#define RMAINSTEP256 \
	ADDQ A_XSTRIDE(R15), SI; ADDQ $4, CX; ADDQ $16, BX; CMPQ BX, A_NB16(R15)

#define FOLD256(yacc, ym, xacc, xt) \
	VADDPS ym, yacc, yacc; VEXTRACTF128 $1, yacc, xt; VADDPS xt, xacc, xacc

// func qgemvR4Q4avx2(a *qgemvArgs)
TEXT ·qgemvR4Q4avx2(SB), NOSPLIT, $0-8
	RSTART256

row:
	RPROSTART256

group:
	RDBUF256
	TESTQ DX, DX
	JZ nom
	RMLOAD256
	LEAQ 32(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	RMMASK256

nomask:
	RMSUM256(0, Y4)
	RMSUM256(1, Y5)
	RMSUM256(2, Y6)
	RMSUM256(3, Y7)
	ADDQ $16, DX
	ADDQ A_SXSTRIDE(R15), SI

nom:
	RPROSTEP256
	JLT group
	RBEGIN256

block:
	RQ4VAL256
	RDBC256
	RROW256(0, Y0)
	RROW256(1, Y1)
	RROW256(2, Y2)
	RROW256(3, Y3)
	RMAINSTEP256
	JLT block

	FOLD256(Y0, Y4, X0, X12)
	FOLD256(Y1, Y5, X1, X13)
	FOLD256(Y2, Y6, X2, X8)
	FOLD256(Y3, Y7, X3, X9)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, (DI)
	ADDQ R8, R10
	ADDQ $16, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR2Q4avx2(a *qgemvArgs)
TEXT ·qgemvR2Q4avx2(SB), NOSPLIT, $0-8
	RSTART256

row:
	RPROSTART256

group:
	RDBUF256
	TESTQ DX, DX
	JZ nom
	RMLOAD256
	LEAQ 32(CX), R9
	CMPQ R9, A_NGB(R15)
	JNE nomask
	RMMASK256

nomask:
	RMSUM256(0, Y4)
	RMSUM256(1, Y5)
	ADDQ $16, DX
	ADDQ A_SXSTRIDE(R15), SI

nom:
	RPROSTEP256
	JLT group
	RBEGIN256

block:
	RQ4VAL256
	RDBC256
	RROW256(0, Y0)
	RROW256(1, Y1)
	RMAINSTEP256
	JLT block

	FOLD256(Y0, Y4, X0, X12)
	FOLD256(Y1, Y5, X1, X13)
	VHADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VMOVSD X0, (DI)
	ADDQ R8, R10
	ADDQ $8, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR4Q8avx2(a *qgemvArgs)
TEXT ·qgemvR4Q8avx2(SB), NOSPLIT, $0-8
	RSTART256

row:
	RPROSTART256

group:
	RDBUF256
	RPROSTEP256
	JLT group
	RBEGIN256

block:
	RQ8VAL256
	RDBC256
	RROW256(0, Y0)
	RROW256(1, Y1)
	RROW256(2, Y2)
	RROW256(3, Y3)
	RMAINSTEP256
	JLT block

	FOLD256(Y0, Y4, X0, X12)
	FOLD256(Y1, Y5, X1, X13)
	FOLD256(Y2, Y6, X2, X8)
	FOLD256(Y3, Y7, X3, X9)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, (DI)
	ADDQ R8, R10
	ADDQ $16, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qgemvR2Q8avx2(a *qgemvArgs)
TEXT ·qgemvR2Q8avx2(SB), NOSPLIT, $0-8
	RSTART256

row:
	RPROSTART256

group:
	RDBUF256
	RPROSTEP256
	JLT group
	RBEGIN256

block:
	RQ8VAL256
	RDBC256
	RROW256(0, Y0)
	RROW256(1, Y1)
	RMAINSTEP256
	JLT block

	FOLD256(Y0, Y4, X0, X12)
	FOLD256(Y1, Y5, X1, X13)
	VHADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VMOVSD X0, (DI)
	ADDQ R8, R10
	ADDQ $8, DI
	DECQ R14
	JNZ row
	VZEROUPPER
	RET

// func qdequant512(qs *byte, d, m *uint16, nb int, table, dst *float32, q8 bool)
//
// Dequantizes nb blocks of one row into dst (32 floats each), as
// dequantRange does, value for value: Q8_0 float(q)·d; Q4 through the
// table (Q4_0's -8..7, Q4_1's 0..15) times d, plus m for Q4_1 (m not
// nil), each product rounded before the sum (no fused adds).
TEXT ·qdequant512(SB), NOSPLIT, $0-49
	MOVQ qs+0(FP), SI
	MOVQ d+8(FP), DX
	MOVQ m+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ table+32(FP), AX
	MOVQ dst+40(FP), DI
	MOVBLZX q8+48(FP), R9
	TESTQ CX, CX
	JZ done
	TESTQ R9, R9
	JNZ q8loop
	VMOVUPS (AX), Z30

q4loop:
	VPBROADCASTW (DX), Z2
	VCVTPH2PS Y2, Z2
	VPMOVZXBD (SI), Z0
	VPSRLD $4, Z0, Z1
	VPERMPS Z30, Z0, Z0
	VPERMPS Z30, Z1, Z1
	VMULPS Z2, Z0, Z0
	VMULPS Z2, Z1, Z1
	TESTQ R8, R8
	JZ q4store
	VPBROADCASTW (R8), Z3
	VCVTPH2PS Y3, Z3
	VADDPS Z3, Z0, Z0
	VADDPS Z3, Z1, Z1
	ADDQ $2, R8

q4store:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ $16, SI
	ADDQ $2, DX
	ADDQ $128, DI
	DECQ CX
	JNZ q4loop
	JMP done

q8loop:
	VPBROADCASTW (DX), Z2
	VCVTPH2PS Y2, Z2
	VPMOVSXBD (SI), Z0
	VPMOVSXBD 16(SI), Z1
	VCVTDQ2PS Z0, Z0
	VCVTDQ2PS Z1, Z1
	VMULPS Z2, Z0, Z0
	VMULPS Z2, Z1, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ $32, SI
	ADDQ $2, DX
	ADDQ $128, DI
	DECQ CX
	JNZ q8loop

done:
	VZEROUPPER
	RET

// --- int8 inputs (quant8.go): AVX512_VNNI's VPDPBUSD, 64 products of a
// u8 and an s8 summed 4 to a lane per instruction. ---
//
// The input comes quantized and laid out by prep8 (quant_amd64.go) in
// sub-groups of 4 blocks: for Q4, 64 bytes of the blocks' values 0-15
// (16 per block), 64 of their values 16-31, then 16 int32 corrections
// (Q4_0: -8·Σq of block j in lane 4j); for Q8_0, the 4 blocks' 128
// bytes, then two vectors of corrections (-128·Σq of a block in its
// first lane: the weights are made unsigned by flipping their top bit,
// w+128). A sub-group's integer sums land in lanes 4j..4j+3 for block j
// (Q8: lanes 8j.. of two vectors), are converted exactly (they fit 24
// bits), and scaled by d·dx spread over those lanes (VPERMPS of the 16
// blocks' d·dx, Z8-Z11 per row, with A_IDX's indices). The group's d are
// converted 16 at a time, the last group's lanes past the row masked to
// zero (their scale must not be NaN: the sums there are 0, the inputs
// past the row being zero).

#define B_X 0
#define B_DX 8
#define B_SXQ 16
#define B_ROWS 24
#define B_ROWBYTES 32
#define B_NB 40
#define B_DOFF 48
#define B_MOFF 56
#define B_QUADS 64
#define B_IDX 72
#define B_MASK 80
#define B_Y 88
#define B_ACC 96

// At a group's first block (CX): D8LOAD converts the four rows' 16 d
// into Z8-Z11, D8MASK masks the last group's lanes past the row, D8DX
// multiplies them by the input's dx; with Q4_1 M8LOAD, M8MASK and M8SUM
// add m·dx·Σq to Z4-Z7.
#define D8LOAD \
	MOVQ CX, R9; SHLQ $1, R9; ADDQ B_DOFF(R15), R9; \
	VCVTPH2PS (R10)(R9*1), Z8; VCVTPH2PS (R11)(R9*1), Z9; \
	VCVTPH2PS (R12)(R9*1), Z10; VCVTPH2PS (R13)(R9*1), Z11

#define D8MASK \
	VPANDD Z31, Z8, Z8; VPANDD Z31, Z9, Z9; VPANDD Z31, Z10, Z10; VPANDD Z31, Z11, Z11

#define D8DX \
	MOVQ B_DX(R15), AX; VMOVUPS (AX)(CX*4), Z18; \
	VMULPS Z18, Z8, Z8; VMULPS Z18, Z9, Z9; VMULPS Z18, Z10, Z10; VMULPS Z18, Z11, Z11

#define M8LOAD \
	MOVQ CX, AX; SHLQ $1, AX; ADDQ AX, R9; \
	VCVTPH2PS (R10)(R9*1), Z14; VCVTPH2PS (R11)(R9*1), Z15; \
	VCVTPH2PS (R12)(R9*1), Z16; VCVTPH2PS (R13)(R9*1), Z17

#define M8MASK \
	VPANDD Z31, Z14, Z14; VPANDD Z31, Z15, Z15; VPANDD Z31, Z16, Z16; VPANDD Z31, Z17, Z17

#define M8SUM \
	MOVQ B_SXQ(R15), AX; VMOVUPS (AX)(CX*4), Z18; \
	VFMADD231PS Z18, Z14, Z4; VFMADD231PS Z18, Z15, Z5; VFMADD231PS Z18, Z16, Z6; VFMADD231PS Z18, Z17, Z7

// Q4ROW8: row's 4 blocks (64 bytes at BX) unpacked to u8 nibbles, dotted
// with the input's, (Q4_0: corrected), converted, scaled, summed.
#define Q4ROW8(row, zds, zacc) \
	VMOVDQU64 (row)(BX*1), Z14; VPSRLW $4, Z14, Z15; \
	VPANDD Z28, Z14, Z14; VPANDD Z28, Z15, Z15; \
	VPXORD Z16, Z16, Z16; VPDPBUSD (SI), Z14, Z16; VPDPBUSD 64(SI), Z15, Z16; \
	VPADDD 128(SI), Z16, Z16; \
	VCVTDQ2PS Z16, Z16; VPERMPS zds, Z12, Z17; VFMADD231PS Z17, Z16, zacc

// Q8ROW8: row's 4 blocks (128 bytes at BX) made unsigned, dotted in two
// vectors of 2 blocks, corrected, converted, scaled, summed.
#define Q8ROW8(row, zds, zacc) \
	VPXORD (row)(BX*1), Z30, Z14; VPXORD 64(row)(BX*1), Z30, Z15; \
	VPXORD Z16, Z16, Z16; VPXORD Z17, Z17, Z17; \
	VPDPBUSD (SI), Z14, Z16; VPDPBUSD 64(SI), Z15, Z17; \
	VPADDD 128(SI), Z16, Z16; VPADDD 192(SI), Z17, Z17; \
	VCVTDQ2PS Z16, Z16; VCVTDQ2PS Z17, Z17; \
	VPERMPS zds, Z12, Z18; VPERMPS zds, Z29, Z19; \
	VFMADD231PS Z18, Z16, zacc; VFMADD231PS Z19, Z17, zacc

// func qgemv4Q4vnni(a *q8Args)
//
// Q4_0 and Q4_1, quads of rows, one input row. R15 the arguments, R10-R13
// the rows, R8 their stride, DI the outputs, R14 the quads left, BX the
// values' offset (64 per sub-group), CX the block (4 per sub-group), SI
// the packed input (192 per sub-group); Z0-Z3 the sums, Z4-Z7 the m
// terms, Z8-Z11 the group's d·dx, Z12 the sub-group's indices, Z28 the
// nibble mask, Z31 the last group's lanes.
TEXT ·qgemv4Q4vnni(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ B_MASK(R15), AX
	VMOVUPS (AX), Z31
	MOVL $15, AX
	VPBROADCASTB AX, Z28
	MOVQ B_ROWS(R15), R10
	MOVQ B_ROWBYTES(R15), R8
	MOVQ B_Y(R15), DI
	MOVQ B_QUADS(R15), R14

quad:
	QUAD_ROWS
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	XORQ BX, BX
	XORQ CX, CX
	MOVQ B_X(R15), SI

sub:
	TESTQ $15, CX
	JNZ nogroup
	D8LOAD
	LEAQ 16(CX), AX
	CMPQ AX, B_NB(R15)
	JLE nomask
	D8MASK

nomask:
	D8DX
	MOVQ B_MOFF(R15), R9
	TESTQ R9, R9
	JZ nogroup
	M8LOAD
	LEAQ 16(CX), AX
	CMPQ AX, B_NB(R15)
	JLE nommask
	M8MASK

nommask:
	M8SUM

nogroup:
	MOVQ CX, R9
	ANDQ $12, R9
	SHLQ $4, R9
	MOVQ B_IDX(R15), AX
	VMOVDQU32 (AX)(R9*1), Z12
	Q4ROW8(R10, Z8, Z0)
	Q4ROW8(R11, Z9, Z1)
	Q4ROW8(R12, Z10, Z2)
	Q4ROW8(R13, Z11, Z3)
	ADDQ $64, BX
	ADDQ $4, CX
	ADDQ $192, SI
	CMPQ CX, B_NB(R15)
	JLT sub

	REDUCE512
	CMPQ B_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// func qgemv4Q8vnni(a *q8Args)
//
// Q8_0: qgemv4Q4vnni's plan, 128 bytes of values per sub-group (BX) and
// 256 of input (SI); Z12 and Z29 the two vectors' indices, Z30 the top
// bits.
TEXT ·qgemv4Q8vnni(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), R15
	MOVQ B_MASK(R15), AX
	VMOVUPS (AX), Z31
	MOVL $0x80, AX
	VPBROADCASTB AX, Z30
	MOVQ B_ROWS(R15), R10
	MOVQ B_ROWBYTES(R15), R8
	MOVQ B_Y(R15), DI
	MOVQ B_QUADS(R15), R14

quad:
	QUAD_ROWS
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	XORQ BX, BX
	XORQ CX, CX
	MOVQ B_X(R15), SI

sub:
	TESTQ $15, CX
	JNZ nogroup
	D8LOAD
	LEAQ 16(CX), AX
	CMPQ AX, B_NB(R15)
	JLE nomask
	D8MASK

nomask:
	D8DX

nogroup:
	MOVQ CX, R9
	ANDQ $12, R9
	SHLQ $5, R9
	MOVQ B_IDX(R15), AX
	VMOVDQU32 (AX)(R9*1), Z12
	VMOVDQU32 64(AX)(R9*1), Z29
	Q8ROW8(R10, Z8, Z0)
	Q8ROW8(R11, Z9, Z1)
	Q8ROW8(R12, Z10, Z2)
	Q8ROW8(R13, Z11, Z3)
	ADDQ $128, BX
	ADDQ $4, CX
	ADDQ $256, SI
	CMPQ CX, B_NB(R15)
	JLT sub

	REDUCE512
	CMPQ B_ACC(R15), $0
	JEQ store
	VADDPS (DI), X0, X0

store:
	VMOVUPS X0, (DI)
	LEAQ (R13)(R8*1), R10
	ADDQ $16, DI
	DECQ R14
	JNZ quad
	VZEROUPPER
	RET

// func quant8Row512(x *float32, nb int, q *int8, dx, sxq *float32, sum *int32)
//
// quantizeInput8 for one row of nb blocks: per block, d = max|x|/127,
// id = 1/d (0 when d is), q = x·id rounded to nearest even (VCVTPS2DQ),
// the sum of q, dx·Σq.
TEXT ·quant8Row512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), DI
	MOVQ dx+24(FP), R8
	MOVQ sxq+32(FP), R9
	MOVQ sum+40(FP), R10
	TESTQ CX, CX
	JZ done
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL $0x42fe0000, AX // 127.0
	VMOVD AX, X30
	MOVL $0x3f800000, AX // 1.0
	VMOVD AX, X29

block:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z31, Z0, Z2
	VPANDD Z31, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2
	VDIVSS X30, X2, X4 // d = amax/127
	VXORPS X5, X5, X5
	VUCOMISS X5, X4
	JEQ zero
	VDIVSS X4, X29, X5 // id = 1/d

zero:
	VBROADCASTSS X5, Z5
	VMULPS Z5, Z0, Z0
	VMULPS Z5, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVSDB Z0, X6
	VPMOVSDB Z1, X7
	VMOVDQU X6, (DI)
	VMOVDQU X7, 16(DI)
	VPADDD Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, AX
	MOVL AX, (R10)
	VMOVSS X4, (R8)
	VCVTSI2SSL AX, X1, X1
	VMULSS X1, X4, X1
	VMOVSS X1, (R9)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $4, R10
	DECQ CX
	JNZ block

done:
	VZEROUPPER
	RET
