"""Reference side of the embedding tests: sentence-transformers on CPU torch.

    python st_embed.py MODEL_DIR < texts.jsonl > vectors.jsonl

stdin: JSON lines of strings; stdout: one JSON line per text with the
embedding sentence-transformers' encode gives (float32 values as floats).
Torch runs in float32 on the CPU, one thread, in batches of 32 (padded, with
attention masks), as a user of the library would run it.
"""

import json
import sys

import torch
from sentence_transformers import SentenceTransformer


def main():
    torch.set_num_threads(1)
    data = sys.stdin.buffer.read()
    texts = [json.loads(line) for line in data.split(b"\n") if line]
    model = SentenceTransformer(sys.argv[1], device="cpu", local_files_only=True)
    vecs = model.encode(texts, batch_size=32, convert_to_numpy=True)
    out = sys.stdout
    for v in vecs:
        out.write(json.dumps([float(x) for x in v]) + "\n")


if __name__ == "__main__":
    main()
