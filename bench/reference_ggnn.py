"""PyTorch reference GGNN for programl-rs (SPEC section 3).

Deliberately written in the style of upstream ProGraML's GGNN (v0.1.0): one
fused linear map produces the messages of all six edge types, it is sliced per
edge type, and each edge type is gathered and scattered with its own
`index_add_` into a zero-filled accumulator; autograd does the backward pass.
It is the numerical oracle for the Rust (tch) implementation and the baseline
for the benchmarks in this directory; it is not meant to be fast.

Commands:
  parity   --weights W --input I --steps T --out O
           Load weights W (safetensors, parameter names below), run T steps in
           eval mode on batch I and write logits [N,2], loss (scalar, mean CE)
           and grad.<name> for every parameter to O.
  selftest Parameter count and weight save/load round trip.
  init     --out W [--vocab V --seed S]  write freshly initialised weights.
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

TEXT_DIM = 32
SELECTOR_DIM = 2
HIDDEN = TEXT_DIM + SELECTOR_DIM  # 34
EDGE_TYPES = 6  # control, data, call, then the three reversed
FLOWS = ("control", "data", "call")
POSITION_MAX = 1024
SELECTOR_VALUE = 50.0
DROPOUT = 0.2
LEARNING_RATE = 2.5e-4
DEFAULT_VOCAB = 2231


def sinusoid_table(count: int = POSITION_MAX) -> torch.Tensor:
    """[count, 34]: sin(k*f) (16), cos(k*f) (16), then two zero columns."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0.0, TEXT_DIM, 2.0) / TEXT_DIM))
    angles = torch.outer(torch.arange(count, dtype=torch.float32), inv_freq)
    return torch.cat(
        [angles.sin(), angles.cos(), torch.zeros(count, SELECTOR_DIM)], dim=1
    )


class Readout(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(2 * HIDDEN, 2)
        self.transform = nn.Linear(HIDDEN, 2)

    def forward(self, h_final, h_initial):
        # SPEC: the gate sees [h_T ; h_0] (final state first).
        g = torch.sigmoid(self.gate(torch.cat([h_final, h_initial], dim=1)))
        return g * self.transform(h_final)


class ReferenceGGNN(nn.Module):
    def __init__(self, vocab_size: int = DEFAULT_VOCAB):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, TEXT_DIM)  # N(0, 1)
        self.messages = nn.Linear(HIDDEN, EDGE_TYPES * HIDDEN)
        self.gate = nn.Linear(HIDDEN, HIDDEN)
        self.gru = nn.GRUCell(HIDDEN, HIDDEN)
        self.readout = Readout()
        for lin in (self.messages, self.gate, self.readout.gate, self.readout.transform):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
        selector_rows = torch.tensor([[SELECTOR_VALUE, 0.0], [0.0, SELECTOR_VALUE]])
        self.register_buffer("selector_rows", selector_rows, persistent=False)
        self.register_buffer("sinusoids", sinusoid_table(), persistent=False)

    # ---------------------------------------------------------------- pieces
    def initial_state(self, tokens, selector):
        return torch.cat([self.embedding(tokens), self.selector_rows[selector]], dim=1)

    def position_gates(self):
        """[1024, 34] = 2 * sigmoid(gate(sinusoid(k)))."""
        return 2.0 * torch.sigmoid(self.gate(self.sinusoids))

    @staticmethod
    def typed_edges(batch):
        """Six (sources, targets, positions) triples: 3 forward, 3 reversed."""
        fwd = []
        for f in FLOWS:
            pos = batch[f"{f}.positions"].clamp(0, POSITION_MAX - 1)
            fwd.append((batch[f"{f}.sources"], batch[f"{f}.targets"], pos))
        bwd = [(t, s, p) for (s, t, p) in fwd]
        return fwd + bwd

    @staticmethod
    def mean_divisor(edges, num_nodes):
        counts = torch.zeros(num_nodes, dtype=torch.int64)
        for _, tgt, _ in edges:
            counts += torch.bincount(tgt, minlength=num_nodes)
        return counts.clamp(min=1).to(torch.float32).unsqueeze(1)

    def propagate(self, h, edges, divisor):
        """One message-passing step's aggregated input a [N, 34]."""
        gates = self.position_gates()
        # [N, 204] -> [6, 34, N]: slice t is edge type t's transformed states.
        per_type = self.messages(h).t().reshape(EDGE_TYPES, HIDDEN, -1)
        incoming = torch.zeros_like(h)
        for t, (src, tgt, pos) in enumerate(edges):
            msg = per_type[t].t().index_select(0, src) * gates.index_select(0, pos)
            incoming.index_add_(0, tgt, msg)
        return incoming / divisor

    def forward(self, batch, steps: int):
        """Per-node logits [N, 2]."""
        tokens, selector = batch["tokens"], batch["selector"]
        h0 = self.initial_state(tokens, selector)
        edges = self.typed_edges(batch)
        divisor = self.mean_divisor(edges, tokens.numel())
        h = h0
        for _ in range(steps):
            h = self.gru(self.propagate(h, edges, divisor), h)
            if self.training:
                h = F.dropout(h, p=DROPOUT, training=True)
        return self.readout(h, h0)

    @staticmethod
    def loss(logits, labels):
        return F.cross_entropy(logits, labels)

    def make_optimizer(self):
        return torch.optim.AdamW(self.parameters(), lr=LEARNING_RATE)


