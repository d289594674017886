"""Checks a sidecar's verify line against its decisions and the exact
analysis.

    verify_check.py SIDECAR.jsonl EXACT.jsonl

SIDECAR.jsonl holds one module's `decisions` and `verify` records;
EXACT.jsonl is `programl analyze` on the same file (one {"root",
"positives"} per sampled root). Checks: the roots are the same; tp + fn is
the number of exact positives among the labelled nodes (the decisions'
nodes); tp + fp the number of decisions above 0.5; tp the overlap.
"""

import json
import sys

records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
decisions = [r for r in records if r["kind"] == "decisions"][-1]
verify = [r for r in records if r["kind"] == "verify"][-1]
exact = {r["root"]: set(r["positives"]) for r in map(json.loads, open(sys.argv[2])) if r}
problems = []
roots = {r["root"]: r["nodes"] for r in decisions["roots"]}
if sorted(roots) != sorted(exact):
    problems.append("roots %r, exact %r" % (sorted(roots), sorted(exact)))
tp = fp = fn = 0
for root, nodes in roots.items():
    labelled = {n for n, _ in nodes}
    predicted = {n for n, p in nodes if p > 0.5}
    actual = exact.get(root, set()) & labelled
    if exact.get(root, set()) - labelled:
        problems.append("root %d: exact positives %r are not labelled nodes" % (root, sorted(exact[root] - labelled)))
    tp += len(predicted & actual)
    fp += len(predicted - actual)
    fn += len(actual - predicted)
if (verify["tp"], verify["fp"], verify["fn"]) != (tp, fp, fn):
    problems.append("verify says tp %d fp %d fn %d, recomputed %d %d %d" % (verify["tp"], verify["fp"], verify["fn"], tp, fp, fn))
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("ok: %d roots, %d positives" % (len(roots), tp + fn))
