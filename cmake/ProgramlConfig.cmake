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
#   programl_add_graphs(<target> [DIR <dir>] [FORMAT pb|pbtxt|json|dot]
#                       [COMPAT paper|programl-0.3])
#       Compiles <target>'s C and C++ sources with -fpass-plugin, so each
#       translation unit writes the program graph of its final IR into <dir>
#       (default: ${CMAKE_CURRENT_BINARY_DIR}/<target>.programl; created at
#       build time, removed by `clean`). FORMAT defaults to pb.
#
# How the settings reach the pass: clang has no pass pipeline text, and
# clang 16 parses -mllvm options before it loads -fpass-plugin plugins, so
# the pass reads its settings from the environment (PROGRAML_GRAPH_DIR,
# PROGRAML_GRAPH_FORMAT, PROGRAML_GRAPH_COMPAT). Per target, this file sets
# them through the target's C/CXX_COMPILER_LAUNCHER: `cmake -E env VAR=...`,
# followed by any launcher the target already had. That needs a Makefile or
# Ninja generator. CCACHE_DISABLE=1 is set too: a cache hit would skip the
# compiler and so the graph.
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
foreach(_programl_target_dir "$ENV{CARGO_TARGET_DIR}" "${CMAKE_CURRENT_LIST_DIR}/../target")
  if(_programl_target_dir)
    list(APPEND _programl_hints "${_programl_target_dir}/release" "${_programl_target_dir}/debug")
  endif()
endforeach()
find_file(Programl_PLUGIN NAMES "${_programl_name}" PATHS ${_programl_hints}
  NO_DEFAULT_PATH DOC "The ProGraML pass plugin")

if(NOT Programl_PLUGIN OR NOT EXISTS "${Programl_PLUGIN}")
  set(Programl_FOUND FALSE)
  set(Programl_NOT_FOUND_MESSAGE
    "${_programl_name} not found: build it (cargo build --release -p programl-passes) "
    "or set Programl_PLUGIN (or the environment variable PROGRAML_PLUGIN) to its path")
  return()
endif()
get_filename_component(Programl_PLUGIN "${Programl_PLUGIN}" REALPATH)

if(NOT TARGET Programl::plugin)
  add_library(Programl::plugin MODULE IMPORTED)
  set_target_properties(Programl::plugin PROPERTIES IMPORTED_LOCATION "${Programl_PLUGIN}")
endif()

# Compiles an empty translation unit with the plugin, once per compiler.
function(_programl_check_compiler lang)
  set(_compiler "${CMAKE_${lang}_COMPILER}")
  string(MAKE_C_IDENTIFIER "Programl_PLUGIN_WORKS_${lang}" _var)
  if(DEFINED CACHE{${_var}} AND "${${_var}}" STREQUAL "${_compiler};${Programl_PLUGIN}")
    return()
  endif()
  if(lang STREQUAL "CXX")
    set(_x c++)
  else()
    set(_x c)
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env PROGRAML_GRAPH_AUTO=0
            "${_compiler}" "-fpass-plugin=${Programl_PLUGIN}" -x ${_x} -c -o /dev/null /dev/null
    RESULT_VARIABLE _result OUTPUT_VARIABLE _output ERROR_VARIABLE _output)
  if(NOT _result EQUAL 0)
    message(FATAL_ERROR
      "programl_add_graphs: the plugin needs clang of the LLVM it was built for "
      "(e.g. -DCMAKE_${lang}_COMPILER=clang-16); ${_compiler} cannot load ${Programl_PLUGIN}:\n${_output}")
  endif()
  set(${_var} "${_compiler};${Programl_PLUGIN}" CACHE INTERNAL "")
endfunction()

function(programl_add_graphs target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DIR;FORMAT;COMPAT" "")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "programl_add_graphs: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "programl_add_graphs: no target named '${target}'")
  endif()
  if(NOT arg_DIR)
    set(arg_DIR "${CMAKE_CURRENT_BINARY_DIR}/${target}.programl")
  endif()
  get_filename_component(arg_DIR "${arg_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
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

  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  set(_used FALSE)
  foreach(lang C CXX)
    if(NOT lang IN_LIST _languages)
      continue()
    endif()
    set(_used TRUE)
    _programl_check_compiler(${lang})
    get_target_property(_launcher ${target} ${lang}_COMPILER_LAUNCHER)
    if(NOT _launcher)
      set(_launcher "")
    endif()
    set_property(TARGET ${target} PROPERTY ${lang}_COMPILER_LAUNCHER
      "${CMAKE_COMMAND}" -E env ${_env} ${_launcher})
  endforeach()
  if(NOT _used)
    message(FATAL_ERROR "programl_add_graphs: enable C or CXX in project() first")
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:-fpass-plugin=${Programl_PLUGIN}>")
  set_property(TARGET ${target} APPEND PROPERTY ADDITIONAL_CLEAN_FILES "${arg_DIR}")
  set_property(TARGET ${target} PROPERTY PROGRAML_GRAPH_DIR "${arg_DIR}")
endfunction()

set(Programl_FOUND TRUE)
