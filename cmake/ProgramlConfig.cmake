# ProgramlConfig.cmake: the ProGraML pass plugin for clang builds.
#
#   find_package(Programl REQUIRED CONFIG PATHS <programl checkout>/cmake)
#   add_executable(app main.c)
#   programl_add_graphs(app DIR ${CMAKE_BINARY_DIR}/graphs FORMAT json)
#
# Provides
#   Programl_PLUGIN    absolute path of libprograml_passes.so (cache variable;
#                      set it, or the environment variable PROGRAML_PLUGIN, to
#                      choose one)
#   Programl::plugin   an IMPORTED MODULE library at that path
#   Programl_RUNTIME   the CUDA model runtime, libprograml_runtime_cuda.so,
#                      next to the plugin (empty if not built). Only
#                      DEVICE cuda (or auto on a machine with a GPU) uses
#                      it: the CPU inference runs in the plugin itself, with
#                      no libtorch. The learned pass finds the runtime by
#                      itself; set this (or the environment variable
#                      PROGRAML_RUNTIME) to make it use another one.
#   programl_add_graphs(<target> [DIR <dir>] [FORMAT pb|pbtxt|json|dot]
#                       [COMPAT paper|programl-0.3])
#       Compiles <target>'s C and C++ sources with -fpass-plugin, so each
#       translation unit writes the program graph of its final IR into <dir>
#       (default: ${CMAKE_CURRENT_BINARY_DIR}/<target>.programl; created at
#       build time), one graph per object, replaced when the object is
#       rebuilt. `clean` removes <dir> only when it lies inside the build
#       tree (and, in an in-source build, only the default <dir>); a <dir>
#       that holds the source or the build tree is refused. FORMAT defaults
#       to pb.
#   programl_add_inference(<target> MODEL <bundle dir> [DEVICE auto|cpu|cuda]
#                          [ROOTS sample|all|marked] [STEPS <n>] [THREADS <n>]
#                          [MAX_ROOTS <n>] [MAX_NODES <n>] [VERIFY]
#                          [SIDECAR <file>])
#       Compiles <target>'s C and C++ sources with the learned pass
#       (programl-infer, passes/README.md): each translation unit's final IR
#       is annotated with the bundle's predictions. ROOTS marked predicts
#       only for instructions marked !programl.root in the IR, which C and
#       C++ compiled as is never carry (one warning a unit). DEVICE cuda on
#       a machine without a GPU loads the CUDA runtime in every compile
#       (about a second) and leaves each unit unannotated: use auto, which
#       looks for /dev/nvidia0 first. VERIFY prints the exact
#       analysis's figures per unit (into SIDECAR if given, else on the
#       compiler's stderr); SIDECAR appends every decision: a JSON line per
#       unit (device mapping: per kernel), and with VERIFY a second line per
#       unit. Records accumulate over rebuilds (each names its module).
#       One model per target; both functions may be used on one target.
#
# How the settings reach the pass: clang has no pass pipeline text, and
# clang 16 parses -mllvm options before it loads -fpass-plugin plugins, so
# the passes read their settings from the environment (PROGRAML_GRAPH_DIR,
# PROGRAML_GRAPH_FORMAT, PROGRAML_GRAPH_COMPAT; PROGRAML_INFER, whose
# settings this file separates with `,` since a CMake list cannot hold a
# `;`). Per target, this file sets them through the target's
# C/CXX_COMPILER_LAUNCHER: `cmake -E env VAR=...`, followed by any launcher
# the target had before. That needs a Makefile or Ninja generator; set a
# target's own launcher before calling these functions, not after (a later
# one replaces ours: the settings are then lost, which is checked at the end
# of the directory where CMake has cmake_language(DEFER), 3.19 and later).
# Makefiles do not track a launcher: the settings are also written to a
# file the target's objects depend on, so a changed setting rebuilds them
# with either generator.
# CCACHE_DISABLE=1 is set too: a cache hit would skip the compiler and so the
# pass. Other compiler caches (sccache) must be turned off by hand.
#
# The compiler must be clang of the LLVM the plugin was built for (16 by
# default); the first programl_add_graphs() checks this by compiling an
# empty file with the plugin once, and stops with an error if that fails.

