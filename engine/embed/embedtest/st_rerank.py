"""Reference side of the reranking tests: sentence-transformers' CrossEncoder.

    python st_rerank.py MODEL_DIR < pairs.jsonl > scores.jsonl

stdin: JSON lines of [query, document]; stdout: one JSON line per pair with
CrossEncoder.predict's score, and the token ids and type ids its tokenizer
gives the pair (truncated as predict truncates it; all 0 for a tokenizer
without token types, such as XLM-R's). Torch runs in float32 on
the CPU, one thread, batches of 32.
"""

import json
import sys

import torch
from sentence_transformers import CrossEncoder


def main():
    torch.set_num_threads(1)
    data = sys.stdin.buffer.read()
    pairs = [json.loads(line) for line in data.split(b"\n") if line]
    model = CrossEncoder(sys.argv[1], device="cpu", local_files_only=True)
    scores = model.predict([tuple(p) for p in pairs], batch_size=32, convert_to_numpy=True)
    tok = model.tokenizer
    out = sys.stdout
    for (q, d), s in zip(pairs, scores):
        enc = tok(q, d, truncation=True, max_length=model.max_seq_length)
        out.write(json.dumps({"score": float(s), "ids": enc["input_ids"], "types": enc.get("token_type_ids", [0] * len(enc["input_ids"])),
                              "max_len": model.max_seq_length}) + "\n")


if __name__ == "__main__":
    main()
