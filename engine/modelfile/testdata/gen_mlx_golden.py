"""Regenerates mlx_affine_golden.json: mlx.core.quantize / dequantize
outputs (MLX 0.31.2, CPU) for every affine bits/group-size pair, on float32
and bfloat16 inputs. Needs `pip install "mlx[cpu]==0.31.2" numpy`.

    python gen_mlx_golden.py > mlx_affine_golden.json
"""
import hashlib
import json

import mlx.core as mx
import numpy as np

rng = np.random.RandomState(7)
rows, cols = 4, 128
w = np.empty((rows, cols), dtype=np.float32)
w[0] = rng.normal(0, 0.02, cols)  # typical weights
w[1] = np.abs(rng.normal(1.0, 0.3, cols))  # all positive: max edge
w[2] = -np.abs(rng.normal(0.5, 0.1, cols))  # all negative: min edge
w[3] = rng.uniform(-3, 3, cols)
w[3, :32] = 0.0  # an all-zero group at group size 32
w[3, 32:64] = 0.25  # a constant group
w[3, 64:72] = [1.5, -1.5, 1.5, -1.5, 0.75, -0.75, 0, 0]  # ties in the middle


def bits_of(a):
    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16)).astype(np.uint32).ravel().tolist()
    return np.array(a).view(np.uint32).ravel().tolist()


cases = []
for dtype in ("float32", "bfloat16"):
    x = mx.array(w).astype(getattr(mx, dtype))
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            q, s, b = mx.quantize(x, group_size=group, bits=bits)
            d = mx.dequantize(q, s, b, group_size=group, bits=bits).astype(mx.float32)
            cases.append({
                "dtype": dtype, "bits": bits, "group_size": group,
                "packed": np.array(q).ravel().tolist(),
                "scales": bits_of(s), "biases": bits_of(b),
                # sha256 of the dequantized float32 values, little-endian
                "dequantized_sha256": hashlib.sha256(
                    np.array(d).astype("<f4").tobytes()).hexdigest(),
            })
print(json.dumps({"mlx": mx.__version__, "rows": rows, "cols": cols,
                  "input_f32_bits": w.view(np.uint32).ravel().tolist(),
                  "cases": cases}, separators=(",", ":")))
