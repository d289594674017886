# Attaches the ProGraML graph pass to every C/C++ target of an unmodified
# CMake project, through find_package(Programl) and programl_add_graphs:
#
#   cmake -S SRC -B BUILD -DCMAKE_C_COMPILER=clang-16 \
#         -DCMAKE_PROJECT_INCLUDE=<checkout>/scripts/thirdparty-attach.cmake \
#         -DPROGRAML_ATTACH_GRAPHS=<dir>
#
# CMake includes this file after the project's project() call; the work is
# deferred to the end of the top-level directory, when every target exists.
# Each target's graphs go to <dir>/<target>/, so the same source compiled
# into two targets (a shared and a static library) cannot collide.
# With -DPROGRAML_ATTACH_MODEL=<bundle> instead, every target gets the
# learned pass (programl_add_inference, on the CPU, its decisions appended
# to <dir>/decisions.jsonl) and no graph pass.
# scripts/thirdparty.sh uses it (issue 12, part 4).
get_property(_programl_attached GLOBAL PROPERTY PROGRAML_ATTACH_INCLUDED)
if(_programl_attached)
  return()
endif()
set_property(GLOBAL PROPERTY PROGRAML_ATTACH_INCLUDED TRUE)
find_package(Programl 0.1 REQUIRED CONFIG PATHS "${CMAKE_CURRENT_LIST_DIR}/../cmake" NO_DEFAULT_PATH)

function(_programl_attach_all dir)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t IN LISTS _targets)
    get_target_property(_type ${_t} TYPE)
    if(NOT _type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    if(PROGRAML_ATTACH_MODEL)
      programl_add_inference(${_t} MODEL "${PROGRAML_ATTACH_MODEL}" DEVICE cpu SIDECAR "${PROGRAML_ATTACH_GRAPHS}/decisions.jsonl")
    else()
      programl_add_graphs(${_t} DIR "${PROGRAML_ATTACH_GRAPHS}/${_t}")
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_s IN LISTS _subdirs)
    _programl_attach_all("${_s}")
  endforeach()
endfunction()

if(NOT PROGRAML_ATTACH_GRAPHS)
  message(FATAL_ERROR "thirdparty-attach.cmake: set PROGRAML_ATTACH_GRAPHS to the output directory")
endif()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _programl_attach_all "${CMAKE_SOURCE_DIR}")
