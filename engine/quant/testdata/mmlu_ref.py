"""Scores MMLU questions as lm-eval's mmlu task does, for engine/quant's tests.

Usage: mmlu_ref.py MODEL_DIR QUESTIONS_JSON

MODEL_DIR is a float model transformers loads (a llama demo); QUESTIONS_JSON
a JSON list of {question, options, answer, topic}. Each question is put in
the form of lm-eval's mmlu default template, zero-shot: the subject's
description, the stripped question, "A. option" lines, "Answer:"; the
continuations are " A", " B", ... . A continuation's tokens are those of
context+continuation past the context's own (lm-eval's _encode_pair),
tokenized by HF tokenizers with the tokenizer's special tokens (lm-eval's
add_bos_token=True); its log-likelihood is the sum of their log-softmax
values under transformers' model in float64. Prints one JSON object:
{"lls": [[...] per question], "picks": [...], "correct": N}.
"""
import json
import sys

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def prompt(q):
    topic = (q.get("topic") or "").replace("_", " ").strip()
    about = f" about {topic}" if topic else ""
    text = f"The following are multiple choice questions (with answers){about}.\n\n"
    text += q["question"].strip() + "\n"
    letters = [chr(ord("A") + i) for i in range(len(q["options"]))]
    for letter, option in zip(letters, q["options"]):
        text += f"{letter}. {option}\n"
    return text + "Answer:", [" " + letter for letter in letters]


def main():
    src, qs_path = sys.argv[1:3]
    torch.set_num_threads(1)
    tok = Tokenizer.from_file(f"{src}/tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).double().eval()
    out = {"lls": [], "picks": [], "correct": 0}
    for q in json.load(open(qs_path)):
        context, conts = prompt(q)
        ctx_ids = tok.encode(context, add_special_tokens=True).ids
        wholes = [tok.encode(context + cont, add_special_tokens=True).ids for cont in conts]
        # One batch per question, padded at the end (a causal model's
        # earlier positions do not see the padding).
        width = max(len(w) for w in wholes)
        batch = torch.tensor([w + [0] * (width - len(w)) for w in wholes])
        with torch.no_grad():
            logp = torch.log_softmax(model(batch).logits, dim=-1)
        lls = []
        for b, whole in enumerate(wholes):
            first = len(ctx_ids)  # the continuation: whole past the context's own tokens
            lls.append(sum(logp[b, i - 1, whole[i]].item() for i in range(first, len(whole))))
        pick = max(range(len(lls)), key=lambda i: (lls[i], -i))
        out["lls"].append(lls)
        out["picks"].append(pick)
        out["correct"] += int(pick == q["answer"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
