"""Runs GGUF files through llama.cpp (llama-cpp-python's bindings over the
libllama scripts/llamacpp.sh builds; PYTHONPATH names them).

Reads one JSON document on stdin:
  {"threads": N, "top": K, "steps": S, "prompt": TEXT, "files": [GGUF, ...]}
For each file: llama.cpp loads it, tokenizes the prompt (special tokens
added as the file's metadata says, none parsed from the text), evaluates
it (llama.cpp's default F16 KV cache), then decodes S tokens greedily
(argmax of the raw logits). For every
position of that sequence whose next token is known (the prompt's and
all decoded tokens but the last) it reports its top K token ids with
their log-probabilities (log-softmax of the raw logits, in float64).
Prints one JSON line per file.
"""
import json
import sys

import numpy as np
from llama_cpp import Llama


def log_softmax(row):
    x = np.asarray(row, dtype=np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def run(path, prompt, steps, threads, top):
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False, seed=0)
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
    llm.eval(tokens)
    generated = []
    for s in range(steps):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        generated.append(nxt)
        if s < steps - 1:
            llm.eval([nxt])
    positions = []
    for i in range(len(tokens) + steps - 1):
        lp = log_softmax(llm.scores[i])
        best = np.argsort(-lp, kind="stable")[:top]
        positions.append([[int(t), float(lp[t])] for t in best])
    return {"tokens": [int(t) for t in tokens], "generated": generated,
            "n_vocab": llm.n_vocab(), "positions": positions}


def main():
    req = json.load(sys.stdin)
    for path in req["files"]:
        print(json.dumps(run(path, req["prompt"], req["steps"], req["threads"], req["top"])), flush=True)


if __name__ == "__main__":
    main()
