"""Reference side of `fusion bench embed`: sentence-transformers on CPU torch.

    python st_embed_bench.py MODEL_DIR THREADS TEXTS_JSONL

It loads the model, prints one JSON line {"threads", "torch"} and then
answers one JSON command a line on stdin with one JSON line on stdout, so
that the Go side can interleave its own passes with these (machine noise
then hits both sides alike):

    {"batch": B}     one timed model.encode of all texts at batch size B
                     -> {"seconds": S}
    {"short": N}     N timed encodes of the first text alone
                     -> {"seconds": [S, ...]}

EOF on stdin ends it.
"""

import json
import sys
import time

import torch
from sentence_transformers import SentenceTransformer


def main():
    model_dir, threads, texts_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(threads)
    with open(texts_path, "rb") as f:
        texts = [json.loads(line) for line in f.read().split(b"\n") if line]
    model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__}), flush=True)
    with torch.inference_mode():
        for line in sys.stdin:
            cmd = json.loads(line)
            if "batch" in cmd:
                start = time.perf_counter()
                model.encode(texts, batch_size=cmd["batch"], convert_to_numpy=True)
                out = {"seconds": time.perf_counter() - start}
            else:
                one = []
                for _ in range(cmd["short"]):
                    start = time.perf_counter()
                    model.encode([texts[0]], batch_size=1, convert_to_numpy=True)
                    one.append(time.perf_counter() - start)
                out = {"seconds": one}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
