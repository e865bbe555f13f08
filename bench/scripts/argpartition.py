"""numpy's exact top-k, the reference row of `sparse-bench select`.

Times `np.argpartition` of the negated magnitudes (the k largest |x|, as
`sparse-bench select` selects them) and a copy of the array into a
preallocated buffer (the same memory floor as `sparse-bench`'s `copy`), on
n normal float32 values, and prints medians in ms:

    python3 bench/scripts/argpartition.py [n] [density]

Needs numpy (`pip install numpy`); nothing in the workspace depends on it.
"""

import sys
import time

import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24
density = float(sys.argv[2]) if len(sys.argv) > 2 else 0.001
k = max(1, round(density * n))
x = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
dst = np.empty_like(x)


def median_ms(f, reps=7):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[reps // 2]


copy = median_ms(lambda: np.copyto(dst, x))
part = median_ms(lambda: np.argpartition(-np.abs(x), k - 1)[:k])
print(f"numpy {np.__version__}: n = {n}, k = {k}: copy {copy:.3f} ms, "
      f"argpartition {part:.3f} ms ({part / copy:.2f} copies)")
