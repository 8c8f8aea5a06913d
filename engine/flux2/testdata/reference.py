# The diffusers side of engine/flux2's parity tests, in one process (torch
# and diffusers take long to import): reads a JSON request from argv[1],
# prints one JSON object with a section per test. Floats travel as their
# float32 bit patterns so the tests can compare them exactly.
import json
import os
import sys
import warnings

import numpy as np
import torch
from diffusers import (
    AutoencoderKLFlux2,
    FlowMatchEulerDiscreteScheduler,
    Flux2KleinPipeline,
    Flux2Transformer2DModel,
)
from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu, retrieve_timesteps


def bits(t):
    return t.detach().to(torch.float32).contiguous().numpy().view(np.uint32).ravel().tolist()


def run(p, seed, output_type, **kw):
    """Runs pipeline p with a seeded CPU generator; returns its output and
    the latents after every step (from the step-end callback)."""
    seen = []

    def grab(pipeline, i, t, tensors):
        seen.append(tensors["latents"].clone())
        return {}

    res = p(
        generator=torch.Generator("cpu").manual_seed(seed), output_type=output_type,
        callback_on_step_end=grab, callback_on_step_end_tensor_inputs=["latents"], **kw,
    )
    return res, seen


req = json.loads(sys.argv[1])
out = {}

# torch.randn from seeded CPU generators, several draws in a row.
out["randn"] = []
for c in req["randn"]:
    g = torch.Generator("cpu").manual_seed(c["seed"])
    out["randn"].append([bits(torch.randn(tuple(s), generator=g)) for s in c["shapes"]])

# The checkpoint create-demo wrote: every component loads with no
# missing, unexpected or mismatched weight, and the pipeline generates.
d = req["demo"]
info = {}
for name, cls in (("transformer", Flux2Transformer2DModel), ("vae", AutoencoderKLFlux2)):
    _, li = cls.from_pretrained(d["dir"], subfolder=name, output_loading_info=True)
    info[name] = {k: [str(x) for x in v] for k, v in li.items()}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pipe = Flux2KleinPipeline.from_pretrained(d["dir"], dtype=torch.float32)
info["warnings"] = [str(w.message) for w in caught]
info["classes"] = {k: type(v).__name__ for k, v in pipe.components.items()}
image = pipe(
    prompt=d["prompt"], height=d["size"], width=d["size"], num_inference_steps=d["steps"],
    generator=torch.Generator("cpu").manual_seed(d["seed"]), output_type="np",
).images
info["image_shape"] = list(image.shape)
info["image_finite"] = bool(np.isfinite(image).all())
info["image_std"] = float(image.std())
out["demo"] = info

# Initial latents and their position ids, as the pipeline prepares them.
out["latents"] = []
for c in req["latents"]:
    lat, ids = pipe.prepare_latents(
        batch_size=c["n"], num_latents_channels=pipe.transformer.config.in_channels // 4,
        height=c["height"], width=c["width"], dtype=torch.float32, device="cpu",
        generator=torch.Generator("cpu").manual_seed(c["seed"]),
    )
    out["latents"].append({"shape": list(lat.shape), "bits": bits(lat), "ids": ids[0].tolist()})

# Patchify, unpatchify, and unpacking tokens by their ids, on randn input.
out["layout"] = []
for c in req["layout"]:
    x = torch.randn(tuple(c["shape"]), generator=torch.Generator("cpu").manual_seed(c["seed"]))
    p = Flux2KleinPipeline._patchify_latents(x)
    u = Flux2KleinPipeline._unpatchify_latents(p)
    packed = Flux2KleinPipeline._pack_latents(p)
    ids = Flux2KleinPipeline._prepare_latent_ids(p)
    un = Flux2KleinPipeline._unpack_latents_with_ids(packed, ids, p.shape[2], p.shape[3])
    out["layout"].append({"patchified": bits(p), "unpatchified": bits(u), "packed": bits(packed), "unpacked": bits(un)})

