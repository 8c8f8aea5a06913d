package kernels

// cpuFeatures is what the SIMD kernels need from the CPU.
type cpuFeatures struct {
	avx2   bool // AVX2 + FMA + F16C
	avx512 bool // AVX-512 F/BW/VL/DQ (+ the AVX2 set)
	vnni   bool // AVX-512 VNNI: some LevelAVX512 kernels have a VNNI variant with the same bits
}
