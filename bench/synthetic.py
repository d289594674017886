"""Seeded synthetic ProGraML-shaped batch used by the GGNN benchmarks.

Shape (defaults): G = max(1, floor(batch_nodes / graph_nodes)) disjoint graphs
of n = graph_nodes nodes each.  Per graph: round(0.55 n) control, round(1.15 n)
data and round(0.15 n) call forward edges with endpoints drawn uniformly from the
graph's own nodes and positions uniform in {0,1,2,3}; exactly round(0.1 n)
root-selected nodes; tokens uniform over `vocab` rows; labels Bernoulli(p_pos).
Rounding is half-up (floor(x + 0.5)) so that other implementations can match it.

The batch is a dict of int64 tensors in the parity-input layout of
reference_ggnn.py: tokens, selector, labels [N] and {flow}.sources/targets/positions.

CLI: python bench/synthetic.py --out batch.safetensors [--seed S ...]
"""
import argparse
import math

import torch

FLOWS = ("control", "data", "call")
EDGE_FRACTIONS = {"control": 0.55, "data": 1.15, "call": 0.15}
DEFAULT_BATCH_NODES = 10_000
DEFAULT_GRAPH_NODES = 1_440
DEFAULT_VOCAB = 2_231


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def make_batch(
    batch_nodes: int = DEFAULT_BATCH_NODES,
    graph_nodes: int = DEFAULT_GRAPH_NODES,
    vocab: int = DEFAULT_VOCAB,
    seed: int = 0,
    positions: int = 4,
    root_fraction: float = 0.1,
    positive_fraction: float = 0.1,
):
    g = torch.Generator().manual_seed(seed)
    n = graph_nodes
    num_graphs = max(1, batch_nodes // graph_nodes)
    total = num_graphs * n
    tokens = torch.randint(0, vocab, (total,), generator=g, dtype=torch.int64)
    labels = (torch.rand(total, generator=g) < positive_fraction).to(torch.int64)
    selector = torch.zeros(total, dtype=torch.int64)
    roots = round_half_up(root_fraction * n)
    edges = {f: ([], [], []) for f in FLOWS}
    for gi in range(num_graphs):
        base = gi * n
        sel = torch.randperm(n, generator=g)[:roots]
        selector[base + sel] = 1
        for f in FLOWS:
            m = round_half_up(EDGE_FRACTIONS[f] * n)
            s, t, p = edges[f]
            s.append(torch.randint(0, n, (m,), generator=g, dtype=torch.int64) + base)
            t.append(torch.randint(0, n, (m,), generator=g, dtype=torch.int64) + base)
            p.append(torch.randint(0, positions, (m,), generator=g, dtype=torch.int64))
    batch = {"tokens": tokens, "selector": selector, "labels": labels}
    for f in FLOWS:
        s, t, p = edges[f]
        batch[f"{f}.sources"] = torch.cat(s)
        batch[f"{f}.targets"] = torch.cat(t)
        batch[f"{f}.positions"] = torch.cat(p)
    return batch, num_graphs


def edge_count(batch) -> int:
    return sum(batch[f"{f}.sources"].numel() for f in FLOWS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-nodes", type=int, default=DEFAULT_BATCH_NODES)
    ap.add_argument("--graph-nodes", type=int, default=DEFAULT_GRAPH_NODES)
    ap.add_argument("--vocab", type=int, default=DEFAULT_VOCAB)
    a = ap.parse_args()
    from safetensors.torch import save_file

    batch, graphs = make_batch(a.batch_nodes, a.graph_nodes, a.vocab, a.seed)
    save_file({k: v.contiguous() for k, v in batch.items()}, a.out)
    print(f"{graphs} graphs, {batch['tokens'].numel()} nodes, {edge_count(batch)} forward edges -> {a.out}")


if __name__ == "__main__":
    main()
