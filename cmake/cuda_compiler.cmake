# SPDX-License-Identifier: Apache-2.0
# Pick the real nvcc before project() enables CUDA.
#
# /usr/local/bin/nvcc is a wrapper script on some hosts; CMake's FindCUDA (used by torch's
# CMake config) derives the toolkit root from the compiler's directory, so a wrapper there
# yields a root without headers. Prefer, in order: CMAKE_CUDA_COMPILER, $CUDACXX,
# $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc, then whatever is on PATH
# (resolved through symlinks).
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  set(_sgl_nvcc "")
  foreach(_root "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "/usr/local/cuda")
    if(_root AND EXISTS "${_root}/bin/nvcc")
      set(_sgl_nvcc "${_root}/bin/nvcc")
      break()
    endif()
  endforeach()
  if(NOT _sgl_nvcc)
    find_program(_sgl_nvcc_on_path nvcc)
    if(_sgl_nvcc_on_path)
      file(REAL_PATH "${_sgl_nvcc_on_path}" _sgl_nvcc)
    endif()
  endif()
  if(_sgl_nvcc)
    set(CMAKE_CUDA_COMPILER "${_sgl_nvcc}" CACHE FILEPATH "CUDA compiler")
  endif()
endif()
