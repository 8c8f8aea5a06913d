"""Checks dequantized-F32 twins of GGUF files against the gguf Python package.

Reads one JSON document on stdin: a list of
  {"file": QUANTIZED_GGUF, "twin": TWIN_GGUF,
   "tensors": [{"name", "type" (ggml type), "elements", "bytes",
                "offset" (in file), "twin_offset" (in twin)}, ...]}
For each tensor: its bytes in the quantized file, dequantized by
gguf.quants.dequantize, must equal the twin's float32 values bit for bit.
(The offsets come from the caller's GGUF reader: gguf.GGUFReader parses a
151,936-token vocabulary's metadata arrays element by element, which takes
minutes per file on a loaded machine.)
Prints one JSON line per pair: the number of tensors checked, the count of
each quantized type, the names of the tensors whose values differ.
"""
import json
import sys

import numpy as np
import gguf

for pair in json.load(sys.stdin):
    types, mismatched = {}, []
    for t in pair["tensors"]:
        qtype = gguf.GGMLQuantizationType(t["type"])
        types[qtype.name] = types.get(qtype.name, 0) + 1
        raw = np.memmap(pair["file"], dtype=np.uint8, mode="r", offset=t["offset"], shape=(t["bytes"],))
        if qtype == gguf.GGMLQuantizationType.F32:
            want = raw.view(np.float32)
        else:
            want = np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)
        got = np.memmap(pair["twin"], dtype=np.float32, mode="r", offset=t["twin_offset"], shape=(t["elements"],))
        if want.shape != got.shape or not np.array_equal(want.view(np.uint32), np.asarray(got).view(np.uint32)):
            mismatched.append(t["name"])
    print(json.dumps({"tensors": len(pair["tensors"]), "types": types, "mismatched": mismatched}), flush=True)
