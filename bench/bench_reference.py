"""Time the reference GGNN (bench/reference_ggnn.py) on the synthetic batch.

  python bench/bench_reference.py --mode train --steps 30
  python bench/bench_reference.py --mode infer --steps 200

train: model.train(), forward, mean CE, backward, AdamW step, zero_grad()
(upstream ProGraML's order).  infer: model.eval() under torch.no_grad().
Prints one JSON line (see harness.py for the keys).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from reference_ggnn import ReferenceGGNN  # noqa: E402
from synthetic import edge_count, make_batch  # noqa: E402


def reference_steps(batch, steps, seed=0):
    torch.manual_seed(seed)
    model = ReferenceGGNN()
    opt = model.make_optimizer()

    def train():
        model.train()
        logits = model(batch, steps)
        loss = model.loss(logits, batch["labels"])
        loss.backward()
        opt.step()
        opt.zero_grad()

    def infer():
        model.eval()
        with torch.no_grad():
            model(batch, steps)

    return train, infer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["train", "infer"], required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-nodes", type=int, default=10_000)
    ap.add_argument("--graph-nodes", type=int, default=1_440)
    a = ap.parse_args()
    harness.set_threads(a.threads)
    batch, graphs = make_batch(a.batch_nodes, a.graph_nodes, seed=a.seed)
    train, infer = reference_steps(batch, a.steps, a.seed)
    times = harness.measure(train if a.mode == "train" else infer, a.warmup, a.reps)
    harness.report("reference", a.mode, a.steps, times, batch["tokens"].numel(), edge_count(batch), graphs)


if __name__ == "__main__":
    main()
