"""diffusers' side of `fusion bench image`: loads a FLUX.2 [klein]
checkpoint's transformer and VAE (float32, torch CPU) with the thread
count given, runs one untimed warm-up transformer step, then -steps timed
steps of the distilled loop (the transformer's velocity and the
scheduler's Euler step) at width x height with randn text states of
512 tokens, then decodes latents with the VAE (one warm-up, -repeat
timed). Prints the step and decode times, the process's CPU time per step and the FLOPs torch's
FlopCounterMode counts for one step and one decode, as JSON."""
import json, os, sys, time

ckpt, width, height, steps, threads, repeat = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
allowed = sorted(os.sched_getaffinity(0))
if threads < len(allowed):
    os.sched_setaffinity(0, allowed[:threads])

import torch
from torch.utils.flop_counter import FlopCounterMode
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Transformer2DModel
from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu, retrieve_timesteps

torch.set_num_threads(threads)
tr = Flux2Transformer2DModel.from_pretrained(ckpt, subfolder="transformer", torch_dtype=torch.float32).eval()
vae = AutoencoderKLFlux2.from_pretrained(ckpt, subfolder="vae", torch_dtype=torch.float32).eval()
sch = FlowMatchEulerDiscreteScheduler.from_pretrained(ckpt, subfolder="scheduler")

scale = 2 ** (len(vae.config.block_out_channels) - 1)
h, w = height // (scale * 2), width // (scale * 2)
g = torch.Generator("cpu").manual_seed(0)
lat = torch.randn((1, tr.config.in_channels, h, w), generator=g)
ids = Flux2KleinPipeline._prepare_latent_ids(lat)
x = lat.reshape(1, tr.config.in_channels, h * w).permute(0, 2, 1).contiguous()
txt = torch.randn((1, 512, tr.config.joint_attention_dim), generator=g)
txt_ids = Flux2KleinPipeline._prepare_text_ids(txt)


def step(x, t):
    return tr(hidden_states=x, encoder_hidden_states=txt, timestep=t.expand(1) / 1000, guidance=None,
              img_ids=ids, txt_ids=txt_ids, return_dict=False)[0]


sigmas = [1.0 - i * (1.0 - 1.0 / steps) / max(steps - 1, 1) for i in range(steps)]
ts, _ = retrieve_timesteps(sch, steps, "cpu", sigmas=sigmas, mu=compute_empirical_mu(image_seq_len=h * w, num_steps=steps))
sch.set_begin_index(0)
z = torch.randn((1, vae.config.latent_channels, 2 * h, 2 * w), generator=g)
with torch.no_grad():
    step(x, ts[0])  # warm-up
    times = []
    cpu0 = time.process_time()
    for t in ts:
        start = time.perf_counter()
        v = step(x, t)
        x = sch.step(v, t, x, return_dict=False)[0]
        times.append(time.perf_counter() - start)
    step_cpu = (time.process_time() - cpu0) / len(times)
    vae.decode(z)  # warm-up
    dec = []
    for _ in range(repeat):
        start = time.perf_counter()
        vae.decode(z)
        dec.append(time.perf_counter() - start)
    with FlopCounterMode(display=False) as fc:
        step(x, ts[0])
    step_flops = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        vae.decode(z)
    decode_flops = fc.get_total_flops()
print(json.dumps({"step_seconds": times, "step_cpu_seconds": step_cpu, "decode_seconds": dec, "step_flops": step_flops, "decode_flops": decode_flops,
                  "threads": torch.get_num_threads(), "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__}))
