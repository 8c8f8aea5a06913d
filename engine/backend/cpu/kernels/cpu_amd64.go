//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// features is the read-only CPU feature table, filled once at start-up.
var features = cpuFeatures{
	avx2: cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C,
	avx512: cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C &&
		cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ,
	vnni: cpu.X86.HasAVX512VNNI,
}
