#!/usr/bin/env python3
"""What memorising kernels alone gives on DevMap, under the paper's protocol.

    python3 scripts/devmap_lookup.py [--data DIR] [--seeds N]

A reference point for the learned device-mapping models, no learning in it:
10-fold cross-validation stratified by label (the paper's protocol, seeds
0..N-1). A test row whose kernel (its `src`) has training rows takes the
label of the training row of that kernel nearest in log(1 + transfer) +
log(1 + wgsize); a row whose kernel has none takes the static mapping (the
majority device). Prints, per platform and seed, the error, and for seed 0
the rows whose kernel was unseen in training and the errors on each part.

Then how separable each kernel's rows are by the auxiliary inputs, on all
the rows (a training error, no held-out rows): labelling a kernel's rows
by its majority label, and by the best single threshold on log(1 +
transfer) or log(1 + wgsize) chosen per kernel. A classifier that sees the
kernel and the sizes can fit its training rows at least that well.
"""
import argparse
import collections
import csv
import math
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def folds(rows, seed, k=10):
    rnd = random.Random(seed)
    by_label = collections.defaultdict(list)
    for i, r in enumerate(rows):
        by_label[r["oracle"]].append(i)
    fold = [0] * len(rows)
    for label in sorted(by_label):
        ids = by_label[label]
        rnd.shuffle(ids)
        for j, i in enumerate(ids):
            fold[i] = j % k
    return fold


def evaluate(rows, seed):
    fold = folds(rows, seed)
    static = collections.Counter(r["oracle"] for r in rows).most_common(1)[0][0]
    at = [(math.log1p(float(r["transfer"])), math.log1p(float(r["wgsize"]))) for r in rows]
    c = collections.Counter()
    for f in range(10):
        kernels = collections.defaultdict(list)
        for i, r in enumerate(rows):
            if fold[i] != f:
                kernels[r["src"]].append(i)
        for i, r in enumerate(rows):
            if fold[i] != f:
                continue
            same = kernels.get(r["src"])
            if same:
                j = min(same, key=lambda j: abs(at[j][0] - at[i][0]) + abs(at[j][1] - at[i][1]))
                c["seen"] += 1
                c["seen_wrong"] += rows[j]["oracle"] != r["oracle"]
            else:
                c["unseen"] += 1
                c["unseen_wrong"] += static != r["oracle"]
    return c


def separability(rows):
    """Rows wrong when each kernel's rows take its majority label, and when
    they take the best single threshold on one log size (either side)."""
    kernels = collections.defaultdict(list)
    for r in rows:
        kernels[r["src"]].append(r)
    majority = threshold = 0
    for same in kernels.values():
        gpu = [r["oracle"] == "GPU" for r in same]
        best = min(sum(gpu), len(gpu) - sum(gpu))
        majority += best
        for column in ("transfer", "wgsize"):
            x = [math.log1p(float(r[column])) for r in same]
            for t in set(x):
                above = sum(1 for v, g in zip(x, gpu) if (v >= t) != g)
                best = min(best, above, len(same) - above)
        threshold += best
    return majority, threshold


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "datasets", "devmap"))
    p.add_argument("--seeds", type=int, default=5)
    a = p.parse_args()
    for platform in ("amd", "nvidia"):
        path = os.path.join(a.data, f"{platform}.csv")
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as e:
            raise SystemExit(f"devmap_lookup.py: {path}: {e.strerror} (--data: the DevMap dataset directory)")
        runs = [evaluate(rows, s) for s in range(a.seeds)]
        errors = [(c["seen_wrong"] + c["unseen_wrong"]) / len(rows) for c in runs]
        c = runs[0]
        print(
            f"{platform}: {len(rows)} rows, {len({r['src'] for r in rows})} kernels; kernel lookup error "
            + ", ".join(f"{e:.3f}" for e in errors)
            + f" (seeds 0-{a.seeds - 1}); seed 0: {c['unseen']} test rows of kernels unseen in training,"
            f" {c['unseen_wrong']} wrong (static mapping); {c['seen']} of seen kernels, {c['seen_wrong']} wrong (nearest row)"
        )
        majority, threshold = separability(rows)
        print(
            f"{platform}: on all rows, each kernel's majority label: {majority} wrong ({majority / len(rows):.3f});"
            f" the best threshold on one size per kernel: {threshold} wrong ({threshold / len(rows):.3f})"
        )


if __name__ == "__main__":
    main()
