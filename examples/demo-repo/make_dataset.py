"""Regenerate data/dataset.csv (deterministic): y = 3·x1 − 2·x2 + 0.5·x3 + 4 + noise.

    python3 make_dataset.py > data/dataset.csv
"""

import random

rng = random.Random(20261129)
print("x1,x2,x3,y")
for _ in range(200):
    x1, x2, x3 = rng.uniform(-5, 5), rng.uniform(0, 10), rng.gauss(0, 2)
    y = 3 * x1 - 2 * x2 + 0.5 * x3 + 4 + rng.gauss(0, 0.5)
    print(f"{x1:.4f},{x2:.4f},{x3:.4f},{y:.4f}")
