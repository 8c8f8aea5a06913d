package kernels

import "fmt"

// Level is an instruction-set level a kernel implementation needs.
type Level uint8

// Levels, from the narrowest.
const (
	// LevelGeneric is pure Go; it runs everywhere.
	LevelGeneric Level = iota
	// LevelAVX2 needs AVX2, FMA and F16C (amd64).
	LevelAVX2
	// LevelAVX512 needs AVX-512 F, BW, VL and DQ on top of LevelAVX2
	// (amd64). Kernels without an AVX-512 version run their AVX2 one.
	LevelAVX512
)

func (l Level) String() string {
	switch l {
	case LevelGeneric:
		return "generic"
	case LevelAVX2:
		return "avx2"
	case LevelAVX512:
		return "avx512"
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// Supported reports whether this CPU (and build) can run level l.
func (l Level) Supported() bool {
	switch l {
	case LevelGeneric:
		return true
	case LevelAVX2:
		return features.avx2
	case LevelAVX512:
		return features.avx512
	}
	return false
}

// Detect returns the widest level this CPU supports.
func Detect() Level {
	switch {
	case features.avx512:
		return LevelAVX512
	case features.avx2:
		return LevelAVX2
	}
	return LevelGeneric
}

// Levels returns every level this CPU supports, narrowest first.
func Levels() []Level {
	var ls []Level
	for l := LevelGeneric; l <= LevelAVX512; l++ {
		if l.Supported() {
			ls = append(ls, l)
		}
	}
	return ls
}
