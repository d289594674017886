"""Exploration of fast CPU formulations of the SPEC section 3 GGNN.

Every variant shares the parameters of one ReferenceGGNN instance (so results are
comparable with bench/reference_ggnn.py), builds its per-batch index structures
in `prepare` (timed as part of each step: a real batch is new every step), and
runs T steps of message passing with ops that have aten autograd support (the
Rust side uses tch, which has no custom autograd functions).

  python bench/explore_fastpath.py check  [--steps 30]        # numeric agreement
  python bench/explore_fastpath.py bench  --mode train --steps 30 [--variants a,b]
  python bench/explore_fastpath.py bench  --mode infer --steps 200 --rounds 10
  python bench/explore_fastpath.py list

`bench` runs the chosen variants round-robin in one process (one step of each
per round, after warm-up) so that machine noise hits them alike, then prints
one JSON line per variant (keys as in harness.py).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from reference_ggnn import DROPOUT, FLOWS, HIDDEN, POSITION_MAX, ReferenceGGNN  # noqa: E402
from synthetic import edge_count, make_batch  # noqa: E402

E_TYPES = 6


# --------------------------------------------------------------- helpers
def flat_edges(batch, num_nodes):
    """All 6 edge types concatenated: row index into the fused message output
    viewed [N*6, 34] (src*6 + t), targets, clamped positions, inverse degree."""
    src, tgt, pos, typ = [], [], [], []
    for t, f in enumerate(FLOWS):
        s, d = batch[f"{f}.sources"], batch[f"{f}.targets"]
        p = batch[f"{f}.positions"].clamp(0, POSITION_MAX - 1)
        src += [s, d]
        tgt += [d, s]
        pos += [p, p]
        typ += [torch.full_like(s, t), torch.full_like(s, t + 3)]
    # order: c, c_bwd, d, d_bwd, ... -> reorder to type-major is irrelevant for sums
    src, tgt, pos, typ = (torch.cat(x) for x in (src, tgt, pos, typ))
    idx = src * E_TYPES + typ
    deg = torch.bincount(tgt, minlength=num_nodes)
    inv_deg = 1.0 / deg.clamp(min=1).to(torch.float32)
    return idx, tgt, pos, deg, inv_deg


def gate_rows(m, positions):
    """2*sigmoid(gate(sinusoid(positions))) for a 1-D tensor of positions."""
    return 2.0 * torch.sigmoid(F.linear(m.sinusoids.index_select(0, positions), m.gate.weight, m.gate.bias))


def gru(m, a, h):
    return torch.gru_cell(a, h, m.gru.weight_ih, m.gru.weight_hh, m.gru.bias_ih, m.gru.bias_hh)


def readout(m, h, h0):
    return m.readout(h, h0)


def maybe_dropout(h, training):
    return F.dropout(h, p=DROPOUT, training=True) if training else h


# --------------------------------------------------------------- variants
class Reference:
    name = "reference"

    def prepare(self, m, batch):
        return batch

    def forward(self, m, prep, steps, training):
        return m(prep, steps)


class Gather:
    """(a) fused matmul -> index_select -> * per-edge gate -> index_add_ -> * 1/deg."""

    name = "gather"
    sort = False

    def prepare(self, m, batch):
        n = batch["tokens"].numel()
        idx, tgt, pos, deg, inv_deg = flat_edges(batch, n)
        if self.sort:
            order = torch.argsort(tgt, stable=True)
            idx, tgt, pos = idx[order], tgt[order], pos[order]
        return dict(batch=batch, n=n, idx=idx, tgt=tgt, pos=pos, inv_deg=inv_deg.unsqueeze(1))

    def forward(self, m, p, steps, training):
        b = p["batch"]
        h0 = m.initial_state(b["tokens"], b["selector"])
        ge = gate_rows(m, p["pos"])  # [E,34], once per forward
        h = h0
        for _ in range(steps):
            mf = F.linear(h, m.messages.weight, m.messages.bias).view(-1, HIDDEN)
            msg = mf.index_select(0, p["idx"]) * ge
            agg = torch.zeros_like(h).index_add_(0, p["tgt"], msg) * p["inv_deg"]
            h = maybe_dropout(gru(m, agg, h), training)
        return readout(m, h, h0)


class GatherSorted(Gather):
    name = "gather_sorted"
    sort = True


class SegmentCSR(Gather):
    """(b) edges sorted by target; per-edge gated messages reduced by a CSR
    [N, E] (values 1/deg) x [E, 34] product: torch.sparse.mm(A, G, 'sum')."""

    name = "edge_csr"
    sort = True

    def prepare(self, m, batch):
        p = super().prepare(m, batch)
        n, tgt = p["n"], p["tgt"]
        e = tgt.numel()
        crow = torch.zeros(n + 1, dtype=torch.int64)
        crow[1:] = torch.cumsum(torch.bincount(tgt, minlength=n), 0)
        vals = p["inv_deg"].squeeze(1).index_select(0, tgt)
        p["A"] = torch.sparse_csr_tensor(crow, torch.arange(e), vals, (n, e))
        p["lengths"] = torch.bincount(tgt, minlength=n)
        return p

    def aggregate(self, p, msg):
        return torch.sparse.mm(p["A"], msg, "sum")

    def forward(self, m, p, steps, training):
        b = p["batch"]
        h0 = m.initial_state(b["tokens"], b["selector"])
        ge = gate_rows(m, p["pos"])
        h = h0
        for _ in range(steps):
            mf = F.linear(h, m.messages.weight, m.messages.bias).view(-1, HIDDEN)
            msg = mf.index_select(0, p["idx"]) * ge
            h = maybe_dropout(gru(m, self.aggregate(p, msg), h), training)
        return readout(m, h, h0)


class SegmentReduce(SegmentCSR):
    name = "edge_segment"

    def aggregate(self, p, msg):
        return torch.segment_reduce(msg, "sum", lengths=p["lengths"]) * p["inv_deg"]


class PosGrouped:
    """(c) edges grouped by (position k, target v); per step
    Y = aggregate_k(Mf) -> [K*N, 34] (values 1/deg), a = sum_k Y_k * p(k).
    Positions >= K (rare in real graphs) go through a per-edge gather tail."""

    name = "pos_csr"
    kmax = 8  # dense position groups; the rest is the tail

    def prepare(self, m, batch):
        n = batch["tokens"].numel()
        idx, tgt, pos, deg, inv_deg = flat_edges(batch, n)
        k = int(min(self.kmax, int(pos.max()) + 1)) if pos.numel() else 1
        dense = pos < k
        d_idx, d_tgt, d_pos = idx[dense], tgt[dense], pos[dense]
        key = d_pos * n + d_tgt
        order = torch.argsort(key, stable=True)
        d_idx, key, d_tgt = d_idx[order], key[order], d_tgt[order]
        counts = torch.bincount(key, minlength=k * n)
        crow = torch.zeros(k * n + 1, dtype=torch.int64)
        crow[1:] = torch.cumsum(counts, 0)
        w = inv_deg.index_select(0, d_tgt)
        p = dict(batch=batch, n=n, k=k, inv_deg=inv_deg.unsqueeze(1),
                 positions=torch.arange(k), idx=d_idx, w=w, offsets=crow[:-1].contiguous())
        p["A"] = torch.sparse_csr_tensor(crow, d_idx, w, (k * n, n * E_TYPES))
        tail = ~dense
        p["tail"] = bool(tail.any())
        if p["tail"]:
            p["t_idx"], p["t_tgt"], p["t_pos"] = idx[tail], tgt[tail], pos[tail]
        return p

    def dense_part(self, p, mf):
        return torch.sparse.mm(p["A"], mf, "sum")

    def forward(self, m, p, steps, training):
        b = p["batch"]
        n, k = p["n"], p["k"]
        h0 = m.initial_state(b["tokens"], b["selector"])
        gk = gate_rows(m, p["positions"]).unsqueeze(1)  # [K,1,34]
        gt = gate_rows(m, p["t_pos"]) if p["tail"] else None
        h = h0
        for _ in range(steps):
            mf = F.linear(h, m.messages.weight, m.messages.bias).view(-1, HIDDEN)
            y = self.dense_part(p, mf).view(k, n, HIDDEN)
            agg = (y * gk).sum(0)
            if p["tail"]:
                msg = mf.index_select(0, p["t_idx"]) * gt
                agg = agg + torch.zeros_like(h).index_add_(0, p["t_tgt"], msg) * p["inv_deg"]
            h = maybe_dropout(gru(m, agg, h), training)
        return readout(m, h, h0)


class PosBag(PosGrouped):
    """(c) with torch.embedding_bag(Mf, idx, offsets, mode=sum,
    per_sample_weights=1/deg) instead of the CSR product."""

    name = "pos_bag"

    def dense_part(self, p, mf):
        return F.embedding_bag(p["idx"], mf, p["offsets"], mode="sum", per_sample_weights=p["w"])


class PosBagFusedMM(PosBag):
    """pos_bag + h @ [W_msg; W_hh]^T as ONE addmm per step (both read h), GRU
    gates by hand (aten::gru_cell would redo the h matmul)."""

    name = "pos_bag_fusedmm"

    def forward(self, m, p, steps, training):
        b = p["batch"]
        n, k = p["n"], p["k"]
        h0 = m.initial_state(b["tokens"], b["selector"])
        gk = gate_rows(m, p["positions"]).unsqueeze(1)
        gt = gate_rows(m, p["t_pos"]) if p["tail"] else None
        w_cat = torch.cat([m.messages.weight, m.gru.weight_hh], 0)  # [306,34]
        b_cat = torch.cat([m.messages.bias, m.gru.bias_hh], 0)
        h = h0
        nm = E_TYPES * HIDDEN
        for _ in range(steps):
            both = F.linear(h, w_cat, b_cat)  # [N,306]
            mf = both[:, :nm].reshape(-1, HIDDEN)
            gh = both[:, nm:]
            y = self.dense_part(p, mf).view(k, n, HIDDEN)
            agg = (y * gk).sum(0)
            if p["tail"]:
                msg = mf.index_select(0, p["t_idx"]) * gt
                agg = agg + torch.zeros_like(h).index_add_(0, p["t_tgt"], msg) * p["inv_deg"]
            gi = F.linear(agg, m.gru.weight_ih, m.gru.bias_ih)
            rz = torch.sigmoid(gi[:, : 2 * HIDDEN] + gh[:, : 2 * HIDDEN])
            r, z = rz[:, :HIDDEN], rz[:, HIDDEN:]
            nn_ = torch.tanh(torch.addcmul(gi[:, 2 * HIDDEN:], r, gh[:, 2 * HIDDEN:]))
            h = maybe_dropout(torch.addcmul(nn_, z, h - nn_), training)
        return readout(m, h, h0)


VARIANTS = {c.name: c for c in (Reference, Gather, GatherSorted, SegmentCSR, SegmentReduce,
                                 PosGrouped, PosBag, PosBagFusedMM)}


# --------------------------------------------------------------- commands
def make_step(var, m, opt, batch, steps, mode):
    def train():
        m.train()
        p = var.prepare(m, batch)
        logits = var.forward(m, p, steps, True)
        F.cross_entropy(logits, batch["labels"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def infer():
        m.eval()
        with torch.no_grad():
            p = var.prepare(m, batch)
            var.forward(m, p, steps, False)

    return train if mode == "train" else infer


def cmd_check(a):
    batch, _ = make_batch(seed=a.seed)
    if a.long_positions:  # geometric positions up to ~355 to exercise the tail path
        g = torch.Generator().manual_seed(1)
        for f in FLOWS:
            e = batch[f"{f}.positions"].numel()
            batch[f"{f}.positions"] = torch.distributions.Geometric(0.35).sample((e,)).long().clamp(max=355)
    torch.manual_seed(a.seed)
    m = ReferenceGGNN().eval()
    ref = Reference()
    names = [v for v in (a.variants.split(",") if a.variants else VARIANTS)]
    results = {}
    for name in names:
        var = VARIANTS[name]()
        m.zero_grad(set_to_none=True)
        p = var.prepare(m, batch)
        logits = var.forward(m, p, a.steps, False)
        loss = F.cross_entropy(logits, batch["labels"])
        loss.backward()
        grads = {k: v.grad.clone() for k, v in m.named_parameters()}
        results[name] = (logits.detach(), loss.item(), grads)
    r_logits, r_loss, r_grads = results["reference"] if "reference" in results else (None,) * 3
    for name, (lg, loss, grads) in results.items():
        if r_logits is None:
            print(name, loss)
            continue
        gd = max(float((grads[k] - r_grads[k]).abs().max() / (r_grads[k].abs().max() + 1e-30)) for k in grads)
        print(f"{name:18s} max|dlogits| {float((lg - r_logits).abs().max()):.2e}  "
              f"|dloss| {abs(loss - r_loss):.2e}  max rel grad diff {gd:.2e}")


def cmd_bench(a):
    harness.set_threads(a.threads)
    batch, graphs = make_batch(seed=a.seed)
    n = batch["tokens"].numel()
    names = a.variants.split(",") if a.variants else list(VARIANTS)
    fns = {}
    for name in names:
        torch.manual_seed(a.seed)
        m = ReferenceGGNN()
        opt = m.make_optimizer()
        fns[name] = make_step(VARIANTS[name](), m, opt, batch, a.steps, a.mode)
    for _ in range(a.warmup):
        for f in fns.values():
            f()
    times = {k: [] for k in fns}
    for _ in range(a.rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    mm = harness.matmul_gflops(n)
    ref_med = statistics.median(times["reference"]) if "reference" in times else None
    for k, ts in times.items():
        extra = {}
        if ref_med:
            extra["speedup_vs_reference"] = round(ref_med / statistics.median(ts), 2)
        harness.report(k, a.mode, a.steps, ts, n, edge_count(batch), graphs, mm=mm, **extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--steps", type=int, default=30)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--variants", default="")
    c.add_argument("--long-positions", action="store_true")
    c.add_argument("--threads", type=int, default=2)
    b = sub.add_parser("bench")
    b.add_argument("--mode", choices=["train", "infer"], required=True)
    b.add_argument("--steps", type=int, default=30)
    b.add_argument("--variants", default="")
    b.add_argument("--rounds", type=int, default=10)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--threads", type=int, default=2)
    sub.add_parser("list")
    a = ap.parse_args()
    if a.cmd == "list":
        for k, v in VARIANTS.items():
            print(f"{k:18s} {(v.__doc__ or '').strip().splitlines()[0] if v.__doc__ else ''}")
        return
    harness.set_threads(a.threads)
    {"check": cmd_check, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    main()
