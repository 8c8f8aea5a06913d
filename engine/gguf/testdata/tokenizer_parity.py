"""Compares two tokenizer.json files with the Hugging Face `tokenizers`
package: the original and the one engine/gguf synthesised from GGUF
metadata.

usage: tokenizer_parity.py ORIGINAL SYNTHESISED WITH_SPECIALS

Encodes a fixed corpus with both (add_special_tokens=False, and also True
when WITH_SPECIALS is 1) and decodes the ids back; prints JSON
{"checked": N, "mismatches": [...]}.
"""
import json
import sys

from tokenizers import Tokenizer

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'll've done it; she's, they're, we'd",
    "  leading spaces and   inner   runs  \n\n\n trailing \t tabs\t",
    "numbers 1 12 123 1234 12345678901234567890 3.14159 -42",
    "def f(x):\n    return x ** 2  # square\n",
    "naïve café — Việt Nam, Ελληνικά, русский",
    "中文分词测试：你好，世界！日本語のテキスト、カタカナ。",
    "emoji 🙂👍🏽 and symbols ©®™ ∑∫√",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhey<|eot_id|>",
    "<｜begin▁of▁sentence｜>You are<｜User｜>hi<｜Assistant｜>",
    "https://example.com/path?q=1&r=2#frag",
    "\r\n\r\nwindows\r\nnewlines\r\n",
    "a" * 300,
    "",
]


def main():
    orig = Tokenizer.from_file(sys.argv[1])
    synth = Tokenizer.from_file(sys.argv[2])
    with_specials = sys.argv[3] == "1"
    mismatches = []
    checked = 0
    for text in CORPUS:
        for add in ([False, True] if with_specials else [False]):
            a = orig.encode(text, add_special_tokens=add).ids
            b = synth.encode(text, add_special_tokens=add).ids
            checked += 1
            if a != b:
                mismatches.append({"text": text, "add_special_tokens": add, "original": a, "synthesised": b})
                continue
            da = orig.decode(a, skip_special_tokens=False)
            db = synth.decode(b, skip_special_tokens=False)
            if da != db:
                mismatches.append({"text": text, "decode": True, "original": da, "synthesised": db})
    json.dump({"checked": checked, "mismatches": mismatches}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
