#!/usr/bin/env python3
"""Per-kernel SASS size and digest of a cubin, for checking that a refactor leaves kernels byte for byte the same
without a disassembler (a development machine may have nvcc and ptxas but not cuobjdump / nvdisasm).

    nvcc -O3 -DNDEBUG -arch=sm_90a -std=c++17 -I include -I src -DFUSEOPS_WITH_CUDA=1 -cubin -o a.cubin src/cuda/X.cu
    scripts/kernel-sig.py a.cubin [name-filter]

One line per kernel: bytes of its .text section, instructions (16 bytes each on sm_90), the md5 of the bytes (first
10 hex digits) and the mangled name. Equal digests mean the same machine code (relocated constants included)."""
import hashlib
import struct
import sys


def kernels(path):
    d = open(path, "rb").read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF (a cubin from nvcc -cubin)")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx]
    for s in secs:
        raw = d[names[4] + s[0]:]
        name = raw[:raw.index(b"\0")].decode()
        if name.startswith(".text."):
            yield name[len(".text."):], d[s[4]:s[4] + s[5]]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    for name, body in kernels(sys.argv[1]):
        if len(sys.argv) == 3 and sys.argv[2] not in name:
            continue
        print(f"{len(body):8d} {len(body) // 16:6d} {hashlib.md5(body).hexdigest()[:10]} {name}")


if __name__ == "__main__":
    main()
