"""Reference side of the tokenizer tests and benchmark: runs HF tokenizers.

    python hf_tokenizers.py encode TOKENIZER_JSON ADD_SPECIAL
        stdin: JSON lines of strings; stdout: JSON lines of id lists
    python hf_tokenizers.py decode TOKENIZER_JSON SKIP_SPECIAL
        stdin: JSON lines of id lists; stdout: JSON lines of strings
    python hf_tokenizers.py bench TOKENIZER_JSON REPEAT
        stdin: JSON lines of strings; stdout: one JSON object with the best
        time of REPEAT runs of the encode loop, in seconds, and the tokens

ADD_SPECIAL, SKIP_SPECIAL: 0 or 1. Run single-threaded for the benchmark
with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false.
"""

import json
import sys
import time

from tokenizers import Tokenizer


def read_lines():
    # Split on "\n" only: str.splitlines would also split inside strings at
    # U+0085, U+2028 and other line breaks that JSON leaves unescaped.
    data = sys.stdin.buffer.read()
    return [json.loads(line) for line in data.split(b"\n") if line]


def main():
    mode, path, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    tok = Tokenizer.from_file(path)
    # Length is the caller's business (BERT's tokenizer.json pads and cuts
    # to 128); the ids of the whole text are what is compared.
    tok.no_truncation()
    tok.no_padding()
    items = read_lines()
    out = sys.stdout
    if mode == "encode":
        for enc in tok.encode_batch(items, add_special_tokens=arg == "1"):
            out.write(json.dumps(enc.ids) + "\n")
    elif mode == "decode":
        for text in tok.decode_batch(items, skip_special_tokens=arg == "1"):
            out.write(json.dumps(text) + "\n")
    elif mode == "bench":
        best, tokens = None, 0
        for _ in range(int(arg)):
            start = time.perf_counter()
            encodings = tok.encode_batch(items, add_special_tokens=False)
            elapsed = time.perf_counter() - start
            tokens = sum(len(e.ids) for e in encodings)
            best = elapsed if best is None else min(best, elapsed)
        out.write(json.dumps({"seconds": best, "tokens": tokens}) + "\n")
    else:
        sys.exit(f"unknown mode {mode!r}")


main()
