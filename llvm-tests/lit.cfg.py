# lit configuration of the plugin tests (`llvm-tests/`).
#
# Run through llvm-tests/run.sh, which writes lit.site.cfg.py (paths only)
# from lit.site.cfg.py.in and then loads this file.
#
# Substitutions:
#   %plugin     the pass plugin (libprograml_passes.so)
#   %opt        opt-NN -load-pass-plugin=%plugin   (the plugin already loaded)
#   %opt-plain  opt-NN without the plugin
#   %clang      clang-NN;  pass -fpass-plugin=%plugin yourself
#   %clangxx    clang-NN -x c++
#   %FileCheck  FileCheck of the same LLVM
#   %graph-lines  a helper printing a node-link JSON graph one node/edge per line
#   %programl   the programl CLI (feature `programl-cli` when it is built)
#   %cmake      cmake (feature `cmake` when installed)
#   %srcroot    the repository root
#   %runtime-cuda  the CUDA model runtime (feature `torch-cuda` when it is built)
#   %models     the shipped model bundles (models/ at the repository root)
#   %readelf    readelf
# Features: plugins, programl-cli, cmake, llvm-NN, torch-cuda (the CUDA
# runtime is built next to the plugin; the CPU inference is in the plugin
# and needs nothing), lld (ld.lld in LLVM's bin directory, for clang -flto
# -fuse-ld=lld), gpu (/dev/nvidia0 exists).

import os
import shutil
import sys

import lit.formats
import lit.util

config.name = "programl-llvm"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ll", ".c", ".cpp", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in", "run.sh"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))

site = getattr(config, "programl_plugin", None)
if site is None:
    lit_config.fatal("lit.site.cfg.py is missing: run llvm-tests/run.sh, which generates it")

config.test_exec_root = config.programl_test_exec_root
if not os.path.isfile(config.programl_plugin):
    lit_config.fatal(
        "plugin %s not found: build it with `cargo build -p programl-passes`" % config.programl_plugin
    )

bindir = config.llvm_bindir
major = config.llvm_major


def tool(name):
    """An LLVM tool: NAME-MAJOR on PATH, else NAME in LLVM's bindir."""
    for candidate in ("%s-%s" % (name, major), os.path.join(bindir, name)):
        found = shutil.which(candidate)
        if found:
            return found
    lit_config.fatal("%s not found (looked for %s-%s and %s/%s)" % (name, name, major, bindir, name))


# Tests see only a clean environment: no PROGRAML_* leaks in from the caller.
for var in list(config.environment):
    if var.startswith("PROGRAML_"):
        del config.environment[var]
# LLVM's `not`, `count`, `split-file` come from its bindir.
config.environment["PATH"] = os.pathsep.join([bindir, config.environment.get("PATH", os.environ.get("PATH", ""))])

opt = tool("opt")
clang = tool("clang")
plugin = config.programl_plugin

# Longest names first: lit substitutes in order.
config.substitutions.append(("%opt-plain", opt))
config.substitutions.append(("%opt", "%s -load-pass-plugin=%s" % (opt, plugin)))
config.substitutions.append(("%clangxx", "%s -x c++" % clang))
config.substitutions.append(("%clang", clang))
config.substitutions.append(("%plugin", plugin))
config.substitutions.append(("%FileCheck", tool("FileCheck")))
config.substitutions.append(
    ("%graph-lines", "%s %s" % (sys.executable, os.path.join(config.test_source_root, "Inputs", "graph_lines.py")))
)
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%srcroot", config.programl_src_root))

config.available_features.add("plugins")
config.available_features.add("llvm-%s" % major)

cli = getattr(config, "programl_cli", "")
if cli and os.path.isfile(cli):
    config.available_features.add("programl-cli")
    config.substitutions.append(("%programl", cli))

cmake = shutil.which("cmake")
if cmake:
    config.available_features.add("cmake")
    config.substitutions.append(("%cmake", cmake))

# The learned pass: the CUDA runtime lives next to the plugin.
plugin_dir = os.path.dirname(plugin)
runtime_cuda = os.path.join(plugin_dir, "libprograml_runtime_cuda.so")
if os.path.isfile(runtime_cuda):
    config.available_features.add("torch-cuda")
    config.substitutions.append(("%runtime-cuda", runtime_cuda))
config.substitutions.append(("%models", os.path.join(config.programl_src_root, "models")))
# clang-NN finds ld.lld in its own bin directory.
if os.path.isfile(os.path.join(bindir, "ld.lld")):
    config.available_features.add("lld")
if os.path.exists("/dev/nvidia0"):
    config.available_features.add("gpu")
readelf = shutil.which("readelf")
if readelf:
    config.substitutions.append(("%readelf", readelf))
