// Shared macros for the amd64 kernels.

// HSUMY reduces the 8 floats of Y register y (whose low half is x) into
// the low lane of x, using t as a temporary.
#define HSUMY(y, x, t) \
	VEXTRACTF128 $1, y, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0x4e, x, t; \
	VADDPS       t, x, x; \
	VPERMILPS    $0xb1, x, t; \
	VADDSS       t, x, x

// HSUMZ reduces the 16 floats of Z register z (whose low halves are y and
// x) into the low lane of x, using ty and tx as temporaries.
#define HSUMZ(z, y, x, ty, tx) \
	VEXTRACTF64X4 $1, z, ty; \
	VADDPS        ty, y, y; \
	HSUMY(y, x, tx)
