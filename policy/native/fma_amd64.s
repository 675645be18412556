//go:build goexperiment.simd && amd64

#include "textflag.h"

// Register-only FMA loops: the machine's fused multiply-add peak, the
// physical limit make bench reports every row's utilisation against. No
// memory is touched inside the loop; the independent accumulators cover
// the FMA latency times the number of FMA ports. Each loop starts its
// accumulators at zero, runs n iterations of acc += a*b on every one, and
// stores the sum of its accumulators' lanes into out (so the result can
// be checked: 8 or 16 lanes x accumulators x n x a x b). Both end with
// VZEROUPPER (see kernels_simd_amd64.go).

// func fmaLoop256(n int, a, b float32, out *[8]float32)
//
// AVX2: 12 accumulators Y0-Y11, a in Y12, b in Y13; 192 FLOP per iteration.
TEXT ·fmaLoop256(SB), NOSPLIT, $0-24
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Y12
	VBROADCASTSS b+12(FP), Y13
	MOVQ         out+16(FP), DI
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VXORPS       Y2, Y2, Y2
	VXORPS       Y3, Y3, Y3
	VXORPS       Y4, Y4, Y4
	VXORPS       Y5, Y5, Y5
	VXORPS       Y6, Y6, Y6
	VXORPS       Y7, Y7, Y7
	VXORPS       Y8, Y8, Y8
	VXORPS       Y9, Y9, Y9
	VXORPS       Y10, Y10, Y10
	VXORPS       Y11, Y11, Y11
	TESTQ        CX, CX
	JLE          done256

loop256:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ        CX
	JNZ         loop256

done256:
	VADDPS  Y1, Y0, Y0
	VADDPS  Y3, Y2, Y2
	VADDPS  Y5, Y4, Y4
	VADDPS  Y7, Y6, Y6
	VADDPS  Y9, Y8, Y8
	VADDPS  Y11, Y10, Y10
	VADDPS  Y2, Y0, Y0
	VADDPS  Y6, Y4, Y4
	VADDPS  Y10, Y8, Y8
	VADDPS  Y4, Y0, Y0
	VADDPS  Y8, Y0, Y0
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func fmaLoop512(n int, a, b float32, out *[16]float32)
//
// AVX-512: 16 accumulators Z0-Z15, a in Z16, b in Z17; 512 FLOP per
// iteration.
TEXT ·fmaLoop512(SB), NOSPLIT, $0-24
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Z16
	VBROADCASTSS b+12(FP), Z17
	MOVQ         out+16(FP), DI
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3
	VPXORD       Z4, Z4, Z4
	VPXORD       Z5, Z5, Z5
	VPXORD       Z6, Z6, Z6
	VPXORD       Z7, Z7, Z7
	VPXORD       Z8, Z8, Z8
	VPXORD       Z9, Z9, Z9
	VPXORD       Z10, Z10, Z10
	VPXORD       Z11, Z11, Z11
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z14, Z14, Z14
	VPXORD       Z15, Z15, Z15
	TESTQ        CX, CX
	JLE          done512

loop512:
	VFMADD231PS Z16, Z17, Z0
	VFMADD231PS Z16, Z17, Z1
	VFMADD231PS Z16, Z17, Z2
	VFMADD231PS Z16, Z17, Z3
	VFMADD231PS Z16, Z17, Z4
	VFMADD231PS Z16, Z17, Z5
	VFMADD231PS Z16, Z17, Z6
	VFMADD231PS Z16, Z17, Z7
	VFMADD231PS Z16, Z17, Z8
	VFMADD231PS Z16, Z17, Z9
	VFMADD231PS Z16, Z17, Z10
	VFMADD231PS Z16, Z17, Z11
	VFMADD231PS Z16, Z17, Z12
	VFMADD231PS Z16, Z17, Z13
	VFMADD231PS Z16, Z17, Z14
	VFMADD231PS Z16, Z17, Z15
	DECQ        CX
	JNZ         loop512

done512:
	VADDPS  Z1, Z0, Z0
	VADDPS  Z3, Z2, Z2
	VADDPS  Z5, Z4, Z4
	VADDPS  Z7, Z6, Z6
	VADDPS  Z9, Z8, Z8
	VADDPS  Z11, Z10, Z10
	VADDPS  Z13, Z12, Z12
	VADDPS  Z15, Z14, Z14
	VADDPS  Z2, Z0, Z0
	VADDPS  Z6, Z4, Z4
	VADDPS  Z10, Z8, Z8
	VADDPS  Z14, Z12, Z12
	VADDPS  Z4, Z0, Z0
	VADDPS  Z12, Z8, Z8
	VADDPS  Z8, Z0, Z0
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET
