"""Edits a copy of a bundle's config.json for the tests.

    bundle_edit.py BUNDLE key=value...

Keys: vocab_size and selector_value (hyper), and the provenance fields llvm_major,
opaque_pointers (true/false), graph_mode, featurisation_version; head.
"""

import json
import sys

path = sys.argv[1] + "/config.json"
config = json.load(open(path))
for item in sys.argv[2:]:
    key, value = item.split("=", 1)
    if key == "vocab_size":
        config["hyper"]["vocab_size"] = int(value)
    elif key == "selector_value":
        config["hyper"]["selector_value"] = float(value)
    elif key == "head":
        config["head"] = value
    elif key in ("llvm_major", "featurisation_version"):
        config["provenance"][key] = int(value)
    elif key == "opaque_pointers":
        config["provenance"][key] = value == "true"
    elif key == "graph_mode":
        config["provenance"][key] = value
    else:
        sys.exit("unknown key " + key)
json.dump(config, open(path, "w"), indent=2)