cmake_minimum_required(VERSION 3.16)

set(_programl_name "${CMAKE_SHARED_MODULE_PREFIX}programl_passes${CMAKE_SHARED_LIBRARY_SUFFIX}")
if(NOT Programl_PLUGIN AND DEFINED ENV{PROGRAML_PLUGIN})
  set(Programl_PLUGIN "$ENV{PROGRAML_PLUGIN}" CACHE FILEPATH "The ProGraML pass plugin")
endif()
set(_programl_hints
  # An installed layout: <prefix>/lib/cmake/Programl/ -> <prefix>/lib/.
  "${CMAKE_CURRENT_LIST_DIR}/../.."
  "${CMAKE_CURRENT_LIST_DIR}/../../../lib")
# A source checkout: cmake/ next to cargo's target directory.
# The bootstrap's cargo target directory, which the checkout's target/ links to.
set(_programl_cache "$ENV{PROGRAML_CACHE}")
if(NOT _programl_cache AND DEFINED ENV{HOME})
  set(_programl_cache "$ENV{HOME}/.cache/programl-rs")
endif()
foreach(_programl_target_dir "$ENV{CARGO_TARGET_DIR}" "${CMAKE_CURRENT_LIST_DIR}/../target" "${_programl_cache}/target")
  if(_programl_target_dir)
    list(APPEND _programl_hints "${_programl_target_dir}/release" "${_programl_target_dir}/debug")
  endif()
endforeach()
find_file(Programl_PLUGIN NAMES "${_programl_name}" PATHS ${_programl_hints}
  NO_DEFAULT_PATH DOC "The ProGraML pass plugin")

if(Programl_PLUGIN AND NOT IS_ABSOLUTE "${Programl_PLUGIN}")
  set(Programl_FOUND FALSE)
  set(Programl_NOT_FOUND_MESSAGE
    "Programl_PLUGIN (or PROGRAML_PLUGIN) '${Programl_PLUGIN}' is relative: give the plugin's absolute path")
  unset(Programl_PLUGIN CACHE)
  return()
endif()
if(Programl_PLUGIN AND NOT EXISTS "${Programl_PLUGIN}")
  set(Programl_FOUND FALSE)
  set(Programl_NOT_FOUND_MESSAGE "Programl_PLUGIN (or PROGRAML_PLUGIN): ${Programl_PLUGIN} does not exist")
  unset(Programl_PLUGIN CACHE)
  return()
endif()
if(NOT Programl_PLUGIN)
  set(Programl_FOUND FALSE)
  string(CONCAT Programl_NOT_FOUND_MESSAGE
    "${_programl_name} not found: build it (cargo build --release -p programl-passes) "
    "or set Programl_PLUGIN (or the environment variable PROGRAML_PLUGIN) to its path")
  return()
endif()
get_filename_component(Programl_PLUGIN "${Programl_PLUGIN}" REALPATH)

if(NOT TARGET Programl::plugin)
  add_library(Programl::plugin MODULE IMPORTED)
  set_target_properties(Programl::plugin PROPERTIES IMPORTED_LOCATION "${Programl_PLUGIN}")
endif()

get_filename_component(_programl_plugin_dir "${Programl_PLUGIN}" DIRECTORY)
if(NOT Programl_RUNTIME AND DEFINED ENV{PROGRAML_RUNTIME})
  set(Programl_RUNTIME "$ENV{PROGRAML_RUNTIME}" CACHE FILEPATH "The ProGraML model runtime")
