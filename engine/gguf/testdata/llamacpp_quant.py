"""Optional oracle: quantizes with llama.cpp's own ggml, the
libggml-base.so named by $GGML_LIB (built by hand, see quant_test.go), for
the opt-in Go test TestQuantizeMatchesLlamaCpp.

usage: GGML_LIB=.../libggml-base.so llamacpp_quant.py DIR

Reads DIR/manifest.json (jobs {"op", "type", "ggml_type", "rows", "cols",
"in", "out"}). "quantize" quantizes float32 input with ggml_quantize_chunk
and no importance matrix (which runs quantize_row_*_ref) and writes the raw
blocks; "dequantize" runs dequantize_row_* on raw blocks and writes float32;
"gguf_read" opens the GGUF file "in" with ggml's gguf_init_from_file and
writes a JSON summary (version, alignment, data offset, keys and types,
tensors with type and offset) to "out".
"""
import ctypes
import json
import os
import sys

import numpy as np


def load_ggml():
    lib = ctypes.CDLL(os.environ["GGML_LIB"])
    if not hasattr(lib, "ggml_quantize_chunk"):
        raise SystemExit(f"{os.environ['GGML_LIB']} has no ggml_quantize_chunk")
    return lib


class InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def gguf_read(ggml, path):
    ggml.gguf_init_from_file.restype = ctypes.c_void_p
    ggml.gguf_init_from_file.argtypes = [ctypes.c_char_p, InitParams]
    ctx = ggml.gguf_init_from_file(path.encode(), InitParams(True, None))
    if not ctx:
        return {"error": "gguf_init_from_file failed"}
    sig = {
        "gguf_get_version": ([ctypes.c_void_p], ctypes.c_uint32),
        "gguf_get_alignment": ([ctypes.c_void_p], ctypes.c_size_t),
        "gguf_get_data_offset": ([ctypes.c_void_p], ctypes.c_size_t),
        "gguf_get_n_kv": ([ctypes.c_void_p], ctypes.c_int64),
        "gguf_get_key": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_char_p),
        "gguf_get_kv_type": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_int),
        "gguf_get_n_tensors": ([ctypes.c_void_p], ctypes.c_int64),
        "gguf_get_tensor_name": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_char_p),
        "gguf_get_tensor_type": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_int),
        "gguf_get_tensor_offset": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_size_t),
        "gguf_get_tensor_size": ([ctypes.c_void_p, ctypes.c_int64], ctypes.c_size_t),
        "gguf_free": ([ctypes.c_void_p], None),
    }
    for name, (args, res) in sig.items():
        getattr(ggml, name).argtypes = args
        getattr(ggml, name).restype = res
    out = {
        "version": ggml.gguf_get_version(ctx),
        "alignment": ggml.gguf_get_alignment(ctx),
        "data_offset": ggml.gguf_get_data_offset(ctx),
        "kv": [[ggml.gguf_get_key(ctx, i).decode(), ggml.gguf_get_kv_type(ctx, i)] for i in range(ggml.gguf_get_n_kv(ctx))],
        "tensors": [[ggml.gguf_get_tensor_name(ctx, i).decode(), ggml.gguf_get_tensor_type(ctx, i),
                     ggml.gguf_get_tensor_offset(ctx, i), ggml.gguf_get_tensor_size(ctx, i)]
                    for i in range(ggml.gguf_get_n_tensors(ctx))],
    }
    ggml.gguf_free(ctx)
    return out


def main(d):
    ggml = load_ggml()
    ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
    ggml.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    ggml.ggml_row_size.restype = ctypes.c_size_t
    ggml.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    with open(os.path.join(d, "manifest.json")) as f:
        jobs = json.load(f)
    for job in jobs:
        rows, cols = job["rows"], job["cols"]
        if job["op"] == "gguf_read":
            with open(os.path.join(d, job["out"]), "w") as f:
                json.dump(gguf_read(ggml, os.path.join(d, job["in"])), f)
            continue
        if job["op"] == "dequantize":
            fn = getattr(ggml, "dequantize_row_q" + job["type"][1:])
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
            raw = np.ascontiguousarray(np.fromfile(os.path.join(d, job["in"]), dtype=np.uint8))
            out = np.zeros(rows * cols, dtype="<f4")
            fn(raw.ctypes.data, out.ctypes.data, rows * cols)
            out.tofile(os.path.join(d, job["out"]))
            continue
        x = np.ascontiguousarray(np.fromfile(os.path.join(d, job["in"]), dtype="<f4").reshape(rows, cols))
        size = ggml.ggml_row_size(job["ggml_type"], cols) * rows
        out = np.zeros(size, dtype=np.uint8)
        n = ggml.ggml_quantize_chunk(job["ggml_type"], x.ctypes.data, out.ctypes.data, 0, rows, cols, None)
        if n != size:
            raise SystemExit(f"{job['type']}: wrote {n} bytes, expected {size}")
        out.tofile(os.path.join(d, job["out"]))


if __name__ == "__main__":
    main(sys.argv[1])
