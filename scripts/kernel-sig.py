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


EM_CUDA = 190  # e_machine of a cubin


def kernels(path):
    """(name, bytes) of each kernel's .text section of the cubin at `path`; exits with a message on anything else."""
    try:
        d = open(path, "rb").read()
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")

    def bad(why):
        sys.exit(f"{path}: {why}")

    if len(d) < 0x40 or d[:4] != b"\x7fELF":
        bad("not an ELF file (a cubin from nvcc -cubin)")
    if d[4] != 2 or d[5] != 1:
        bad("not a 64-bit little-endian ELF (a cubin from nvcc -cubin)")
    machine, = struct.unpack_from("<H", d, 0x12)
    if machine != EM_CUDA:
        bad(f"an ELF for machine {machine}, not a CUDA cubin (machine {EM_CUDA})")
    try:
        shoff, = struct.unpack_from("<Q", d, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        if shentsize < 0x40 or shnum == 0 or shstrndx >= shnum:
            bad("no usable section headers (truncated or corrupt)")
        secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
        names = secs[shstrndx]
        for s in secs:
            start = names[4] + s[0]
            end = d.index(b"\0", start)
            name = d[start:end].decode()
            if name.startswith(".text."):
                if s[4] + s[5] > len(d):
                    bad(f"section {name} runs past the end of the file (truncated)")
                yield name[len(".text."):], d[s[4]:s[4] + s[5]]
    except (struct.error, ValueError, UnicodeDecodeError):
        bad("truncated or corrupt section headers")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    for name, body in kernels(sys.argv[1]):
        if len(sys.argv) == 3 and sys.argv[2] not in name:
            continue
        print(f"{len(body):8d} {len(body) // 16:6d} {hashlib.md5(body).hexdigest()[:10]} {name}")


if __name__ == "__main__":
    main()
