"""Reference (de)quantization with the `gguf` Python package, for the Go
parity tests in engine/gguf.

usage: quants_ref.py DIR

DIR/manifest.json lists jobs {"op": "dequantize"|"quantize", "type": NAME,
"rows": R, "cols": C, "in": FILE, "out": FILE}. dequantize reads R rows of
raw ggml blocks and writes R*C float32; quantize reads R*C float32 and writes
the raw blocks. Files are little-endian and relative to DIR.
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, quants


def main(d):
    with open(os.path.join(d, "manifest.json")) as f:
        jobs = json.load(f)
    for job in jobs:
        qtype = GGMLQuantizationType[job["type"]]
        rows, cols = job["rows"], job["cols"]
        src = os.path.join(d, job["in"])
        dst = os.path.join(d, job["out"])
        if job["op"] == "dequantize":
            raw = np.fromfile(src, dtype=np.uint8).reshape(rows, -1)
            out = quants.dequantize(raw, qtype)
            out = np.ascontiguousarray(out, dtype=np.float32).reshape(rows, cols)
        elif job["op"] == "quantize":
            x = np.fromfile(src, dtype="<f4").reshape(rows, cols)
            out = quants.quantize(x, qtype)
            out = np.ascontiguousarray(out).view(np.uint8)
        else:
            raise SystemExit(f"unknown op {job['op']}")
        out.tofile(dst)


if __name__ == "__main__":
    main(sys.argv[1])
