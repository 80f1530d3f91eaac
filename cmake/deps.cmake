# SPDX-License-Identifier: Apache-2.0
# CUTLASS and FlashInfer through FetchContent, pinned in cmake/deps.json, with the offline
# resolution order of DESIGN.md section 5. For each dependency the first that works wins:
#   1. FETCHCONTENT_SOURCE_DIR_<NAME>   (explicit directory; FetchContent's own override)
#   2. an installed pip package of the pinned version (nvidia-cutlass: cutlass_library/source,
#      flashinfer-python: flashinfer/data)
#   3. an archive in SGL_KERNEL_DEPS_DIR (default <source>/.bundle): the offline bundle's
#      deps/<name>-<version>.tar.gz, or the pinned pip wheel itself
#   4. the pinned pip wheel downloaded from the package index (SGL_KERNEL_PIP_DOWNLOAD=ON)
#   5. git clone of the pinned tag (FetchContent's download)
# Where each one came from is printed and reported in the configure summary.
include(FetchContent)

set(SGL_KERNEL_DEPS_DIR "${SGL_KERNEL_DEPS_DIR}" CACHE PATH
    "Directory with offline dependency archives/wheels (tools/offline_bundle.py output)")
if(NOT SGL_KERNEL_DEPS_DIR AND DEFINED ENV{SGL_KERNEL_DEPS_DIR})
  set(SGL_KERNEL_DEPS_DIR "$ENV{SGL_KERNEL_DEPS_DIR}")
endif()
if(NOT SGL_KERNEL_DEPS_DIR AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/.bundle")
  set(SGL_KERNEL_DEPS_DIR "${CMAKE_CURRENT_SOURCE_DIR}/.bundle")
endif()
option(SGL_KERNEL_PIP_DOWNLOAD "Fetch pinned dependency wheels from the package index" ON)

file(READ "${CMAKE_CURRENT_SOURCE_DIR}/cmake/deps.json" _sgl_deps_json)
set(_sgl_deps_tool "${CMAKE_CURRENT_SOURCE_DIR}/tools/deps.py")
set(_sgl_deps_root "${CMAKE_BINARY_DIR}/_deps")

function(_sgl_deps_py out)
  execute_process(COMMAND "${Python_EXECUTABLE}" "${_sgl_deps_tool}" ${ARGN}
                  OUTPUT_VARIABLE _o RESULT_VARIABLE _rc ERROR_VARIABLE _e
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    message(WARNING "sgl_kernel: tools/deps.py ${ARGN} failed: ${_e}")
    set(_o "")
  elseif(_e)
    message(STATUS "  ${_e}")
  endif()
  set(${out} "${_o}" PARENT_SCOPE)
endfunction()

# sgl_resolve_dep(<name>) -> SGL_DEP_<NAME>_DIR (repo-like root) and SGL_DEP_<NAME>_ORIGIN
function(sgl_resolve_dep name)
  string(TOUPPER "${name}" up)
  string(JSON version GET "${_sgl_deps_json}" ${name} version)
  string(JSON repo GET "${_sgl_deps_json}" ${name} git_repository)
  string(JSON tag GET "${_sgl_deps_json}" ${name} git_tag)

  set(origin "")
  if(FETCHCONTENT_SOURCE_DIR_${up})
    set(origin "FETCHCONTENT_SOURCE_DIR_${up}=${FETCHCONTENT_SOURCE_DIR_${up}}")
  endif()
  if(NOT origin)
    _sgl_deps_py(dir locate ${name})
    if(dir)
      set(FETCHCONTENT_SOURCE_DIR_${up} "${dir}")
      set(origin "installed pip package (${dir})")
    endif()
  endif()
  if(NOT origin AND SGL_KERNEL_DEPS_DIR)
    _sgl_deps_py(archive find ${name} "${SGL_KERNEL_DEPS_DIR}")
    if(archive)
      _sgl_deps_py(dir extract ${name} "${archive}" "${_sgl_deps_root}/${name}-local")
      if(dir)
        set(FETCHCONTENT_SOURCE_DIR_${up} "${dir}")
        set(origin "local archive ${archive}")
      endif()
    endif()
  endif()
  if(NOT origin AND SGL_KERNEL_PIP_DOWNLOAD)
    message(STATUS "sgl_kernel: ${name}: downloading the pinned wheel from the package index")
    _sgl_deps_py(archive download ${name} "${_sgl_deps_root}/wheels")
    if(archive)
      _sgl_deps_py(dir extract ${name} "${archive}" "${_sgl_deps_root}/${name}-local")
      if(dir)
        set(FETCHCONTENT_SOURCE_DIR_${up} "${dir}")
        set(origin "package index wheel ${archive}")
      endif()
    endif()
  endif()
  if(NOT origin)
    set(origin "git ${repo} @ ${tag}")
  endif()

  # SOURCE_SUBDIR points at a directory with no CMakeLists.txt: populate only, never
  # add the dependency's own CMake project to the build.
  FetchContent_Declare(${name}
    GIT_REPOSITORY "${repo}"
    GIT_TAG "${tag}"
    GIT_SHALLOW TRUE
    SOURCE_SUBDIR "sgl-kernel-populate-only")
  FetchContent_MakeAvailable(${name})
  string(TOLOWER "${name}" lc)
  set(SGL_DEP_${up}_DIR "${${lc}_SOURCE_DIR}" PARENT_SCOPE)
  set(SGL_DEP_${up}_VERSION "${version}" PARENT_SCOPE)
  set(SGL_DEP_${up}_ORIGIN "${origin}" PARENT_SCOPE)
  message(STATUS "sgl_kernel: ${name} ${version} from ${origin}")
endfunction()

sgl_resolve_dep(cutlass)
sgl_resolve_dep(flashinfer)

set(SGL_CUTLASS_INCLUDE_DIRS
  "${SGL_DEP_CUTLASS_DIR}/include" "${SGL_DEP_CUTLASS_DIR}/tools/util/include")
set(SGL_FLASHINFER_INCLUDE_DIRS "${SGL_DEP_FLASHINFER_DIR}/include")
# FlashInfer 0.7 needs a newer CCCL than CUDA 13.0 ships (DESIGN.md section 6): the wheel's
# copy, placed before the toolkit's headers, for sources that include FlashInfer.
set(SGL_FLASHINFER_CCCL_INCLUDE_DIRS "")
foreach(_d "cccl/libcudacxx/include" "cccl/cub" "cccl/thrust")
  if(EXISTS "${SGL_DEP_FLASHINFER_DIR}/${_d}")
    list(APPEND SGL_FLASHINFER_CCCL_INCLUDE_DIRS "${SGL_DEP_FLASHINFER_DIR}/${_d}")
  endif()
endforeach()
