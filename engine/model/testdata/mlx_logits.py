"""Reference log-probabilities from mlx-lm for the model parity tests.

Reads a JSON request on stdin:

    {"models": [{"dir": "...", "prompt": [ids...], "steps": 64, "top": 8}, ...]}

and, for each model, loads it with mlx-lm, casts its floating-point
parameters to float32 (bf16 weights are exact in f32; quantized layers keep
their packed uint32 codes and get f32 scales and biases), prefills the
prompt with a KV cache, then decodes greedily. The prompt goes in as two
calls, all but its last token and then the last one, so that MLX's lazy
graph never computes the LM head over the whole prompt (the first call's
logits are never evaluated). It writes one JSON object on stdout:

    {"results": [{"tokens": [...], "steps": [{"ids": [...], "logprobs": [...]}]}]}

steps[i] is the distribution that chose tokens[i] (steps[0] follows the
prompt): the `top` most likely ids, most likely first, and their
log-probabilities.
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model

# mlx-lm 0.32.2's QuantizedSwitchLinear passes global_scale=None to
# gather_qmm, a keyword the mlx-cpu wheel it runs on here does not have;
# None is that keyword's default, so dropping it changes nothing.
_gather_qmm = mx.gather_qmm


def _gather_qmm_compat(*args, global_scale=None, **kwargs):
    if global_scale is not None:
        kwargs["global_scale"] = global_scale
    return _gather_qmm(*args, **kwargs)


mx.gather_qmm = _gather_qmm_compat


def run(spec):
    model, _ = load_model(Path(spec["dir"]))
    model.set_dtype(mx.float32)
    cache = make_prompt_cache(model)
    top = spec.get("top", 8)
    tokens, steps = [], []
    prompt = spec["prompt"]
    model(mx.array([prompt[:-1]]), cache=cache)
    mx.eval([c.state for c in cache])
    inputs = mx.array([prompt[-1:]])
    for _ in range(spec["steps"]):
        logits = model(inputs, cache=cache)[0, -1, :].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits)
        order = mx.argsort(-logprobs)[:top]
        mx.eval(order, logprobs)
        ids = [int(i) for i in order.tolist()]
        lp = logprobs.tolist()
        steps.append({"ids": ids, "logprobs": [lp[i] for i in ids]})
        tokens.append(ids[0])
        inputs = mx.array([[ids[0]]])
    return {"tokens": tokens, "steps": steps}


def main():
    mx.set_default_device(mx.cpu)
    req = json.load(sys.stdin)
    json.dump({"results": [run(m) for m in req["models"]]}, sys.stdout)


if __name__ == "__main__":
    main()
