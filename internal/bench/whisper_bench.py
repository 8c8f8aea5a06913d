"""faster-whisper's side of `fusion bench whisper`: transcribes a float32
16 kHz file greedily (beam_size=1) -repeat times after loading the model
and prints the fastest wall time and the text as JSON."""
import json, sys, time

import numpy as np
from faster_whisper import WhisperModel

model_dir, path, threads, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
model = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=threads)
audio = np.fromfile(path, dtype="<f4")
best, text = None, ""
for _ in range(repeat):
    start = time.perf_counter()
    segs, _ = model.transcribe(audio, beam_size=1)
    text = "".join(s.text for s in segs).strip()
    t = time.perf_counter() - start
    best = t if best is None else min(best, t)
print(json.dumps({"seconds": best, "text": text}))