# The scheduler's sigmas and timesteps as the pipeline sets them, and
# Euler steps on randn latents and velocities.
out["schedule"] = []
for c in req["schedule"]:
    sch = FlowMatchEulerDiscreteScheduler.from_pretrained(d["dir"], subfolder="scheduler")
    n = c["steps"]
    sigmas = np.linspace(1.0, 1 / n, n)
    mu = compute_empirical_mu(image_seq_len=c["seq"], num_steps=n)
    ts, _ = retrieve_timesteps(sch, n, "cpu", sigmas=sigmas, mu=mu)
    sch.set_begin_index(0)
    g = torch.Generator("cpu").manual_seed(c["seed"])
    x = torch.randn((1, c["seq"], c["ch"]), generator=g)
    for t in ts:
        v = torch.randn((1, c["seq"], c["ch"]), generator=g)
        x = sch.step(v, t, x, return_dict=False)[0]
    out["schedule"].append({"mu": mu, "sigmas": bits(sch.sigmas), "timesteps": bits(ts), "final": bits(x)})

# The rotary tables of position ids, and the timestep projection of
# scheduler timesteps as the pipeline hands them to the transformer.
from diffusers.models.embeddings import Timesteps
from diffusers.models.transformers.transformer_flux2 import Flux2PosEmbed

out["rope"] = []
for c in req["rope"]:
    cos, sin = Flux2PosEmbed(theta=c["theta"], axes_dim=c["axes"])(torch.tensor(c["ids"]))
    out["rope"].append({"cos": bits(cos), "sin": bits(sin)})
out["temb"] = []
for c in req["temb"]:
    t = (torch.tensor(c["t"], dtype=torch.float32) / 1000).to(torch.float32) * 1000
    emb = Timesteps(num_channels=c["channels"], flip_sin_to_cos=True, downscale_freq_shift=0)(t)
    out["temb"].append({"t": bits(t), "emb": bits(emb)})

# One transformer forward on the demo checkpoint: the pipeline's initial
# latents for a seed, randn text hidden states, a scheduler timestep.
def forward(model, c):
    lat, img_ids = pipe.prepare_latents(
        batch_size=1, num_latents_channels=model.config.in_channels // 4,
        height=c["size"], width=c["size"], dtype=torch.float32, device="cpu",
        generator=torch.Generator("cpu").manual_seed(c["seed"]),
    )
    txt = torch.randn((1, c["text"], model.config.joint_attention_dim), generator=torch.Generator("cpu").manual_seed(c["text_seed"]))
    t = torch.tensor([c["t"]], dtype=torch.float32)
    with torch.no_grad():
        v = model(
            hidden_states=lat, encoder_hidden_states=txt, timestep=t / 1000, guidance=None,
            img_ids=img_ids, txt_ids=Flux2KleinPipeline._prepare_text_ids(txt), return_dict=False,
        )[0]
    return {"out": bits(v)}


tr = pipe.transformer.eval()
out["forward"] = [forward(tr, c) for c in req["forward"]]

# The pipeline's own denoising loop from prompt embeddings (randn), its
# packed latents after the last step taken from the step-end callback.
out["denoise"] = []
for c in req["denoise"]:
    txt = torch.randn((1, c["text"], tr.config.joint_attention_dim), generator=torch.Generator("cpu").manual_seed(c["text_seed"]))
    _, seen = run(pipe, c["seed"], "latent", prompt_embeds=txt, height=c["size"], width=c["size"], num_inference_steps=c["steps"])
    out["denoise"].append({"steps": len(seen), "latents": bits(seen[-1])})

# The pipeline's whole generation from prompt embeddings (randn) to the
# image: its packed latents after the last step (step-end callback), the
# image as output_type="np" gives it (floats in [0, 1]) and as PIL
# quantizes it (uint8).
out["image"] = []
for c in req["image"]:
    txt = torch.randn((1, c["text"], tr.config.joint_attention_dim), generator=torch.Generator("cpu").manual_seed(c["text_seed"]))
    res, seen = run(pipe, c["seed"], "np", prompt_embeds=txt, height=c["size"], width=c["size"], num_inference_steps=c["steps"])
    img = res.images
    pil = np.array(pipe.image_processor.numpy_to_pil(img)[0])
    out["image"].append({
        "steps": len(seen), "latents": bits(seen[-1]), "shape": list(pil.shape),
        "np": bits(torch.from_numpy(img[0])), "pil": pil.ravel().tolist(),
    })

