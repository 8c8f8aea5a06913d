"""Reference log-probabilities from mlx-lm for the model parity tests.

One process serves every parity test of a test binary (importing mlx-lm
costs seconds of CPU, once): once mlx-lm is imported it writes {"ready": true} on a
line of stdout, then reads JSON requests, one a line, on stdin:

    {"models": [{"dir": "...", "prompt": [ids...], "steps": 64, "top": 8,
                 "native": false}, ...]}

and answers each with one line, until stdin ends. For each model it
loads it with mlx-lm, casts its floating-point parameters to float32 (bf16
weights are exact in f32; quantized layers keep their packed uint32 codes
and get f32 scales and biases), prefills the prompt with a KV cache, then
decodes greedily. The prompt goes in as two calls, all but its last token
and then the last one, so that MLX's lazy graph never computes the LM head
over the whole prompt (the first call's logits are never evaluated).

With "native", the model keeps its dtype (mlx-lm's own path: activations,
KV cache and logits in bf16 for a bf16 or bf16-scaled quantized model),
and the prompt goes in as one call of the model's body, the LM head then
applied to its last row only: the engine's prefill (its logits are rows of
the same bf16 computation; the head is row-wise). The answer is

    {"results": [{"tokens": [...], "steps": [{"ids": [...], "logprobs": [...]}],
                  "prefilled": 512}]}

or {"error": "..."} (the traceback) when a model fails.

steps[i] is the distribution that chose tokens[i] (steps[0] follows the
prompt): the `top` most likely ids, most likely first, and their
log-probabilities. prefilled is the offset of the model's attention caches
once the prompt is in (every prompt token, if the prefill saw them all).
"""

import json
import sys
import traceback
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


def text_model(model):
    """The causal LM inside model: mistral3's language_model, else model."""
    return getattr(model, "language_model", model)


def head(model, h):
    """The LM head of mlx-lm's Model.__call__, on hidden states h."""
    model = text_model(model)
    if getattr(model.args, "tie_word_embeddings", False):
        return model.model.embed_tokens.as_linear(h)
    return model.lm_head(h)


def run(spec):
    model, _ = load_model(Path(spec["dir"]))
    native = spec.get("native", False)
    if not native:
        model.set_dtype(mx.float32)
    cache = make_prompt_cache(model)
    top = spec.get("top", 8)
    tokens, steps = [], []
    prompt = spec["prompt"]
    if native:
        h = text_model(model).model(mx.array([prompt]), cache=cache)
        first = head(model, h[:, -1:, :])
    else:
        model(mx.array([prompt[:-1]]), cache=cache)
        mx.eval([c.state for c in cache])
        first = model(mx.array([prompt[-1:]]), cache=cache)
    # How many prompt tokens the attention caches hold after the prefill
    # (the test checks it is the whole prompt).
    prefilled = max((c.offset for c in cache if hasattr(c, "offset")), default=0)
    for i in range(spec["steps"]):
        out = first if i == 0 else model(inputs, cache=cache)
        logits = out[0, -1, :].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits)
        order = mx.argsort(-logprobs)[:top]
        # The greedy token is argmax's (the first of equal logits, as the
        # engine's): bf16 logits tie, and argsort's order of ties is not
        # the index order.
        best = mx.argmax(logprobs)
        mx.eval(order, logprobs, best)
        ids = [int(i) for i in order.tolist()]
        lp = logprobs.tolist()
        steps.append({"ids": ids, "logprobs": [lp[i] for i in ids]})
        tokens.append(int(best.item()))
        inputs = mx.array([[tokens[-1]]])
    return {"tokens": tokens, "steps": steps, "prefilled": prefilled}


def main():
    mx.set_default_device(mx.cpu)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            answer = {"results": [run(m) for m in req["models"]]}
        except Exception:
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
