package demo

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// Create builds the model opts describe and writes it into dir.
func Create(dir string, opts Options) (*Model, error) {
	m, err := Build(opts)
	if err != nil {
		return nil, err
	}
	return m, Write(dir, m)
}

// Write writes m into dir (created if needed) in m.Options.Format,
// replacing the files it writes and leaving others alone.
func Write(dir string, m *Model) error {
	if m.Options.Format == FormatGGUF {
		return writeGGUF(GGUFPath(dir), m)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ts, err := m.SafetensorsTensors()
	if err != nil {
		return err
	}
	format := "pt"
	if m.Options.Quantize != 0 {
		format = "mlx"
	}
	if err := safetensors.WriteFile(filepath.Join(dir, modelfile.SingleWeightsFile), ts, map[string]string{"format": format}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	files := map[string][]byte{}
	for name, v := range map[string]any{modelfile.ConfigFile: m.Config, modelfile.GenerationConfigFile: m.Generation} {
		if files[name], err = marshal(v, true); err != nil {
			return fmt.Errorf("demo: %s: %w", name, err)
		}
	}
	for name, b := range m.Tokenizer.Files {
		files[name] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

// SafetensorsTensors returns the tensors of model.safetensors: each weight
// in the model dtype, or, when quantizing, each linear and embedding whose
// input size is a multiple of the group size as an MLX affine triple
// (weight U32, scales and biases in the model dtype), exactly as
// mlx.core.quantize makes it; in the order the Python library writes.
func (m *Model) SafetensorsTensors() ([]tensor.Tensor, error) {
	o := m.Options
	var out []tensor.Tensor
	for _, t := range m.Tensors {
		if o.Quantize == 0 || !m.quantizable(t) {
			out = append(out, tensor.Tensor{Name: t.Name, DType: m.DType, Shape: t.Shape, Data: m.encode(t.Data)})
			continue
		}
		rows, cols := int(t.Shape[0]), int(t.Shape[1])
		packed, scales, biases, err := modelfile.QuantizeAffine(t.Data, rows, cols, o.GroupSize, o.Quantize)
		if err != nil {
			return nil, fmt.Errorf("demo: %s: %w", t.Name, err)
		}
		words := make([]byte, 4*len(packed))
		for i, w := range packed {
			binary.LittleEndian.PutUint32(words[4*i:], w)
		}
		path := strings.TrimSuffix(t.Name, ".weight")
		groups := int64(cols / o.GroupSize)
		out = append(out,
			tensor.Tensor{Name: t.Name, DType: tensor.U32, Shape: []int64{int64(rows), int64(modelfile.PackedCols(cols, o.Quantize))}, Data: words},
			tensor.Tensor{Name: path + ".scales", DType: m.DType, Shape: []int64{int64(rows), groups}, Data: m.encode(scales)},
			tensor.Tensor{Name: path + ".biases", DType: m.DType, Shape: []int64{int64(rows), groups}, Data: m.encode(biases)},
		)
	}
	safetensors.SortLikePython(out)
	return out, nil
}

// quantizable: linear layers and embeddings whose input size is a multiple
// of the group size, the rule mlx-lm quantizes by. Norms stay float.
func (m *Model) quantizable(t Tensor) bool {
	linear := strings.HasSuffix(t.Name, "_proj.weight") || t.Name == "model.embed_tokens.weight" || t.Name == "lm_head.weight"
	return linear && len(t.Shape) == 2 && t.Shape[1]%int64(m.Options.GroupSize) == 0
}
