"""Prints, as JSON, which code points HF tokenizers' regex engine puts in
\\p{L}, \\p{M}, \\p{N}, \\p{P}, \\p{S} and \\s, as sorted [first, last]
ranges. The Go tests compare them with unicode_tables.go.

    python hf_char_classes.py
"""

import json

from tokenizers import Regex, normalizers


def main():
    # Every code point but the surrogates, in order: deleting the runs of
    # non-members with the engine leaves the members.
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    out = {}
    for name, outside in [("L", r"\P{L}+"), ("M", r"\P{M}+"), ("N", r"\P{N}+"),
                          ("P", r"\P{P}+"), ("S", r"\P{S}+"), ("s", r"\S+")]:
        members = normalizers.Replace(Regex(outside), "").normalize_str(text)
        ranges = []
        for ch in members:
            c = ord(ch)
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
        out[name] = ranges
    print(json.dumps(out))


main()
