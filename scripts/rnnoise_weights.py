"""Writes the weights compiled into an RNNoise library as a weight blob.

RNNoise 0.2 compiles its model into the library as the table
rnnoise_arrays (name, type, size, data); rnnoise_model_from_file reads the
same arrays from a blob of 64-byte records: "DNNw", version 0, type, size,
size rounded up to 64, a 44-byte NUL-padded name, then the data padded with
zeros to the rounded size (src/write_weights.c). This script reads the table
through ctypes and writes that blob, so the engine reads the weights the
packaged runtime runs with.

Usage: python rnnoise_weights.py LIBRNNOISE.so OUT.bin
"""
import ctypes
import struct
import sys


class WeightArray(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("size", ctypes.c_int), ("data", ctypes.c_void_p)]


def main(lib_path, out_path):
    lib = ctypes.CDLL(lib_path)
    table = ctypes.cast(ctypes.addressof(ctypes.c_char.in_dll(lib, "rnnoise_arrays")),
                        ctypes.POINTER(WeightArray))
    with open(out_path, "wb") as out:
        i = 0
        while table[i].name is not None:
            a = table[i]
            name = a.name
            if len(name) >= 43:
                raise SystemExit(f"name too long: {name!r}")
            block = (a.size + 63) // 64 * 64
            out.write(struct.pack("<4siiii44s", b"DNNw", 0, a.type, a.size, block, name))
            out.write(ctypes.string_at(a.data, a.size))
            out.write(b"\0" * (block - a.size))
            i += 1
    if i == 0:
        raise SystemExit("rnnoise_arrays is empty")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