endif()
set(_programl_cuda_runtime "${_programl_plugin_dir}/${CMAKE_SHARED_LIBRARY_PREFIX}programl_runtime_cuda${CMAKE_SHARED_LIBRARY_SUFFIX}")
if(NOT Programl_RUNTIME AND EXISTS "${_programl_cuda_runtime}")
  set(Programl_RUNTIME "${_programl_cuda_runtime}")
endif()

# Compiles an empty translation unit with the plugin, once per compiler.
function(_programl_check_compiler lang caller)
  set(_compiler "${CMAKE_${lang}_COMPILER}")
  string(MAKE_C_IDENTIFIER "Programl_PLUGIN_WORKS_${lang}" _var)
  if(DEFINED CACHE{${_var}} AND "${${_var}}" STREQUAL "${_compiler};${Programl_PLUGIN}")
    return()
  endif()
  if(lang STREQUAL "CXX")
    set(_x c++)
    set(_suggest clang++-16)
  else()
    set(_x c)
    set(_suggest clang-16)
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env PROGRAML_GRAPH_AUTO=0
            "${_compiler}" "-fpass-plugin=${Programl_PLUGIN}" -x ${_x} -c -o /dev/null /dev/null
    RESULT_VARIABLE _result OUTPUT_VARIABLE _output ERROR_VARIABLE _output)
  if(NOT _result EQUAL 0)
    message(FATAL_ERROR
      "${caller}: the plugin needs clang of the LLVM it was built for "
      "(e.g. -DCMAKE_${lang}_COMPILER=${_suggest}); ${_compiler} cannot load ${Programl_PLUGIN}:\n${_output}")
  endif()
  set(${_var} "${_compiler};${Programl_PLUGIN}" CACHE INTERNAL "")
endfunction()

