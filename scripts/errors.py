#!/usr/bin/env python3
"""Where a shipped DeepDataFlow model is wrong, on IR files it never saw.

    python3 scripts/errors.py TASK [--files N] [--dir DIR] [--model DIR]

For an evenly spaced sample of N IR files under DIR (default: the unseen
projects' corpus, `scripts/corpus.sh --opaque --unseen`), runs the learned
pass (`opt-16 -passes=programl-infer`, the dataset's sampled roots) and the
exact analysis (`programl analyze`, the same roots), and prints the pooled
true and false positives and false negatives, then the wrong predictions
grouped by the opcodes of the root and of the wrong node (an instruction
root; a variable root is shown as "var"), and a few false positives with
their IR text. Needs a release build (`programl` and the plugin).

With --structure it also prints the false positive rate of the negatives
and the false negative rate of the positives by the node's place in the
graph: the number of messages the model averages there (its in- and
out-edges), and for dominance, at control-flow merges, how many of the
node's control predecessors the root dominates (docs/perf/models.md,
"Why the short tasks stall").
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("PROGRAML_CACHE", os.path.expanduser("~/.cache/programl-rs"))
PROGRAML = os.path.join(ROOT, "target", "release", "programl")


def run(args, warnings=None):
    try:
        out = subprocess.run(args, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"errors.py: {args[0]}: {e.strerror} (a release build and LLVM 16: bash scripts/bootstrap.sh)")
    if out.returncode != 0:
        sys.exit(f"errors.py: {' '.join(args[:2])} ...: {out.stderr.strip() or 'exit ' + str(out.returncode)}")
    if warnings is not None and out.stderr.strip():
        warnings.append(out.stderr.strip().splitlines()[0])
    return out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("task", choices=["reachability", "dominance", "datadep", "liveness", "subexpressions"])
    p.add_argument("--files", type=int, default=25, help="IR files to sample (default 25)")
    p.add_argument("--dir", default=os.path.join(CACHE, "unseen-opaque-O0-O1-O2-O3"))
    p.add_argument("--model", help="bundle (default: models/TASK)")
    p.add_argument("--examples", type=int, default=8, help="false positives to print with their text")
    p.add_argument("--structure", action="store_true", help="error rates by the node's place in the graph")
    p.add_argument("--max-steps", type=int, help="only roots whose analysis needs at most this many steps (30: DDF-30)")
    a = p.parse_args()
    model = a.model or os.path.join(ROOT, "models", a.task)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.dir) for f in fs if f.endswith(".ll"))
    if not files:
        sys.exit(f"errors.py: {a.dir}: no .ll files (scripts/corpus.sh --opaque --unseen builds them)")
    files = files[:: max(1, len(files) // a.files)][: a.files]
    plugin = run([PROGRAML, "plugin-path"]).strip()
    tp = fp = fn = annotated_roots = 0
    warnings = []
    wrong = collections.Counter()
    shown = []
    # (group, kind) -> count, kind one of tp fp fn tn
    places = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        annotated = os.path.join(tmp, "annotated.ll")
        for f in files:
            run(["opt-16", f"-load-pass-plugin={plugin}", f"-passes=programl-infer<model={model};device=cpu>", "-S", f, "-o", annotated], warnings)
            notes = json.loads(run([PROGRAML, "annotations", annotated]))
            graph = json.loads(run([PROGRAML, "graph", "--format", "json", f]))
            opcode = {n["id"]: (n["text"] if n["type"] == 0 else "var") for n in graph["nodes"]}
            # An instruction's text by its node id, and by the id of the
            # variable it defines (liveness predicts variables).
            text = {i["node"]: i["text"] for i in notes["instructions"]}
            text.update({i["value"]: i["text"] for i in notes["instructions"] if i.get("value") is not None})
            truth, steps = {}, {}
            for line in run([PROGRAML, "analyze", "--task", a.task, f]).splitlines():
                j = json.loads(line)
                truth[j["root"]] = set(j["positives"])
                steps[j["root"]] = j["steps"]
            # Per root, the predicted positives as graph node ids (for
            # liveness the variables, arguments included).
            predicted = {e["root"]: {n for n, prob in e["positives"] if prob > 0.5} for e in notes["predictions"].get(a.task, [])}
            roots = [r for fn_ in notes["functions"] for r in fn_.get("roots", {}).get(a.task, [])]
            if a.max_steps is not None:
                roots = [r for r in roots if steps.get(r, 0) <= a.max_steps]
            annotated_roots += len(roots)
            if a.structure:
                structure(graph, a.task, roots, truth, predicted, places)
            for r in roots:
                t, q = truth.get(r, set()), predicted.get(r, set())
                tp, fp, fn = tp + len(t & q), fp + len(q - t), fn + len(t - q)
                for kind, nodes in (("FP", q - t), ("FN", t - q)):
                    for n in nodes:
                        wrong[(kind, opcode.get(r, "?"), opcode.get(n, "?"))] += 1
                        if kind == "FP" and len(shown) < a.examples:
                            shown.append((os.path.relpath(f, a.dir), text.get(r, f"node {r}"), text.get(n, f"node {n}")))
    if not annotated_roots and a.max_steps is not None:
        sys.exit(f"errors.py: no {a.task} root in {len(files)} file(s) needs at most {a.max_steps} steps")
    if not annotated_roots:
        sys.exit(f"errors.py: the learned pass annotated no {a.task} roots in {len(files)} file(s): {warnings[0] if warnings else 'and said nothing'}")
    precision = tp / max(1, tp + fp)
    recall = tp / max(1, tp + fn)
    f1 = 2 * precision * recall / max(1e-12, precision + recall)
    print(f"{a.task}: {len(files)} file{'' if len(files) == 1 else 's'} of {a.dir}: tp {tp}, fp {fp}, fn {fn}; precision {precision:.3f}, recall {recall:.3f}, F1 {f1:.3f}")
    print("wrong predictions by (kind, root's opcode, node's opcode):")
    for (kind, r, n), c in wrong.most_common(12):
        print(f"  {c:6d}  {kind}  root {r:<14} node {n}")
    for f, r, n in shown:
        print(f"FP in {f}:\n  root: {r}\n  node: {n}")
    if a.structure:
        print("error rates by the node's place (FP rate of the negatives, FN rate of the positives):")
        for group in sorted({g for g, _ in places}):
            c = {k: places[(group, k)] for k in ("tp", "fp", "fn", "tn")}
            neg, pos = c["fp"] + c["tn"], c["tp"] + c["fn"]
            line = f"  {group:<52}"
            if neg:
                line += f" negatives {neg:7d}, FP rate {c['fp'] / neg:.4f} ({c['fp']})"
            if pos:
                line += f"  positives {pos:6d}, FN rate {c['fn'] / pos:.4f} ({c['fn']})"
            print(line)


def structure(graph, task, roots, truth, predicted, places):
    """Counts each labelled node of each root (tp, fp, fn, tn) under the
    groups of its place in the graph."""
    kind = 1 if task == "liveness" else 0
    labelled = [n["id"] for n in graph["nodes"] if n["type"] == kind and n["id"] != 0]
    degree = collections.Counter()
    preds = collections.defaultdict(set)
    for e in graph["links"]:
        degree[e["source"]] += 1
        degree[e["target"]] += 1
        if e["flow"] == 0:
            preds[e["target"]].add(e["source"])
    # Hops from the root, along the model's edges in either direction (the
    # steps before the root's mark can reach the node at all), and for
    # datadep along the data edges backwards (the dependency chain the
    # answer follows: two hops per dependence, through the variable).
    undirected = collections.defaultdict(set)
    data_back = collections.defaultdict(set)
    for e in graph["links"]:
        undirected[e["source"]].add(e["target"])
        undirected[e["target"]].add(e["source"])
        if e["flow"] == 1:
            data_back[e["target"]].add(e["source"])

    def hops(root, adjacency):
        seen, frontier, d = {root: 0}, [root], 0
        while frontier:
            d += 1
            nxt = []
            for u in frontier:
                for v in adjacency[u]:
                    if v not in seen:
                        seen[v] = d
                        nxt.append(v)
            frontier = nxt
        return seen

    def bucket(d):
        return "unreached" if d is None else "1-5" if d <= 5 else "6-10" if d <= 10 else "11-20" if d <= 20 else "21-30" if d <= 30 else "over 30"

    for r in roots:
        t, q = truth.get(r, set()), predicted.get(r, set())
        near = hops(r, undirected)
        chain = hops(r, data_back) if task == "datadep" else {}
        for n in labelled:
            k = ("tp" if n in t else "fp") if n in q else ("fn" if n in t else "tn")
            places[(f"hops from the root (either direction) {bucket(near.get(n))}", k)] += 1
            if task == "datadep" and n in t:
                places[(f"dependence chain hops {bucket(chain.get(n))}", k)] += 1
            d = degree[n]
            places[(f"messages averaged {'1-2' if d <= 2 else '3-4' if d <= 4 else '5-8' if d <= 8 else 'over 8'}", k)] += 1
            if task == "dominance" and len(preds[n]) >= 2:
                dominated = sum(1 for p in preds[n] if p in t)
                share = "none" if dominated == 0 else "all" if dominated == len(preds[n]) else "half or fewer" if 2 * dominated <= len(preds[n]) else "over half"
                places[(f"merge (2+ control predecessors), {share} dominated", k)] += 1


if __name__ == "__main__":
    main()
