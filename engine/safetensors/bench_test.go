package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"fusion/engine/tensor"
)

// writeBenchFile writes a safetensors file of about total bytes of BF16
// weights in 4 MiB tensors.
func writeBenchFile(b *testing.B, total int) string {
	b.Helper()
	const rows, cols = 1024, 2048 // 4 MiB of BF16
	var ts []tensor.Tensor
	for i := 0; i < total/(rows*cols*2); i++ {
		data := make([]byte, rows*cols*2)
		for j := 0; j < len(data); j += 2 {
			binary.LittleEndian.PutUint16(data[j:], tensor.F32ToBF16(float32(j%97)/97-0.5))
		}
		ts = append(ts, tensor.Tensor{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: tensor.BF16, Shape: []int64{rows, cols}, Data: data})
	}
	path := filepath.Join(b.TempDir(), "bench.safetensors")
	if err := WriteFile(path, ts, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	return path
}

// sumBF16 widens every BF16 value to float32 and sums, as a decode pass
// touches every weight once.
func sumBF16(d []byte) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(d); i += 8 {
		s0 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[i:])) << 16)
		s1 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[i+2:])) << 16)
		s2 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[i+4:])) << 16)
		s3 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[i+6:])) << 16)
	}
	for ; i+2 <= len(d); i += 2 {
		s0 += math.Float32frombits(uint32(binary.LittleEndian.Uint16(d[i:])) << 16)
	}
	return s0 + s1 + s2 + s3
}

// streamPass sums every tensor, tensors split between workers goroutines.
func streamPass(ts []tensor.Tensor, workers int) float32 {
	sums := make([]float32, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ts); i += workers {
				sums[w] += sumBF16(ts[i].Data)
			}
		}()
	}
	wg.Wait()
	var s float32
	for _, v := range sums {
		s += v
	}
	return s
}

// BenchmarkStream loads a 256 MiB BF16 file in each load mode and streams
// over all weight bytes twice on 2 goroutines. Reported: ns/op and MB/s for
// the whole open + 2 passes + close, plus load-ms, pass1-ms and pass2-ms.
// The file stays in the page cache between iterations (warm start).
//
//	go test -run '^$' -bench BenchmarkStream -benchtime 10x -count 3 ./engine/safetensors
func BenchmarkStream(b *testing.B) {
	const size = 256 << 20
	path := writeBenchFile(b, size)
	for _, mode := range []LoadMode{LoadRead, LoadMmap} {
		b.Run(mode.String(), func(b *testing.B) {
			b.SetBytes(size)
			var load, pass1, pass2 time.Duration
			for b.Loop() {
				t0 := time.Now()
				f, err := Open(path, mode)
				if err != nil {
					b.Fatal(err)
				}
				ts := f.Tensors()
				t1 := time.Now()
				s1 := streamPass(ts, 2)
				t2 := time.Now()
				s2 := streamPass(ts, 2)
				t3 := time.Now()
				if s1 != s2 {
					b.Fatalf("passes disagree: %v vs %v", s1, s2)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
				load += t1.Sub(t0)
				pass1 += t2.Sub(t1)
				pass2 += t3.Sub(t2)
			}
			n := float64(b.N)
			b.ReportMetric(float64(load.Milliseconds())/n, "load-ms")
			b.ReportMetric(float64(pass1.Milliseconds())/n, "pass1-ms")
			b.ReportMetric(float64(pass2.Milliseconds())/n, "pass2-ms")
		})
	}
}
