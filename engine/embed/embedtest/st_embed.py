"""Reference side of the embedding tests: sentence-transformers on CPU torch.

    python st_embed.py MODEL_DIR [PROMPT_NAME] < texts.jsonl > vectors.jsonl

stdin: JSON lines of strings; stdout: one JSON line per text with the
embedding sentence-transformers' encode gives (float32 values as floats,
with prompt_name when given) and the token ids its tokenizer makes of the
text (the prompt before it, cut to max_seq_length). Torch runs in float32 on
the CPU (the weights are read as float32 whatever their dtype), one thread,
in batches of 32 (padded, with attention masks), as a user of the library
would run it.
"""

import json
import sys

import torch
from sentence_transformers import SentenceTransformer


def main():
    torch.set_num_threads(1)
    data = sys.stdin.buffer.read()
    texts = [json.loads(line) for line in data.split(b"\n") if line]
    prompt_name = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    model = SentenceTransformer(sys.argv[1], device="cpu", local_files_only=True,
                                model_kwargs={"dtype": torch.float32})
    vecs = model.encode(texts, batch_size=32, convert_to_numpy=True, prompt_name=prompt_name)
    prompt = model.prompts.get(prompt_name, "") if prompt_name else ""
    tok = model.tokenizer
    out = sys.stdout
    for text, v in zip(texts, vecs):
        ids = tok(prompt + text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        out.write(json.dumps({"vector": [float(x) for x in v], "ids": ids}) + "\n")


if __name__ == "__main__":
    main()
