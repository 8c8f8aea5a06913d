package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"fusion/engine/quant"
)

const quantizeUsage = `usage: fusion models quantize [flags] SRC DST
       fusion models quantize --addr HOST:PORT [flags] MODEL

oQ: quantizes a float model (BF16/F16/F32 safetensors; llama, mistral,
qwen2, qwen3, phi3; or a float GGUF file of llama, qwen2, qwen3, qwen3moe,
read back into that layout) to MLX affine weights. Uniform settings write the same
bytes as mlx_lm.convert -q --q-bits B --q-group-size G; --target-bits asks
for mixed precision, each tensor at --bits or --high-bits (locally: any
of --widths in any of --group-sizes) so that the loss is least while the
true bits per weight (codes, scales and biases: 4-bit in groups of 64
with bf16 scales is 4.5) stay within the target. By default a tensor's sensitivity is its own quantization
error; --calibrate measures instead how far the model's predictions on a
calibration text (a bundled English text, or --calibration FILE) move when
that tensor alone is quantized (one forward pass per tensor).

--format gguf --type Q8_0|Q4_K_M|Q6_K|Q5_K_M|Q3_K_M|Q2_K writes one GGUF
file instead (DST.gguf; llama, mistral, qwen2, qwen3, qwen3_moe):
llama.cpp's tensor names, metadata and tokenizer keys, ggml's reference
quantizers, and llama.cpp's per-tensor mix (Q6_K output; more bits for
attn_v, ffn_down and attn_output in some layers).

Without --addr it reads the model directory (or .gguf file) SRC and writes
DST here; a quantized GGUF is refused (re-quantizing loses accuracy). With
--addr it asks that running node (or, with --node, another node of its
cluster) to quantize MODEL of its models directory as a job, and follows
its progress.

`

func runQuantize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models quantize", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, quantizeUsage); fs.PrintDefaults() }
	bits := fs.Int("bits", quant.DefaultBits, "bits per weight: 2, 3, 4, 5, 6 or 8 (the base of a mixed plan)")
	group := fs.Int("group-size", quant.DefaultGroupSize, "quantization group size: 32, 64 or 128")
	target := fs.Float64("target-bits", 0, "mixed precision at this average of true bits per weight, scales and biases counted (0: uniform)")
	high := fs.Int("high-bits", quant.DefaultHighBits, "bits of the raised tensors of a mixed plan")
	evaluate := fs.Bool("evaluate", false, "measure the perplexity of the source and the result on a bundled text")
	addr := fs.String("addr", "", "a running node's HTTP address: the node quantizes, as a job")
	apiKey := fs.String("api-key", "", "API key of the node (env FUSION_API_KEY)")
	caFile := fs.String("ca", "", "PEM CA certificate to trust for an https:// address")
	onNode := fs.String("node", "", "with --addr: the cluster node that quantizes (default the one at --addr)")
	name := fs.String("name", "", "with --addr: the new model's name (default MODEL-oqBITS, MODEL-oqTARGET or MODEL-TYPE)")
	format := fs.String("format", quant.FormatMLX, "output: mlx (a model directory) or gguf (one file)")
	ggufType := fs.String("type", "", "with --format gguf: Q8_0, Q4_K_M, Q6_K, Q5_K_M, Q3_K_M or Q2_K")
	calibrate := fs.Bool("calibrate", false, "with --target-bits: measure sensitivity on a calibration text (the bundled one, or --calibration)")
	calibFile := fs.String("calibration", "", "with --target-bits: a text file to calibrate on (implies --calibrate)")
	widths := fs.String("widths", "", "with --target-bits, without --addr: the bit widths a plan chooses from, e.g. 2,3,4,5,6,8 (default --bits and --high-bits)")
	groups := fs.String("group-sizes", "", "with --target-bits, without --addr: the group sizes a plan chooses from, e.g. 32,64,128 (default --group-size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := quant.Options{Bits: *bits, GroupSize: *group, TargetBits: *target, HighBits: *high, Format: *format, GGUFType: *ggufType}
	for _, l := range []struct {
		flag, val string
		to        *[]int
	}{{"widths", *widths, &o.Widths}, {"group-sizes", *groups, &o.GroupSizes}} {
		if l.val == "" {
			continue
		}
		if *addr != "" {
			return usagef("--%s works without --addr (the admin API takes bits and high_bits)", l.flag)
		}
		for _, f := range strings.Split(l.val, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return usagef("--%s: %q is not a number", l.flag, f)
			}
			*l.to = append(*l.to, v)
		}
	}
	switch {
	case *calibFile != "":
		b, err := os.ReadFile(expandHome(*calibFile))
		if err != nil {
			return usagef("--calibration: %v", err)
		}
		o.Calibration = string(b)
	case *calibrate:
		o.Calibration = quant.CalibrationText
	}
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	if *addr != "" {
		if fs.NArg() != 1 {
			return usagef("give one model of the node's models directory")
		}
		body := map[string]any{"model": fs.Arg(0), "bits": *bits, "group_size": *group, "target_bits": *target,
			"high_bits": *high, "evaluate": *evaluate, "name": *name, "node": *onNode}
		if o.Format == quant.FormatGGUF {
			body["format"], body["type"] = o.Format, o.GGUFType
		}
		if *calibFile != "" {
			body["calibration_text"] = o.Calibration
		} else if *calibrate {
			body["calibrate"] = true
		}
		j, err := runJobOnNode(ctx, *addr, *apiKey, *caFile, "/admin/api/oq/start", body, stderr)
		if err != nil {
			return err
		}
		var out json.RawMessage = j.Result
		fmt.Fprintf(stdout, "%s\n", out)
		return nil
	}
	if fs.NArg() != 2 {
		return usagef("give the source and destination directories")
	}
	src, dst := expandHome(fs.Arg(0)), expandHome(fs.Arg(1))
	p := &progressLine{w: stderr, unit: "steps"}
	o.Progress = func(done, total int) { p.update(int64(done), int64(total)) }
	o.Log = p.log
	res, err := quant.Quantize(ctx, src, dst, o)
	p.end()
	if err != nil {
		return err
	}
	out := map[string]any{"result": res}
	if *evaluate {
		s, err := quant.Perplexity(ctx, src, quant.EvalText, 0)
		if err != nil {
			return err
		}
		d, err := quant.Perplexity(ctx, res.Dir, quant.EvalText, 0)
		if err != nil {
			return err
		}
		out["source_score"], out["quantized_score"], out["perplexity_delta"] = s, d, d.Perplexity-s.Perplexity
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return nil
}
