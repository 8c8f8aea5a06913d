"""piper-tts's side of `fusion bench speech`: loads the voice with its
onnxruntime session pinned to THREADS intra-op threads (one inter-op
thread, sequential execution), synthesizes the text once to warm up, then
REPEAT times with the noise scales at 0 (piper-tts's PiperVoice.synthesize,
phonemization and peak normalization included), writes the last run's
16-bit samples to OUT and prints the fastest wall time as JSON."""
import json, sys, time

import onnxruntime as ort
from piper import PiperVoice, SynthesisConfig

model, text, threads, repeat, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
voice = PiperVoice.load(model)
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
opts.inter_op_num_threads = 1
opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
voice.session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)


def speak():
    return [c.audio_int16_array for c in voice.synthesize(text, syn_config=cfg)]


speak()  # warm-up
best, chunks = None, []
for _ in range(repeat):
    start = time.perf_counter()
    chunks = speak()
    t = time.perf_counter() - start
    best = t if best is None else min(best, t)
with open(out, "wb") as f:
    for c in chunks:
        f.write(c.astype("<i2").tobytes())
print(json.dumps({"seconds": best, "sentences": [len(c) for c in chunks], "onnxruntime": ort.__version__}))
