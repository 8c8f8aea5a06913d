"""A second reference for gpt-oss's tokenizer: OpenAI's own o200k_harmony
(the tiktoken implementation inside openai-harmony), not HF tokenizers.

    python o200k_reference.py TOKENIZER_JSON
        stdin: JSON lines of strings; stdout: JSON lines of id lists
        (special tokens in the text are matched as special tokens)

openai-harmony reads the o200k_base vocabulary from TIKTOKEN_ENCODINGS_BASE;
write_tiktoken rebuilds that file from the tokenizer.json's byte-level
vocabulary (base64 of each token's bytes and its rank, one a line) and
checks it against the published file's SHA-256, so nothing is downloaded.
(engine/chattemplate/testdata/harmony_reference.py uses it too.)
"""

import base64
import hashlib
import json
import os
import sys
import tempfile

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def byte_decoder():
    """GPT-2's byte-level alphabet, reversed: character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def write_tiktoken(tokenizer_json, directory):
    """Writes o200k_base.tiktoken, rebuilt from tokenizer_json, into directory."""
    with open(tokenizer_json, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    dec = byte_decoder()
    lines = []
    for token, rank in sorted(vocab.items(), key=lambda kv: kv[1]):
        raw = bytes(dec[ch] for ch in token)
        lines.append(base64.b64encode(raw).decode() + " " + str(rank) + "\n")
    data = "".join(lines).encode()
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise SystemExit(f"o200k_base rebuilt from {tokenizer_json} hashes to {digest}, want {O200K_SHA256}")
    with open(os.path.join(directory, "o200k_base.tiktoken"), "wb") as f:
        f.write(data)


def harmony_encoding(tokenizer_json, directory):
    """openai-harmony's gpt-oss encoding over the rebuilt vocabulary."""
    write_tiktoken(tokenizer_json, directory)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = directory
    import openai_harmony as h

    return h, h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)


def main():
    data = sys.stdin.buffer.read()
    texts = [json.loads(line) for line in data.split(b"\n") if line]
    with tempfile.TemporaryDirectory() as d:
        _, enc = harmony_encoding(sys.argv[1], d)
        for text in texts:
            sys.stdout.write(json.dumps(enc.encode(text, allowed_special="all")) + "\n")


if __name__ == "__main__":
    main()
