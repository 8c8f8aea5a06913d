"""Quantizes GGUF files with llama.cpp's own llama-quantize code
(llama_model_quantize through llama-cpp-python's bindings over the
libllama scripts/llamacpp.sh builds; PYTHONPATH names them).

Reads one JSON document on stdin:
  {"jobs": [{"in": GGUF, "out": GGUF, "ftype": LLAMA_FTYPE_MOSTLY_*}, ...]}
and writes each output with llama.cpp's default parameters (no importance
matrix). Prints one line per job: "ok OUT", or exits non-zero.
"""
import ctypes
import json
import sys

import llama_cpp


def main():
    req = json.load(sys.stdin)
    llama_cpp.llama_backend_init()
    for job in req["jobs"]:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = job["ftype"]
        params.nthread = 1
        rc = llama_cpp.llama_model_quantize(job["in"].encode(), job["out"].encode(), ctypes.byref(params))
        if rc != 0:
            sys.exit("llama_model_quantize %s (ftype %d): %d" % (job["in"], job["ftype"], rc))
        print("ok " + job["out"], flush=True)


if __name__ == "__main__":
    main()
