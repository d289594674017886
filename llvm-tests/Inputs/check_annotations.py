"""Checks the learned pass's annotations against the module's graph.

    check_annotations.py ANNOTATIONS.json GRAPH.json TASK [ROOTS.jsonl]

ANNOTATIONS.json is `programl annotations` of the annotated IR, GRAPH.json
`programl graph --format json` of the same IR before the pass. Checks that
every annotation points where it says:

- each annotated instruction's `node` is an instruction node of the graph
  whose full_text is the instruction's text (`!programl.*` attachments
  removed from both, metadata and attribute group numbers ignored);
- its `value` is a variable node that the instruction defines (data edge
  instruction -> variable);
- each function's `args` are variable nodes (or -1);
- every root of TASK is a node of the graph of the task's root kind
  (variables for datadep, instructions otherwise), listed by the function
  it belongs to, and every positive a node of the kind the task labels
  (variables for liveness, instructions otherwise);
- one model entry names TASK;
- with ROOTS.jsonl (`programl analyze` output: one {"root": ...} per line),
  the roots are exactly those.

Prints one summary line; exits 1 with every problem listed otherwise.
"""

import json
import re
import sys

INSTRUCTION, VARIABLE = 0, 1
DATA = 1
ATTACHMENT = re.compile(r",\s*!programl\.[A-Za-z.]+ ![0-9]+")
# Metadata node and attribute group numbers change when the pass adds
# metadata (the printer numbers them afresh).
METADATA_REF = re.compile(r"(?<![A-Za-z0-9_])[!#][0-9]+")


def full_text(node):
    full = node.get("features", {}).get("full_text", [])
    text = full[0] if full and full[0] else node["text"]
    return METADATA_REF.sub(lambda m: m.group(0)[0] + "N", " ".join(ATTACHMENT.sub("", text).split()))


def main(annotations_path, graph_path, task, roots_path=None):
    ann = json.load(open(annotations_path))
    graph = json.load(open(graph_path))
    nodes = {n["id"]: n for n in graph["nodes"]}
    functions = graph["graph"]["function"]
    defines = {(e["source"], e["target"]) for e in graph["links"] if e["flow"] == DATA}
    problems = []

    if ann["schema"] != "1":
        problems.append("schema is %r, expected '1'" % ann["schema"])
    if [m["task"] for m in ann["models"]].count(task) != 1:
        problems.append("models %r, expected one %s entry" % (ann["models"], task))

    for inst in ann["instructions"]:
        node = nodes.get(inst["node"])
        text = METADATA_REF.sub(lambda m: m.group(0)[0] + "N", " ".join(ATTACHMENT.sub("", inst["text"]).split()))
        if node is None or node["type"] != INSTRUCTION:
            problems.append("node %r of %r is not an instruction" % (inst["node"], text))
            continue
        if full_text(node) != text:
            problems.append("node %d is %r in the graph, %r in the IR" % (inst["node"], full_text(node), text))
        if functions[node["function"]]["name"] != inst["function"]:
            problems.append("node %d is in %s, not %s" % (inst["node"], functions[node["function"]]["name"], inst["function"]))
        value = inst.get("value")
        if value is not None:
            v = nodes.get(value)
            if v is None or v["type"] != VARIABLE or (inst["node"], value) not in defines:
                problems.append("value %r of node %d is not the variable it defines" % (value, inst["node"]))

    for f in ann["functions"]:
        for a in f.get("args", []):
            if a != -1 and (a not in nodes or nodes[a]["type"] != VARIABLE):
                problems.append("%s: argument node %r is not a variable" % (f["name"], a))

    root_kind = VARIABLE if task == "datadep" else INSTRUCTION
    positive_kind = VARIABLE if task == "liveness" else INSTRUCTION
    predictions = ann["predictions"].get(task, [])
    positives = 0
    for p in predictions:
        root = nodes.get(p["root"])
        if root is None or root["type"] != root_kind:
            problems.append("root %r is not a %s root" % (p["root"], task))
        elif functions[root["function"]]["name"] != p["function"]:
            problems.append("root %d is listed by %s" % (p["root"], p["function"]))
        for n, prob in p["positives"]:
            positives += 1
            if n not in nodes or nodes[n]["type"] != positive_kind or not 0.5 < prob <= 1.0:
                problems.append("positive %r (p=%r) of root %r is not a labelled node" % (n, prob, p["root"]))

    if roots_path:
        expected = sorted(json.loads(line)["root"] for line in open(roots_path) if line.strip())
        got = sorted(p["root"] for p in predictions)
        if got != expected:
            problems.append("roots %r, expected %r" % (got, expected))

    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("ok: %d instructions anchored, %d %s roots, %d positives" % (len(ann["instructions"]), len(predictions), task, positives))


if __name__ == "__main__":
    main(*sys.argv[1:])
