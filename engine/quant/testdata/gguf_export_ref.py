"""Checks GGUF files oQ wrote against the gguf Python package.

Arguments: triples SRC_DIR GGUF_FILE HF_ARCH. For each: the file is read
with gguf.GGUFReader; every tensor is matched with its source tensor by
the package's own Hugging Face -> GGUF name map (gguf.TensorNameMap), the
source rows permuted for llama's Q/K as llama.cpp's converter does; a
tensor of a type the package quantizes (F32, F16, BF16, Q8_0, Q5_0) must
equal gguf.quants.quantize of the source bit for bit; a K-quant (which the
package only dequantizes) is dequantized by it and its error reported.
Prints one JSON line per file.
"""
import json
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":
            v = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            v = np.frombuffer(buf, np.float16).astype(np.float32)
        elif info["dtype"] == "F32":
            v = np.frombuffer(buf, np.float32).copy()
        else:
            raise SystemExit("unexpected dtype %s" % info["dtype"])
        out[name] = v.reshape(info["shape"])
    return out


def rotary_interleave(w, heads):
    # rotate-half rows -> adjacent pairs, per head
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "mistral": gguf.MODEL_ARCH.LLAMA,
        "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3}
EXACT = {T.F32, T.F16, T.BF16, T.Q8_0, T.Q5_0}

args = sys.argv[1:]
for src, path, hf_arch in zip(args[0::3], args[1::3], args[2::3]):
    cfg = json.load(open(src + "/config.json"))
    weights = load_safetensors(src + "/model.safetensors")
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    layers = int(r.fields[arch + ".block_count"].parts[-1][0])
    names = gguf.TensorNameMap(ARCH[hf_arch], layers)
    by_gguf = {}
    for hf, w in weights.items():
        if hf == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        g = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit("no GGUF name for " + hf)
        if hf_arch in ("llama", "mistral"):
            if hf.endswith("q_proj.weight"):
                w = rotary_interleave(w, cfg["num_attention_heads"])
            elif hf.endswith("k_proj.weight"):
                w = rotary_interleave(w, cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
        by_gguf[g] = w
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        # Llama 3 scaling as llama.cpp's converter stores it: one factor
        # per rotated frequency.
        dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        old = rs["original_max_position_embeddings"]
        lo, hi, fac = rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
        factors = []
        for i in range(0, dim, 2):
            wavelen = 2 * np.pi * cfg.get("rope_theta", 10000.0) ** (i / dim)
            if wavelen < old / hi:
                factors.append(1.0)
            elif wavelen > old / lo:
                factors.append(fac)
            else:
                sm = (old / wavelen - lo) / (hi - lo)
                factors.append(1 / ((1 - sm) / fac + sm))
        by_gguf["rope_freqs.weight"] = np.array(factors, np.float32)
    report = {"arch": arch, "layers": layers,
              "file_type": int(r.fields["general.file_type"].parts[-1][0]),
              "tokens": len(r.fields["tokenizer.ggml.tokens"].data),
              "pre": bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode(),
              "exact": 0, "kquant": {}, "types": {}, "errors": []}
    seen = set()
    for t in r.tensors:
        seen.add(t.name)
        want = by_gguf.get(t.name)
        if want is None:
            report["errors"].append("unexpected tensor " + t.name)
            continue
        qt = T(t.tensor_type)
        report["types"][t.name] = qt.name
        got = np.asarray(t.data)
        if qt in EXACT:
            ref = gguf.quants.quantize(want.astype(np.float32), qt)
            if ref.tobytes() != got.tobytes():
                report["errors"].append("%s (%s): bytes differ from gguf.quants.quantize" % (t.name, qt.name))
            else:
                report["exact"] += 1
        else:
            deq = gguf.quants.dequantize(got, qt).reshape(want.shape)
            err = float(np.abs(deq - want).max() / max(float(np.abs(want).max()), 1e-30))
            report["kquant"][t.name] = err
    for g in by_gguf:
        if g not in seen:
            report["errors"].append("missing tensor " + g)
    print(json.dumps(report))