# Adds the plugin to <target>'s C and C++ compiles once, and the
# environment assignments in ARGN to its compiler launcher: `cmake -E env`
# with every assignment made so far (a later one replaces an earlier one of
# the same variable), then the launcher the target had before the first
# call.
function(_programl_attach caller target)
  get_target_property(_env ${target} PROGRAML_ENVIRONMENT)
  if(NOT _env)
    set(_env "")
  endif()
  foreach(_assignment IN LISTS ARGN)
    string(REGEX REPLACE "=.*" "" _name "${_assignment}")
    list(FILTER _env EXCLUDE REGEX "^${_name}=")
    list(APPEND _env "${_assignment}")
  endforeach()
  set_property(TARGET ${target} PROPERTY PROGRAML_ENVIRONMENT "${_env}")

  # The settings also go into a file that the target's objects depend on,
  # rewritten only when they change: Makefiles, which do not track a
  # launcher, then rebuild the objects a change concerns (Ninja tracks the
  # launcher too). Sources added to the target after this call are not
  # covered.
  set(_stamp "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${target}.programl-settings")
  string(REPLACE ";" "\n" _text "${_env}\n")
  set(_old "")
  if(EXISTS "${_stamp}")
    file(READ "${_stamp}" _old)
  endif()
  if(NOT _old STREQUAL _text)
    file(WRITE "${_stamp}" "${_text}")
  endif()
  get_target_property(_sources ${target} SOURCES)
  list(FILTER _sources EXCLUDE REGEX "\\$<")
  if(_sources)
    get_target_property(_target_dir ${target} SOURCE_DIR)
    set(_absolute "")
    foreach(_source IN LISTS _sources)
      get_filename_component(_source "${_source}" ABSOLUTE BASE_DIR "${_target_dir}")
      list(APPEND _absolute "${_source}")
    endforeach()
    if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.18)
      set_property(SOURCE ${_absolute} TARGET_DIRECTORY ${target} APPEND PROPERTY OBJECT_DEPENDS "${_stamp}")
    else()
      set_property(SOURCE ${_absolute} APPEND PROPERTY OBJECT_DEPENDS "${_stamp}")
    endif()
  endif()

  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  # The languages the target's sources are in, so far (by extension, or
  # the LANGUAGE a source sets): the compiler of a language the target
  # does not use need not be clang. Without such sources yet (added
  # later), every enabled one is checked.
  get_target_property(_sources ${target} SOURCES)
  set(_target_languages "")
  foreach(_source IN LISTS _sources)
    get_source_file_property(_language "${_source}" LANGUAGE)
    if(NOT _language)
      get_filename_component(_ext "${_source}" LAST_EXT)
      if(_ext STREQUAL ".c")
        set(_language C)
      elseif(_ext MATCHES "^\\.(cc|cpp|cxx|c\\+\\+|C|CPP|cp)$")
        set(_language CXX)
      endif()
    endif()
    if(_language)
      list(APPEND _target_languages ${_language})
    endif()
  endforeach()
  set(_used FALSE)
  foreach(lang C CXX)
    if(NOT lang IN_LIST _languages)
      continue()
    endif()
    set(_used TRUE)
    if(NOT _target_languages OR lang IN_LIST _target_languages)
      _programl_check_compiler(${lang} ${caller})
    endif()
    get_target_property(_before ${target} PROGRAML_${lang}_LAUNCHER_BEFORE)
    if(NOT _before)
      get_target_property(_before ${target} ${lang}_COMPILER_LAUNCHER)
      if(NOT _before)
        set(_before "NONE")
      endif()
      set_property(TARGET ${target} PROPERTY PROGRAML_${lang}_LAUNCHER_BEFORE "${_before}")
    endif()
    if(_before STREQUAL "NONE")
      set(_before "")
    endif()
    set_property(TARGET ${target} PROPERTY ${lang}_COMPILER_LAUNCHER
      "${CMAKE_COMMAND}" -E env ${_env} ${_before})
    set_property(TARGET ${target} PROPERTY PROGRAML_${lang}_LAUNCHER
      "${CMAKE_COMMAND}" -E env ${_env} ${_before})
  endforeach()
  get_target_property(_deferred ${target} PROGRAML_LAUNCHER_CHECKED)
  if(NOT _deferred AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
    set_property(TARGET ${target} PROPERTY PROGRAML_LAUNCHER_CHECKED TRUE)
    # DEFER evaluates its arguments when the call runs: the values now.
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _programl_check_launcher [[${caller}]] [[${target}]])")
  endif()
  if(NOT _used)
    message(FATAL_ERROR "${caller}: enable C or CXX in project() first")
  endif()
  get_target_property(_added ${target} PROGRAML_PLUGIN_ADDED)
  if(NOT _added)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:-fpass-plugin=${Programl_PLUGIN}>")
    set_property(TARGET ${target} PROPERTY PROGRAML_PLUGIN_ADDED TRUE)
  endif()
endfunction()

# At the end of the directory: a launcher set on <target> after ours
# replaced it, and with it every setting.
function(_programl_check_launcher caller target)
  foreach(lang C CXX)
    get_target_property(_launcher ${target} ${lang}_COMPILER_LAUNCHER)
    get_target_property(_ours ${target} PROGRAML_${lang}_LAUNCHER)
    if(_ours AND NOT "${_launcher}" STREQUAL "${_ours}")
      message(FATAL_ERROR
        "${caller}(${target}): ${target}'s ${lang}_COMPILER_LAUNCHER was set after ${caller}() "
        "(to '${_launcher}'), which drops the pass's settings: set it before")
    endif()
  endforeach()
endfunction()

# <target> itself, or the target an ALIAS names.
macro(_programl_resolve_alias caller)
  if(NOT TARGET ${target})
    message(FATAL_ERROR "${caller}: no target named '${target}'")
  endif()
  get_target_property(_aliased ${target} ALIASED_TARGET)
  if(_aliased)
    set(target ${_aliased})
  endif()
endmacro()

