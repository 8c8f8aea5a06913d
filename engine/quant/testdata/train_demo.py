"""Trains a float demo model on a token stream, so that its perplexity means something.

Usage: train_demo.py MODEL_DIR IDS_JSON OUT_DIR STEPS SEED

MODEL_DIR is a float (f32) demo model of a family transformers loads (its
weights are the initialisation); IDS_JSON a JSON list of token ids (the
training text, tokenized by the caller with the model's own tokenizer);
OUT_DIR receives model.safetensors with the trained weights under the
same names (a tied lm_head left out, as the demo writes it; the caller
copies config and tokenizer). Training: transformers' model class on the
CPU (one thread, seeded, so deterministic), next-token cross-entropy on
windows of 64 tokens drawn from the stream, batch 8, AdamW with a linear
warmup and cosine decay, STEPS steps. Prints one JSON line: the loss of
the first and the last steps.
"""
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    src, ids_path, out, steps, seed = sys.argv[1:6]
    steps, seed = int(steps), int(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.train()
    ids = torch.tensor(json.load(open(ids_path)), dtype=torch.long)
    win, batch = 64, 8
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warm = max(1, steps // 10)

    def lr(i):
        if i < warm:
            return (i + 1) / warm
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (i - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr)
    gen = torch.Generator().manual_seed(seed)
    first = last = None
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - win, (batch,), generator=gen)
        x = torch.stack([ids[s:s + win] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if first is None:
            first = loss.item()
        last = loss.item()
    tied = model.config.tie_word_embeddings
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()
               if not (tied and k == "lm_head.weight") and "rotary_emb" not in k}
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(weights, str(Path(out) / "model.safetensors"), metadata={"format": "pt"})
    print(json.dumps({"first_loss": first, "last_loss": last, "steps": steps}))


if __name__ == "__main__":
    main()
