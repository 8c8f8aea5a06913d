"""Cross-checks between engine/gguf and the `gguf` Python package.

usage:
  gguf_interop.py dump FILE    read FILE with gguf.GGUFReader and print its
                               header, metadata and tensors (sha256 of the
                               bytes) as JSON
  gguf_interop.py write FILE   write FILE with gguf.GGUFWriter and print, as
                               JSON, what it holds (same shape as dump)
"""
import hashlib
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants


def dump(path):
    r = GGUFReader(path)
    meta = {}
    header = {}
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            header[key] = field.contents()
            continue
        entry = {"type": field.types[0].name}
        if field.types[0] == GGUFValueType.ARRAY:
            entry["elem"] = field.types[1].name if len(field.types) > 1 else None
        entry["value"] = field.contents()
        meta[key] = entry
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],  # innermost first, as stored
            "n_elements": int(t.n_elements),
            "n_bytes": int(t.n_bytes),
            "data_offset": int(t.data_offset),
            "sha256": hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest(),
        })
    return {"header": header, "alignment": int(r.alignment), "data_offset": int(r.data_offset),
            "meta": meta, "tensors": tensors}


def write(path):
    rng = np.random.default_rng(42)
    w = GGUFWriter(path, arch="qwen3")
    w.add_custom_alignment(64)
    meta = {
        "general.architecture": ("STRING", None, "qwen3"),
        "general.alignment": ("UINT32", None, 64),
    }

    def kv(key, vtype, value, sub=None):
        w.add_key_value(key, value, vtype, sub_type=sub)
        meta[key] = (vtype.name, sub.name if sub is not None else None, value)

    T = GGUFValueType
    kv("py.u8", T.UINT8, 255)
    kv("py.i8", T.INT8, -128)
    kv("py.u16", T.UINT16, 65535)
    kv("py.i16", T.INT16, -32768)
    kv("py.u32", T.UINT32, 4294967295)
    kv("py.i32", T.INT32, -2147483648)
    kv("py.f32", T.FLOAT32, 0.1)
    kv("py.u64", T.UINT64, 18446744073709551615)
    kv("py.i64", T.INT64, -9223372036854775808)
    kv("py.f64", T.FLOAT64, 2.5e-300)
    kv("py.bool", T.BOOL, False)
    kv("py.string", T.STRING, "Ġhello ✓ {{ bos_token }}")
    kv("py.arr.i32", T.ARRAY, [3, -1, 4], T.INT32)
    kv("py.arr.u64", T.ARRAY, [1, 2**63], T.UINT64)
    kv("py.arr.f32", T.ARRAY, [1.5, -0.25], T.FLOAT32)
    kv("py.arr.bool", T.ARRAY, [True, False], T.BOOL)
    kv("py.arr.string", T.ARRAY, ["Ġt", "he", "<|im_end|>"], T.STRING)
    kv("py.arr.nested", T.ARRAY, [[1, 2], [3]], T.ARRAY)

    tensors = []

    def tensor(name, arr, raw_dtype=None, type_name=None, shape=None):
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
        tensors.append({"name": name, "type": type_name, "shape": list(shape if shape else arr.shape),
                        "sha256": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()})

    x = rng.standard_normal((4, 64)).astype(np.float32)
    tensor("f32", x, type_name="F32")
    tensor("f16", x.astype(np.float16), type_name="F16")
    tensor("q8_0", quants.quantize(x, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0, "Q8_0", (4, 64))
    q4k = rng.integers(0, 256, size=(3, 144), dtype=np.uint8)
    q4k[:, 0:4] = np.array([0x00, 0x3c, 0x00, 0x38], dtype=np.uint8)  # d = 1, dmin = 0.5
    tensor("q4_k", q4k, GGMLQuantizationType.Q4_K, "Q4_K", (3, 256))
    tensor("bf16", quants.quantize(x[:1], GGMLQuantizationType.BF16), GGMLQuantizationType.BF16, "BF16", (1, 64))
    tensor("i32", np.arange(10, dtype=np.int32).reshape(2, 5), type_name="I32")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"meta": {k: {"type": t, "elem": s, "value": v} for k, (t, s, v) in meta.items()},
            "tensors": tensors}


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    out = dump(path) if cmd == "dump" else write(path)
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