function(programl_add_graphs target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DIR;FORMAT;COMPAT" "")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "programl_add_graphs: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  _programl_resolve_alias(programl_add_graphs)
  set(_default_dir "${CMAKE_CURRENT_BINARY_DIR}/${target}.programl")
  if(NOT arg_DIR)
    set(arg_DIR "${_default_dir}")
  endif()
  get_filename_component(arg_DIR "${arg_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  # `clean` removes a directory whole: never one that holds the sources or
  # the build, or CMake's own files (CMakeFiles/, a subdirectory's build),
  # nor one outside the build tree.
  if(arg_DIR MATCHES "/CMakeFiles(/|$)" OR EXISTS "${arg_DIR}/CMakeFiles" OR EXISTS "${arg_DIR}/CMakeCache.txt"
     OR EXISTS "${arg_DIR}/cmake_install.cmake")
    message(FATAL_ERROR "programl_add_graphs: DIR ${arg_DIR} holds CMake's own files: give the graphs a directory of their own")
  endif()
  foreach(_tree "${CMAKE_SOURCE_DIR}" "${CMAKE_BINARY_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}" "${CMAKE_CURRENT_BINARY_DIR}")
    file(RELATIVE_PATH _rel "${arg_DIR}" "${_tree}")
    if(_rel STREQUAL "" OR NOT _rel MATCHES "^\\.\\.(/|$)")
      message(FATAL_ERROR "programl_add_graphs: DIR ${arg_DIR} holds ${_tree}: give the graphs a directory of their own")
    endif()
  endforeach()
  file(RELATIVE_PATH _rel "${CMAKE_BINARY_DIR}" "${arg_DIR}")
  set(_clean FALSE)
  if(NOT _rel MATCHES "^\\.\\.(/|$)" AND NOT IS_ABSOLUTE "${_rel}")
    set(_clean TRUE)
    if(CMAKE_BINARY_DIR STREQUAL CMAKE_SOURCE_DIR AND NOT arg_DIR STREQUAL _default_dir)
      set(_clean FALSE)
    endif()
  endif()
  if(NOT arg_FORMAT)
    set(arg_FORMAT pb)
  endif()
  if(NOT arg_FORMAT MATCHES "^(pb|pbtxt|json|dot)$")
    message(FATAL_ERROR "programl_add_graphs: FORMAT ${arg_FORMAT} is not one of pb, pbtxt, json, dot")
  endif()
  set(_env "PROGRAML_GRAPH_DIR=${arg_DIR}" "PROGRAML_GRAPH_FORMAT=${arg_FORMAT}" "CCACHE_DISABLE=1")
  if(arg_COMPAT)
    if(NOT arg_COMPAT MATCHES "^(paper|none|programl-0\\.3|programl-0\\.3\\.2)$")
      message(FATAL_ERROR "programl_add_graphs: COMPAT ${arg_COMPAT} is not one of paper, programl-0.3")
    endif()
    list(APPEND _env "PROGRAML_GRAPH_COMPAT=${arg_COMPAT}")
  endif()

  _programl_attach(programl_add_graphs ${target} ${_env})
  if(_clean)
    set_property(TARGET ${target} APPEND PROPERTY ADDITIONAL_CLEAN_FILES "${arg_DIR}")
  endif()
  set_property(TARGET ${target} PROPERTY PROGRAML_GRAPH_DIR "${arg_DIR}")
endfunction()

function(programl_add_inference target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "VERIFY" "MODEL;DEVICE;ROOTS;STEPS;THREADS;MAX_ROOTS;MAX_NODES;SIDECAR" "")
  set(_fn programl_add_inference)
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${_fn}: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  _programl_resolve_alias(${_fn})
  get_target_property(_had ${target} PROGRAML_INFER)
  if(_had)
    message(FATAL_ERROR "${_fn}: ${target} already runs a model (${_had}); one model per target")
  endif()
  if(NOT arg_MODEL)
    message(FATAL_ERROR "${_fn}: MODEL <bundle directory> is required (e.g. <programl checkout>/models/reachability)")
  endif()
  get_filename_component(arg_MODEL "${arg_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${arg_MODEL}/config.json")
    message(FATAL_ERROR "${_fn}: MODEL ${arg_MODEL} is not a model bundle (no config.json)")
  endif()
  if(arg_MODEL MATCHES "[,;]")
    message(FATAL_ERROR "${_fn}: MODEL ${arg_MODEL}: the path may not contain ',' or ';'")
  endif()
  if(arg_DEVICE STREQUAL "cuda" AND (NOT Programl_RUNTIME OR NOT EXISTS "${Programl_RUNTIME}"))
    message(FATAL_ERROR
      "${_fn}: DEVICE cuda needs the CUDA model runtime (libprograml_runtime_cuda.so), which is not next to ${Programl_PLUGIN}: "
      "build it (cargo build --release -p programl-runtime-cuda) or set Programl_RUNTIME to its path")
  endif()
  set(_settings "model=${arg_MODEL}")
  if(DEFINED arg_DEVICE)
    if(NOT arg_DEVICE MATCHES "^(auto|cpu|cuda)$")
      message(FATAL_ERROR "${_fn}: DEVICE ${arg_DEVICE} is not one of auto, cpu, cuda")
    endif()
    string(APPEND _settings ",device=${arg_DEVICE}")
  endif()
  if(DEFINED arg_ROOTS)
    if(NOT arg_ROOTS MATCHES "^(sample|all|marked)$")
      message(FATAL_ERROR "${_fn}: ROOTS ${arg_ROOTS} is not one of sample, all, marked")
    endif()
    string(APPEND _settings ",roots=${arg_ROOTS}")
  endif()
  foreach(_key STEPS THREADS MAX_ROOTS MAX_NODES)
    # DEFINED, not the value: `0` is false to if(), and would be dropped
    # without a word instead of refused.
    if(DEFINED arg_${_key})
      if(NOT arg_${_key} MATCHES "^[1-9][0-9]*$")
        message(FATAL_ERROR "${_fn}: ${_key} ${arg_${_key}} is not a positive number")
      endif()
      # The pass's own bounds: steps 1 to 10,000, the rest within 64 bits.
      string(LENGTH "${arg_${_key}}" _digits)
      if(_key STREQUAL "STEPS" AND (_digits GREATER 5 OR arg_${_key} GREATER 10000))
        message(FATAL_ERROR "${_fn}: STEPS ${arg_${_key}} is past 10000, the most the pass runs")
      elseif(_digits GREATER 18)
        message(FATAL_ERROR "${_fn}: ${_key} ${arg_${_key}} is too large")
      endif()
      string(TOLOWER "${_key}" _name)
      string(APPEND _settings ",${_name}=${arg_${_key}}")
    endif()
  endforeach()
  if(arg_VERIFY)
    string(APPEND _settings ",verify")
  endif()
  if(arg_SIDECAR)
    get_filename_component(arg_SIDECAR "${arg_SIDECAR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
    if(arg_SIDECAR MATCHES "[,;]")
      message(FATAL_ERROR "${_fn}: SIDECAR ${arg_SIDECAR}: the path may not contain ',' or ';'")
    endif()
    string(APPEND _settings ",sidecar=${arg_SIDECAR}")
    set_property(TARGET ${target} APPEND PROPERTY ADDITIONAL_CLEAN_FILES "${arg_SIDECAR}")
  endif()
  set(_env "PROGRAML_INFER=${_settings}" "CCACHE_DISABLE=1")
  if(Programl_RUNTIME AND NOT Programl_RUNTIME STREQUAL "${_programl_cuda_runtime}")
    list(APPEND _env "PROGRAML_RUNTIME=${Programl_RUNTIME}")
  endif()
  _programl_attach(${_fn} ${target} ${_env})
  set_property(TARGET ${target} PROPERTY PROGRAML_INFER "${_settings}")
endfunction()

set(Programl_FOUND TRUE)
