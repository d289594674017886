"""Reads a `programl dataset export` back with plain Python protobuf and
compares it with what the store holds (crates/cli/tests/export.rs writes the
expectations as JSON).

Usage: export_check.py EXPECTED.json PROGRAML_PACKAGE_DIR

PROGRAML_PACKAGE_DIR is the `programl` package of the ProGraML 0.3.2 wheel;
its message definitions are the reference. Its generated modules are used if
the installed protobuf accepts them (protobuf >= 4 refuses code that old in
its default implementation); otherwise the message classes are built from
the serialized file descriptors those modules embed.

Exits 0 when everything matches, 1 with one line per mismatch otherwise.
"""

import ast
import csv
import importlib
import json
import os
import sys
import types

# The wheel's generated modules, in dependency order.
MODULES = [
    "programl.third_party.tensorflow.features_pb2",
    "programl.proto.program_graph_pb2",
    "programl.proto.util_pb2",
]
GRAPH_SUFFIX = ".ProgramGraph.pb"
LABELS_SUFFIX = ".ProgramGraphFeaturesList.pb"
VOCAB_HEADER = ["cumulative_frequency", "cumulative_node_frequency", "count", "text"]
NODE_LISTS = {"data_flow_root_node", "data_flow_value"}
GRAPH_FEATURES = {"data_flow_step_count", "data_flow_active_node_count"}


