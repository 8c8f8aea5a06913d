package safetensors

import "fmt"

// LoadMode says how a file's bytes get into memory.
type LoadMode uint8

const (
	// LoadDefault means DefaultLoadMode.
	LoadDefault LoadMode = iota
	// LoadRead reads the whole file with one read into one buffer.
	LoadRead
	// LoadMmap maps the file read-only; Close unmaps it.
	LoadMmap
)

// DefaultLoadMode is what LoadDefault means, chosen by BenchmarkStream (a
// 256 MiB BF16 file opened, then every weight widened to float32 and summed
// twice on 2 goroutines; 2-core AMD EPYC VM, file in the page cache):
//
//	        open     pass 1    pass 2    open+2 passes+close (3 runs of 10)
//	read    29 ms    55-59 ms  52-54 ms  139-140 ms (207 ms in the first run:
//	                                     faulting in the fresh 256 MiB buffer)
//	mmap    0.2 ms   53-55 ms  52-58 ms  106-113 ms
//
// Eight passes per open: read 52.0 ms a pass, mmap 53.5 ms. With the two
// cores shared with other work (load 4-5), passes took 159-215 ms read and
// 236-313 ms mmap. mmap only wins the one-off open (about 0.12 s per GB from
// a warm page cache); decoding streams every weight for every token, and
// there anonymous memory is as fast or faster (llama.cpp also decodes up
// to 2x slower from mmap'd weights on these VMs), and its pages cannot be
// dropped and re-faulted from disk under memory pressure mid-decode.
const DefaultLoadMode = LoadRead

// Resolve returns the concrete mode LoadDefault stands for.
func (m LoadMode) Resolve() LoadMode {
	if m == LoadDefault {
		return DefaultLoadMode
	}
	return m
}

func (m LoadMode) String() string {
	switch m {
	case LoadDefault:
		return "default"
	case LoadRead:
		return "read"
	case LoadMmap:
		return "mmap"
	}
	return fmt.Sprintf("LoadMode(%d)", uint8(m))
}

// ParseLoadMode parses "read", "mmap", or "" / "default".
func ParseLoadMode(s string) (LoadMode, error) {
	switch s {
	case "", "default":
		return LoadDefault, nil
	case "read":
		return LoadRead, nil
	case "mmap":
		return LoadMmap, nil
	}
	return LoadDefault, fmt.Errorf("safetensors: unknown load mode %q (want read or mmap)", s)
}
