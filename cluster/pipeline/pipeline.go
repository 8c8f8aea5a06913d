// Package pipeline carries a sharded model's steps between its stages:
// the Pipeline gRPC service a later stage serves, and the Client the
// first stage (and each middle stage, towards the next) sends through.
//
// One bidirectional stream per pipeline runs from stage i to stage i+1.
// A step goes down the chain as the hidden state after each stage's
// layers, with what the sampler needs (sampling.go), and comes back up as
// the tokens the last stage drew (or, for a sequence without a sampler
// there, its logits); releases (free) follow the same path. A stage keeps the KV caches of the sequences it
// saw on a stream for as long as the stream lives, so a broken link frees
// them everywhere below it. Every message carries the placement's
// generation: a stage that holds another generation refuses the stream
// (FailedPrecondition).
package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"

	"fusion/engine/model"
)

// Wire dtypes of hidden states: DTypeF32 is little-endian float32 (the
// activations' type on the CPU backend, and the logits' always); DTypeBF16
// is little-endian bfloat16, the top half of each float32, which a step
// uses when every value of its hidden state is a bfloat16 value — the
// activations of a bf16 model computed in its own type (MLX's native
// mode) — so the wire halves the bytes and loses nothing.
const (
	DTypeF32  = "f32"
	DTypeBF16 = "bf16"
)

// encodeHidden encodes v as bf16 when that is exact for every value, as
// f32 otherwise (at the first value that is not, so a float32 state costs
// a look at a value or two).
func encodeHidden(v []float32) (dtype string, b []byte) {
	for _, f := range v {
		if math.Float32bits(f)&0xffff != 0 {
			return DTypeF32, encodeF32(v)
		}
	}
	b = make([]byte, 2*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(f)>>16))
	}
	return DTypeBF16, b
}

// dtypeBytes is the bytes per value of a wire dtype (0: unknown).
func dtypeBytes(dtype string) uint64 {
	switch dtype {
	case DTypeF32:
		return 4
	case DTypeBF16:
		return 2
	}
	return 0
}

// ChunkBytes bounds the payload (hidden state or logits) of one message;
// a larger one goes in several messages with more set. It keeps every
// message under the members' gRPC receive limit (4 MiB and a little)
// whatever the step's rows or the vocabulary.
const ChunkBytes = 1 << 20

// chunks splits b into pieces of at most size bytes (one, maybe empty,
// at least).
func chunks(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > size {
		out = append(out, b[:size])
		b = b[size:]
	}
	return append(out, b)
}

// letTransportRun yields the processor once a message is handed to gRPC,
// whose transport writes it to the socket from a goroutine of its own.
// The sender goes on to compute (the next micro-batch's layers), and a
// compute kernel leaves no point at which Go can preempt it: with as
// many busy goroutines as processors (a stage with one core, or with
// Threads = GOMAXPROCS) the message would sit in gRPC's buffer until the
// forward pass ends — the next stage idle meanwhile, and the micro-batches
// in lock-step instead of overlapping (the 2-stage bench ran at one
// stage's rate). Yielding lets the writer, readied on this processor,
// send first. Twice: before flushing a batch of under 1,000 bytes (a
// step's answer of tokens) the writer yields once itself, to gather more
// (grpc-go's loopyWriter). A yield with nothing else to run costs well
// under a microsecond.
func letTransportRun() {
	runtime.Gosched()
	runtime.Gosched()
}

// ErrStale: a stage holds another generation of the placement.
var ErrStale = errors.New("pipeline: stale generation")

func encodeF32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func decodeF32(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("pipeline: %d bytes are not float32 values", len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// hidden decodes a step's hidden state, checking its shape.
func hidden(rows, cols uint32, dtype string, data []byte) (*model.Hidden, error) {
	size := dtypeBytes(dtype)
	if size == 0 {
		return nil, fmt.Errorf("pipeline: hidden dtype %q (want %s or %s)", dtype, DTypeF32, DTypeBF16)
	}
	if uint64(rows)*uint64(cols)*size != uint64(len(data)) {
		return nil, fmt.Errorf("pipeline: hidden of [%d, %d] %s in %d bytes", rows, cols, dtype, len(data))
	}
	if dtype == DTypeBF16 {
		v := make([]float32, len(data)/2)
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(data[2*i:])) << 16)
		}
		return &model.Hidden{Rows: int(rows), Cols: int(cols), Data: v}, nil
	}
	v, err := decodeF32(data)
	if err != nil {
		return nil, err
	}
	return &model.Hidden{Rows: int(rows), Cols: int(cols), Data: v}, nil
}
