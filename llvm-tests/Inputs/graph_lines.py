"""Prints node-link JSON graphs one node or edge per line, for FileCheck.

    graph_lines.py FILE...      (or stdin)

    node <id> <type> <text> | <full_text>
    edge <flow> <position> <src> -> <dst> | <src full_text> -> <dst full_text>

Types: instruction, variable, constant, type; flows: control, data, call,
type. A node without full_text (e.g. [external]) shows its text instead; a
full_text over several lines is joined into one.
Several graphs are printed one after another, each opened by `graph <file>`.
"""

import json
import sys

TYPES = ["instruction", "variable", "constant", "type"]
FLOWS = ["control", "data", "call", "type"]


def show(node):
    """full_text on one line (invoke and landingpad print on several)."""
    full = node.get("features", {}).get("full_text", [])
    return " ".join(full[0].split()) if full and full[0] else node["text"]


def main(paths):
    sources = [(p, open(p, encoding="utf-8")) for p in paths] or [("<stdin>", sys.stdin)]
    for name, stream in sources:
        graph = json.load(stream)
        print("graph %s nodes=%d edges=%d" % (name, len(graph["nodes"]), len(graph["links"])))
        nodes = {n["id"]: n for n in graph["nodes"]}
        for n in graph["nodes"]:
            print("node %d %s %s | %s" % (n["id"], TYPES[n["type"]], n["text"], show(n)))
        for e in graph["links"]:
            s, t = nodes[e["source"]], nodes[e["target"]]
            print("edge %s %d %d -> %d | %s -> %s" % (FLOWS[e["flow"]], e["position"], s["id"], t["id"], show(s), show(t)))


if __name__ == "__main__":
    main(sys.argv[1:])