# The prompt's text tokens: the token ids the pipeline gives the text
# encoder and the stacked hidden states it hands the transformer.
out["text"] = []
for c in req["text"]:
    msg = [{"role": "user", "content": c["prompt"]}]
    templ = pipe.tokenizer.apply_chat_template(msg, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    toks = pipe.tokenizer(templ, padding="max_length", truncation=True, max_length=c["max_len"])
    with torch.no_grad():
        emb = Flux2KleinPipeline._get_qwen3_prompt_embeds(
            pipe.text_encoder, pipe.tokenizer, c["prompt"], dtype=torch.float32, device="cpu", max_sequence_length=c["max_len"],
        )
    out["text"].append({"ids": toks["input_ids"], "real": sum(toks["attention_mask"]), "embeds": bits(emb)})

# Whole generations from a prompt up to the latents: the packed latents of
# every image after the last step.
out["generate"] = []
for c in req["generate"]:
    _, seen = run(
        pipe, c["seed"], "latent", prompt=c["prompt"], height=c["height"], width=c["width"],
        num_inference_steps=c["steps"], num_images_per_prompt=c["n"],
    )
    out["generate"].append({"steps": len(seen), "latents": [bits(x) for x in seen[-1]]})


# A bf16 checkpoint as diffusers runs it here, upcast to float32 when
# loaded (dtype=torch.float32): a whole generation from a prompt (text
# encoder, transformer, VAE all from bf16 files), its packed latents after
# the last step and the PIL image.
b = req["bf16"]
pb = Flux2KleinPipeline.from_pretrained(b["dir"], dtype=torch.float32)
out["bf16"] = []
for c in b["generate"]:
    res, seen = run(
        pb, c["seed"], "np", prompt=c["prompt"], height=c["height"], width=c["width"],
        num_inference_steps=c["steps"], num_images_per_prompt=c["n"],
    )
    img = res.images
    pil = np.array(pb.image_processor.numpy_to_pil(img)[0])
    out["bf16"].append({"steps": len(seen), "latents": bits(seen[-1][0]), "shape": list(pil.shape), "pil": pil.ravel().tolist()})


# An MLX affine-quantized transformer, dequantized here independently of
# the Go code (the codes unpacked from the little-endian bit stream of each
# row, w = q·scale + bias per group in float32, as mx.dequantize computes
# with float32 scales) into a float Flux2Transformer2DModel.
def dequantize(w, scales, biases, nbits, group):
    rows = w.shape[0]
    stream = np.unpackbits(w.astype("<u4").view(np.uint8).reshape(rows, -1), axis=1, bitorder="little")
    cols = stream.shape[1] // nbits
    q = (stream.reshape(rows, cols, nbits).astype(np.uint32) << np.arange(nbits, dtype=np.uint32)).sum(axis=2)
    q = q.astype(np.float32).reshape(rows, cols // group, group)
    return (q * scales[:, :, None] + biases[:, :, None]).reshape(rows, cols).astype(np.float32)


from safetensors.numpy import load_file

q = req["quant"]
with open(os.path.join(q["dir"], "transformer", "config.json")) as f:
    qcfg = json.load(f)
qparams = qcfg.pop("quantization")
raw = load_file(os.path.join(q["dir"], "transformer", "diffusion_pytorch_model.safetensors"))
state, quantized = {}, 0
for k, v in raw.items():
    if k.endswith(".scales") or k.endswith(".biases"):
        continue
    m = k[: -len(".weight")]
    if k.endswith(".weight") and m + ".scales" in raw:
        v = dequantize(v, raw[m + ".scales"], raw[m + ".biases"], qparams["bits"], qparams["group_size"])
        quantized += 1
    state[k] = torch.from_numpy(np.ascontiguousarray(v))
trq = Flux2Transformer2DModel.from_config(qcfg).to(torch.float32)
trq.load_state_dict(state, strict=True)
trq.eval()
out["quant"] = {"quantized": quantized, "forward": [forward(trq, c) for c in q["forward"]], "denoise": []}
pq = Flux2KleinPipeline.from_pretrained(d["dir"], transformer=trq, dtype=torch.float32)
for c in q["denoise"]:
    txt = torch.randn((1, c["text"], trq.config.joint_attention_dim), generator=torch.Generator("cpu").manual_seed(c["text_seed"]))
    _, seen = run(pq, c["seed"], "latent", prompt_embeds=txt, height=c["size"], width=c["size"], num_inference_steps=c["steps"])
    out["quant"]["denoise"].append({"steps": len(seen), "latents": bits(seen[-1])})

print(json.dumps(out))