def from_generated(package_dir):
    """The wheel's generated classes, imported without running the package's
    __init__ (which needs the native extension and more)."""
    root = os.path.dirname(package_dir)
    for pkg in ["programl", "programl.proto", "programl.third_party", "programl.third_party.tensorflow"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = m
    util = importlib.import_module("programl.proto.util_pb2")
    graph = importlib.import_module("programl.proto.program_graph_pb2")
    return graph.ProgramGraph, util.ProgramGraphFeaturesList


def serialized_descriptor(path):
    """The `serialized_pb=` bytes literal of a generated module, read
    without executing it."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "serialized_pb":
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{path}: no serialized descriptor")


def from_descriptors(package_dir):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for module in MODULES:
        path = os.path.join(os.path.dirname(package_dir), *module.split(".")) + ".py"
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(path)))

    def cls(name):
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return cls("programl.ProgramGraph"), cls("programl.ProgramGraphFeaturesList")


def self_test(ProgramGraph, FeaturesList):
    """The classes handle maps and repeated messages (the pure-Python
    implementation imports old generated code but breaks its maps)."""
    m = FeaturesList()
    m.graph.add().node_features.feature_list["k"].feature.add().int64_list.value.append(7)
    back = FeaturesList.FromString(m.SerializeToString())
    assert back.graph[0].node_features.feature_list["k"].feature[0].int64_list.value[0] == 7
    g = ProgramGraph()
    g.node.add().text = "x"
    assert ProgramGraph.FromString(g.SerializeToString()).node[0].text == "x"


def load_classes(package_dir):
    try:
        classes = from_generated(package_dir)
        self_test(*classes)
        return classes, "the wheel's generated modules"
    except Exception as e:  # noqa: BLE001 - any failure means: use descriptors
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        for name in list(sys.modules):
            if name == "programl" or name.startswith("programl."):
                del sys.modules[name]
        classes = from_descriptors(package_dir)
        self_test(*classes)
        return classes, f"message classes built from the wheel's descriptors (generated modules unusable: {why})"


class Checker:
    def __init__(self, ProgramGraph, FeaturesList):
        self.ProgramGraph = ProgramGraph
        self.FeaturesList = FeaturesList
        self.problems = []
        self.counts = {"graphs": 0, "label files": 0, "examples": 0, "links": 0, "vocab rows": 0}

    def fail(self, where, what):
        self.problems.append(f"{where}: {what}")

    def same_names(self, where, found, expected):
        found, expected = set(found), set(expected)
        if found != expected:
            missing = sorted(expected - found)[:5]
            extra = sorted(found - expected)[:5]
            self.fail(where, f"files differ: missing {missing}, unexpected {extra}")
            return False
        return True

    def parse(self, cls, path):
        with open(path, "rb") as f:
            data = f.read()
        try:
            return cls.FromString(data)
        except Exception as e:  # noqa: BLE001
            self.fail(path, f"does not parse as {cls.DESCRIPTOR.full_name}: {e}")
            return None

    def check_graphs(self, out, graphs):
        d = os.path.join(out, "graphs")
        self.same_names(d, os.listdir(d), [n + GRAPH_SUFFIX for n in graphs])
        for name, want in graphs.items():
            path = os.path.join(d, name + GRAPH_SUFFIX)
            if not os.path.isfile(path):
                continue
            g = self.parse(self.ProgramGraph, path)
            if g is None:
                continue
            self.counts["graphs"] += 1
            texts = [n.text for n in g.node]
            if texts != want["texts"]:
                self.fail(path, f"node texts differ from the store ({len(texts)} nodes, expected {len(want['texts'])})")
            if len(g.edge) != want["edges"]:
                self.fail(path, f"{len(g.edge)} edges, the store has {want['edges']}")

    def check_splits(self, out, splits):
        for split in ["train", "val", "test"]:
            d = os.path.join(out, split)
            if split not in splits:
                if os.path.isdir(d) and os.listdir(d):
                    self.fail(d, "exists, but no export of this split was made")
                continue
            if not self.same_names(d, os.listdir(d), [n + GRAPH_SUFFIX for n in splits[split]]):
                continue
            for name in splits[split]:
                link = os.path.join(d, name + GRAPH_SUFFIX)
                if not os.path.islink(link):
                    self.fail(link, "is not a symbolic link")
                    continue
                target = os.readlink(link)
                if target != "../graphs/" + name + GRAPH_SUFFIX:
                    self.fail(link, f"points to {target!r}, not ../graphs/{name}{GRAPH_SUFFIX}")
                elif not os.path.isfile(link):
                    self.fail(link, "is dangling")
                else:
                    self.counts["links"] += 1

    def check_example(self, where, features, want, nodes):
        lists = features.node_features.feature_list
        if set(lists.keys()) != NODE_LISTS:
            self.fail(where, f"node feature lists {sorted(lists.keys())}, expected {sorted(NODE_LISTS)}")
            return
        for key, expected in [
            ("data_flow_root_node", [1 if i == want["root"] else 0 for i in range(nodes)]),
            ("data_flow_value", [0] * nodes),
        ]:
            if key == "data_flow_value":
                for p in want["positives"]:
                    expected[p] = 1
            values = []
            for i, f in enumerate(lists[key].feature):
                if f.WhichOneof("kind") != "int64_list" or len(f.int64_list.value) != 1:
                    self.fail(where, f"{key}[{i}] is not an int64_list of one value")
                    return
                values.append(f.int64_list.value[0])
            if values != expected:
                diff = [i for i in range(max(len(values), len(expected))) if i >= len(values) or i >= len(expected) or values[i] != expected[i]]
                self.fail(where, f"{key}: {len(values)} values for {nodes} nodes, first differing node {diff[0]}")
        scalars = features.features.feature
        if set(scalars.keys()) != GRAPH_FEATURES:
            self.fail(where, f"graph features {sorted(scalars.keys())}, expected {sorted(GRAPH_FEATURES)}")
            return
        for key, expected in [("data_flow_step_count", want["steps"]), ("data_flow_active_node_count", len(want["positives"]))]:
            v = list(scalars[key].int64_list.value)
            if v != [expected]:
                self.fail(where, f"{key} is {v}, the store says {expected}")
        for field in ["edge_features", "function_features", "module_features"]:
            if len(getattr(features, field).feature_list):
                self.fail(where, f"unexpected {field}")

    def check_labels(self, out, labels, graphs):
        d = os.path.join(out, "labels")
        self.same_names(d, os.listdir(d) if os.path.isdir(d) else [], labels.keys())
        for analysis, files in labels.items():
            ad = os.path.join(d, analysis)
            if not os.path.isdir(ad):
                continue
            self.same_names(ad, os.listdir(ad), [n + LABELS_SUFFIX for n in files])
            for name, examples in files.items():
                path = os.path.join(ad, name + LABELS_SUFFIX)
                if not os.path.isfile(path):
                    continue
                m = self.parse(self.FeaturesList, path)
                if m is None:
                    continue
                self.counts["label files"] += 1
                if len(m.context.feature):
                    self.fail(path, "unexpected context features")
                if len(m.graph) != len(examples):
                    self.fail(path, f"{len(m.graph)} examples, the store has {len(examples)} in the subset")
                    continue
                nodes = len(graphs[name]["texts"])
                for j, (features, want) in enumerate(zip(m.graph, examples)):
                    self.counts["examples"] += 1
                    self.check_example(f"{path} example {j} (root {want['root']})", features, want, nodes)

    def check_vocab(self, out, vocab, total):
        path = os.path.join(out, "vocab", "programl.csv")
        with open(path, newline="") as f:
            rows = list(csv.reader(f, delimiter="\t"))
        if not rows or rows[0] != VOCAB_HEADER:
            self.fail(path, f"header {rows[0] if rows else None}, expected {VOCAB_HEADER}")
            return
        rows = rows[1:]
        if [(r[3], int(r[2])) for r in rows if len(r) == 4] != [tuple(v) for v in vocab] or any(len(r) != 4 for r in rows):
            self.fail(path, f"{len(rows)} rows differ from the {len(vocab)} texts of the train split by count, then text")
            return
        cumulative = 0
        for i, r in enumerate(rows):
            cumulative += int(r[2])
            share = "%.4g" % (cumulative / total)
            if r[0] != share or r[1] != share:
                self.fail(path, f"row {i + 2}: shares {r[0]}, {r[1]}, expected {share} (C++ setprecision(4))")
                return
            if i and int(r[2]) > int(rows[i - 1][2]):
                self.fail(path, f"row {i + 2}: count above the previous row's")
                return
            self.counts["vocab rows"] += 1
        if rows and rows[-1][0] != "1":
            self.fail(path, f"the last cumulative share is {rows[-1][0]}, not 1")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        expected = json.load(f)
    (ProgramGraph, FeaturesList), how = load_classes(sys.argv[2])
    print(f"reading with {how}")
    c = Checker(ProgramGraph, FeaturesList)
    for d in expected["dirs"]:
        out = d["out"]
        c.check_graphs(out, d["graphs"])
        c.check_splits(out, d["splits"])
        c.check_labels(out, d["labels"], d["graphs"])
        c.check_vocab(out, expected["vocab"], expected["vocab_total"])
    print("checked: " + ", ".join(f"{v} {k}" for k, v in c.counts.items()))
    for p in c.problems:
        print(p, file=sys.stderr)
    return 1 if c.problems else 0


if __name__ == "__main__":
    sys.exit(main())
