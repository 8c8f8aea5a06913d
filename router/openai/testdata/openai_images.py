# The official openai client's images.generate against fusion: b64_json
# and url results (PNG, and a WebP), on the node that makes the images and through a front
# end that forwards them. Prints "ok N" after N checked cases.
import base64
import io
import os
import urllib.request

import openai
from PIL import Image

model = os.environ["FUSION_IMAGE_MODEL"]
done = 0
for base in (os.environ["FUSION_BASE_URL"], os.environ["FUSION_FORWARD_URL"]):
    client = openai.OpenAI(base_url=base + "/v1", api_key=os.environ["FUSION_API_KEY"])
    res = client.images.generate(
        model=model, prompt="a lighthouse at dusk", n=2, size="64x32", response_format="b64_json",
        extra_body={"steps": 2, "seed": 7},
    )
    assert len(res.data) == 2, res
    for d in res.data:
        img = Image.open(io.BytesIO(base64.b64decode(d.b64_json)))
        assert img.format == "PNG" and img.size == (64, 32), (img.format, img.size)
    done += 1

    res = client.images.generate(model=model, prompt="a lighthouse at dusk", size="32x48", response_format="url")
    assert len(res.data) == 1 and res.data[0].url.startswith(base + "/v1/images/files/"), res
    with urllib.request.urlopen(res.data[0].url) as f:
        img = Image.open(io.BytesIO(f.read()))
    assert img.format == "PNG" and img.size == (32, 48), (img.format, img.size)
    done += 1

    # WebP (libwebp through WASM on our side), decoded by Pillow's libwebp.
    res = client.images.generate(
        model=model, prompt="a lighthouse at dusk", size="48x32", response_format="b64_json",
        extra_body={"output_format": "webp", "output_compression": 20},
    )
    img = Image.open(io.BytesIO(base64.b64decode(res.data[0].b64_json)))
    assert img.format == "WEBP" and img.size == (48, 32), (img.format, img.size)
    img.load()
    done += 1
print("ok", done)
