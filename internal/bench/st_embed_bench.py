"""Reference side of `fusion bench embed`: sentence-transformers on CPU torch.

    python st_embed_bench.py MODEL_DIR THREADS REPEAT BATCH... < texts.jsonl

stdin: JSON lines of strings. stdout: one JSON object, for each batch size
the fastest of REPEAT timed passes of model.encode over all texts (after
one warm-up pass), and the p50 of encoding the first text alone.
"""

import json
import statistics
import sys
import time

import torch
from sentence_transformers import SentenceTransformer


def main():
    model_dir, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4:]]
    torch.set_num_threads(threads)
    texts = [json.loads(line) for line in sys.stdin.buffer.read().split(b"\n") if line]
    model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__, "seconds": {}}
    with torch.inference_mode():
        for b in batches:
            model.encode(texts, batch_size=b, convert_to_numpy=True)
            best = None
            for _ in range(repeat):
                start = time.perf_counter()
                model.encode(texts, batch_size=b, convert_to_numpy=True)
                s = time.perf_counter() - start
                best = s if best is None else min(best, s)
            out["seconds"][str(b)] = best
        one = []
        for _ in range(10):
            model.encode([texts[0]], batch_size=1, convert_to_numpy=True)
        for _ in range(50):
            start = time.perf_counter()
            model.encode([texts[0]], batch_size=1, convert_to_numpy=True)
            one.append(time.perf_counter() - start)
        out["short_p50_s"] = statistics.median(one)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