# ------------------------------------------------------------------ weights
def save_weights(model: nn.Module, path: str):
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous() for k, v in model.named_parameters()}, path)


def load_weights(model: nn.Module, path: str):
    from safetensors.torch import load_file

    tensors = load_file(path)
    params = dict(model.named_parameters())
    if set(tensors) != set(params):
        raise ValueError(
            f"weight names differ: missing {sorted(set(params) - set(tensors))}, "
            f"unexpected {sorted(set(tensors) - set(params))}"
        )
    with torch.no_grad():
        for k, p in params.items():
            if tensors[k].shape != p.shape:
                raise ValueError(f"{k}: shape {tuple(tensors[k].shape)} != {tuple(p.shape)}")
            p.copy_(tensors[k].to(torch.float32))


def model_for_weights(path: str) -> ReferenceGGNN:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        vocab = f.get_slice("embedding.weight").get_shape()[0]
    model = ReferenceGGNN(vocab)
    load_weights(model, path)
    return model


# --------------------------------------------------------------------- CLI
def cmd_parity(a):
    from safetensors.torch import load_file, save_file

    model = model_for_weights(a.weights)
    batch = {k: v.to(torch.int64) for k, v in load_file(a.input).items()}
    model.eval()
    model.zero_grad(set_to_none=True)
    logits = model(batch, a.steps)
    loss = model.loss(logits, batch["labels"])
    loss.backward()
    out = {"logits": logits.detach().contiguous(), "loss": loss.detach().reshape(())}
    for k, p in model.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        out[f"grad.{k}"] = g.contiguous()
    save_file(out, a.out)
    print(f"loss {loss.item():.6f} -> {a.out}")


def cmd_init(a):
    torch.manual_seed(a.seed)
    save_weights(ReferenceGGNN(a.vocab), a.out)


def cmd_selftest(_a):
    import os
    import tempfile

    torch.manual_seed(0)
    model = ReferenceGGNN(DEFAULT_VOCAB)
    names = {k: tuple(v.shape) for k, v in model.named_parameters()}
    expected = {
        "embedding.weight": (DEFAULT_VOCAB, 32),
        "messages.weight": (204, 34), "messages.bias": (204,),
        "gate.weight": (34, 34), "gate.bias": (34,),
        "gru.weight_ih": (102, 34), "gru.weight_hh": (102, 34),
        "gru.bias_ih": (102,), "gru.bias_hh": (102,),
        "readout.gate.weight": (2, 68), "readout.gate.bias": (2,),
        "readout.transform.weight": (2, 34), "readout.transform.bias": (2,),
    }
    assert names == expected, names
    count = sum(p.numel() for p in model.parameters())
    assert count == 87_070, count
    with tempfile.TemporaryDirectory() as d:
        p1, p2 = os.path.join(d, "a.safetensors"), os.path.join(d, "b.safetensors")
        save_weights(model, p1)
        other = model_for_weights(p1)
        for (k, v), (k2, v2) in zip(model.named_parameters(), other.named_parameters()):
            assert k == k2 and torch.equal(v, v2), k
        save_weights(other, p2)
        assert open(p1, "rb").read() == open(p2, "rb").read()
    # Tiny forward/backward smoke test, and the position table's shape facts.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from synthetic import make_batch

    batch, _ = make_batch(batch_nodes=300, graph_nodes=100, seed=1)
    gates = model.position_gates()
    assert gates.shape == (1024, 34) and float(gates.detach().min()) > 0 and float(gates.detach().max()) < 2
    assert torch.all(model.sinusoids[:, 32:] == 0)
    logits = model(batch, 3)
    model.loss(logits, batch["labels"]).backward()
    assert all(p.grad is not None for p in model.parameters())
    print(f"selftest ok: {count} parameters, weights round-trip")


def main(argv=None):
    ap = argparse.ArgumentParser(description="programl-rs reference GGNN")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parity")
    p.add_argument("--weights", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=0, help="0 = torch default")
    i = sub.add_parser("init")
    i.add_argument("--out", required=True)
    i.add_argument("--vocab", type=int, default=DEFAULT_VOCAB)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--threads", type=int, default=0)
    s = sub.add_parser("selftest")
    s.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    {"parity": cmd_parity, "init": cmd_init, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    main()
