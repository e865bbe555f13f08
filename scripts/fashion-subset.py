#!/usr/bin/env python3
"""Writes the first N training images of Fashion-MNIST (and the whole test
set) as IDX files under DIR, for a machine without Debian's
dataset-fashion-mnist (the GPU machine of scripts/gpu-checks.sh):

    python3 scripts/fashion-subset.py DIR [N] [SRC]

N defaults to 2,000 (the images scripts/train-wire.sh trains on), SRC to
/usr/share/datasets/fashion-mnist. The subset is the source's first N
images and labels, byte for byte, under a header that counts N; read it
with `sparse-bench train --data fashion-mnist=DIR`.
"""
import gzip
import os
import shutil
import struct
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    src = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(src):
        sys.exit(f"{src}: no Fashion-MNIST here (apt-get install dataset-fashion-mnist)")
    os.makedirs(out, exist_ok=True)
    for stem, dims in (("train-images-idx3-ubyte", 3), ("train-labels-idx1-ubyte", 1)):
        data = gzip.open(os.path.join(src, stem + ".gz")).read()
        head = 4 + 4 * dims
        shape = struct.unpack(">" + "I" * dims, data[4:head])
        if n > shape[0]:
            sys.exit(f"{stem}: {shape[0]} images, fewer than {n}")
        per = 1
        for d in shape[1:]:
            per *= d
        body = data[head : head + n * per]
        with gzip.open(os.path.join(out, stem + ".gz"), "wb") as f:
            f.write(data[:4] + struct.pack(">I", n) + data[8:head] + body)
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        shutil.copy(os.path.join(src, stem + ".gz"), out)
    print(f"{out}: the first {n} training images and the whole test set")


if __name__ == "__main__":
    main()
