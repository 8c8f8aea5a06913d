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

	"fusion/engine/model"
)

// DTypeF32 is the wire dtype of hidden states and logits: little-endian
// float32, the activations' type on the CPU backend.
const DTypeF32 = "f32"

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
	if dtype != DTypeF32 {
		return nil, fmt.Errorf("pipeline: hidden dtype %q (want %s)", dtype, DTypeF32)
	}
	if uint64(rows)*uint64(cols)*4 != uint64(len(data)) {
		return nil, fmt.Errorf("pipeline: hidden of [%d, %d] in %d bytes", rows, cols, len(data))
	}
	v, err := decodeF32(data)
	if err != nil {
		return nil, err
	}
	return &model.Hidden{Rows: int(rows), Cols: int(cols), Data: v}, nil
}
