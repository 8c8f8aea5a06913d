# The official openai client's streamed images.generate with
# partial_images against fusion (FUSION_BASE_URL: a node whose cluster
# splits n = 2 across two nodes): a partial image per image, decoded by
# Pillow at half the size, then both images. Prints "ok N" after N
# checked cases.
import base64
import io
import os

import openai
from PIL import Image

client = openai.OpenAI(base_url=os.environ["FUSION_BASE_URL"] + "/v1", api_key=os.environ["FUSION_API_KEY"])
stream = client.images.generate(
    model=os.environ["FUSION_IMAGE_MODEL"], prompt="a lighthouse at dusk", n=2, size="32x32", stream=True,
    partial_images=1, extra_body={"steps": 2, "seed": 7},
)
partial, completed = 0, 0
for ev in stream:
    if ev.type == "image_generation.partial_image":
        img = Image.open(io.BytesIO(base64.b64decode(ev.b64_json)))
        assert img.format == "PNG" and img.size == (16, 16) and ev.partial_image_index == 0, (img.size, ev)
        partial += 1
    elif ev.type == "image_generation.completed":
        img = Image.open(io.BytesIO(base64.b64decode(ev.b64_json)))
        assert img.format == "PNG" and img.size == (32, 32), (img.format, img.size)
        completed += 1
assert (partial, completed) == (2, 2), (partial, completed)
print("ok", 1)
