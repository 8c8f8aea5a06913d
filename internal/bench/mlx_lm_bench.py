"""mlx-lm's side of `fusion bench mlx`.

Reads {"dir": ..., "prompt": [ids...], "decode": N, "repeat": R} on stdin,
loads the model with mlx-lm (its own dtype: mlx-lm's native path), and
runs mlx_lm.generate.generate_step greedily R times after a short
warm-up: prefill tokens/s is the prompt's length over the time to the
first token, decode tokens/s the N tokens after it over the time they
took (generate_step pipelines its steps with mx.async_eval). Writes
{"prefill_tok_s": [...], "decode_tok_s": [...], "tokens": [...]} (the
greedy tokens of the last run, the first included).
"""

import json
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.utils import load_model


def main():
    req = json.load(sys.stdin)
    model, _ = load_model(Path(req["dir"]))
    prompt = mx.array(req["prompt"])
    decode = req["decode"]
    for _ in generate_step(prompt[:16], model, max_tokens=2):
        pass
    prefill, rates, tokens = [], [], []
    for _ in range(req["repeat"]):
        start = time.perf_counter()
        stamps, tokens = [], []
        for tok, _ in generate_step(prompt, model, max_tokens=decode + 1):
            stamps.append(time.perf_counter())
            tokens.append(int(tok))
        prefill.append(len(req["prompt"]) / (stamps[0] - start))
        rates.append(decode / (stamps[-1] - stamps[0]))
    json.dump({"prefill_tok_s": prefill, "decode_tok_s": rates, "tokens": tokens}, sys.stdout)


if __name__ == "__main__":
    main()
