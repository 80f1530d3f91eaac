# SPDX-License-Identifier: Apache-2.0
# find_package(Torch) from the Python environment that runs the build, working with a full
# CUDA toolkit or a minimal one (nvcc + cudart) beside a pip CUDA torch (DESIGN.md section 6).

# Toolkit root from the (real) compiler, for torch's FindCUDA and FindCUDAToolkit.
get_filename_component(_sgl_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
get_filename_component(SGL_CUDA_ROOT "${_sgl_cuda_bin}" DIRECTORY)
if(NOT DEFINED CUDA_TOOLKIT_ROOT_DIR)
  set(CUDA_TOOLKIT_ROOT_DIR "${SGL_CUDA_ROOT}" CACHE PATH "CUDA toolkit root")
endif()
if(NOT DEFINED CUDAToolkit_ROOT)
  set(CUDAToolkit_ROOT "${SGL_CUDA_ROOT}")
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
"import os, torch, torch.utils
print(torch.utils.cmake_prefix_path)
print(torch.__version__)
print(torch.version.cuda or '')
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
import importlib.util as u
s = u.find_spec('nvidia')
roots = list(s.submodule_search_locations) if s and s.submodule_search_locations else []
print(';'.join(os.path.join(r, 'cu13') for r in roots if os.path.isdir(os.path.join(r, 'cu13'))))"
  OUTPUT_VARIABLE _sgl_torch_out
  RESULT_VARIABLE _sgl_torch_rc
  ERROR_VARIABLE _sgl_torch_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _sgl_torch_rc EQUAL 0)
  message(FATAL_ERROR "sgl_kernel: cannot import torch with ${Python_EXECUTABLE}:\n${_sgl_torch_err}\n"
                      "Install torch first (it is a build requirement), or build without "
                      "--no-build-isolation so pip installs it.")
endif()
string(REPLACE "\n" ";" _sgl_torch_out "${_sgl_torch_out}")
list(GET _sgl_torch_out 0 _sgl_torch_prefix)
list(GET _sgl_torch_out 1 SGL_TORCH_VERSION)
list(GET _sgl_torch_out 2 SGL_TORCH_CUDA_VERSION)
list(GET _sgl_torch_out 3 SGL_TORCH_CXX11_ABI)
list(LENGTH _sgl_torch_out _n)
set(SGL_PIP_CUDA_ROOTS "")
if(_n GREATER 4)
  list(SUBLIST _sgl_torch_out 4 -1 SGL_PIP_CUDA_ROOTS)
endif()
if(NOT SGL_TORCH_CUDA_VERSION)
  message(FATAL_ERROR "sgl_kernel: torch ${SGL_TORCH_VERSION} in ${Python_EXECUTABLE} is a CPU-only "
                      "build; install a CUDA build of torch to build sgl_kernel.")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${_sgl_torch_prefix}")

# Minimal toolkit: libnvrtc and the cuBLAS/cuSPARSE/cuSOLVER headers come from the pip
# CUDA packages that a CUDA torch depends on (site-packages/nvidia/cu13). Only the headers
# the toolkit lacks are taken (linked into a directory of the build tree), so the toolkit's
# own runtime headers always win.
set(SGL_CUDA_EXTRA_INCLUDE "")
find_library(_sgl_toolkit_nvrtc nvrtc HINTS "${SGL_CUDA_ROOT}" PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)
foreach(_root IN LISTS SGL_PIP_CUDA_ROOTS)
  if(NOT _sgl_toolkit_nvrtc AND NOT CUDA_nvrtc_LIBRARY)
    file(GLOB _sgl_nvrtc "${_root}/lib/libnvrtc.so*")
    list(FILTER _sgl_nvrtc EXCLUDE REGEX "builtins|alt")
    if(_sgl_nvrtc)
      list(GET _sgl_nvrtc 0 _sgl_nvrtc)
      set(CUDA_nvrtc_LIBRARY "${_sgl_nvrtc}" CACHE FILEPATH "libnvrtc (from pip CUDA)")
    endif()
  endif()
  if(NOT EXISTS "${SGL_CUDA_ROOT}/include/cublas_v2.h" AND EXISTS "${_root}/include/cublas_v2.h")
    set(SGL_CUDA_EXTRA_INCLUDE "${CMAKE_BINARY_DIR}/cuda_extra_include")
    file(MAKE_DIRECTORY "${SGL_CUDA_EXTRA_INCLUDE}")
    file(GLOB _sgl_pip_headers RELATIVE "${_root}/include" "${_root}/include/*.h")
    foreach(_h IN LISTS _sgl_pip_headers)
      if(NOT EXISTS "${SGL_CUDA_ROOT}/include/${_h}")
        file(CREATE_LINK "${_root}/include/${_h}" "${SGL_CUDA_EXTRA_INCLUDE}/${_h}" SYMBOLIC)
      endif()
    endforeach()
    break()
  endif()
endforeach()

# Torch's config reads TORCH_CUDA_ARCH_LIST to build its gencode flags; the project owns
# its arch flags, so whatever torch adds is removed below. Give it one harmless value so
# it does not probe the GPU or pick a list containing archs CUDA 13 rejects.
set(_sgl_saved_arch_env "$ENV{TORCH_CUDA_ARCH_LIST}")
set(ENV{TORCH_CUDA_ARCH_LIST} "8.0")
find_package(Torch REQUIRED)
set(ENV{TORCH_CUDA_ARCH_LIST} "${_sgl_saved_arch_env}")

# Remove torch's gencode/arch flags from every place it puts them.
foreach(_var CMAKE_CUDA_FLAGS TORCH_NVCC_FLAGS CUDA_NVCC_FLAGS)
  if(DEFINED ${_var})
    string(REGEX REPLACE "-gencode[ =;]+arch=[^ ;]+" "" ${_var} "${${_var}}")
    string(REGEX REPLACE "--generate-code=[^ ;]+" "" ${_var} "${${_var}}")
    string(REGEX REPLACE "-arch=[^ ;]+" "" ${_var} "${${_var}}")
  endif()
endforeach()

if(SGL_CUDA_EXTRA_INCLUDE)
  include_directories(SYSTEM "${SGL_CUDA_EXTRA_INCLUDE}")
endif()

# cuBLASLt (bmm_fp8): the library beside the headers the build compiles against: the pip CUDA
# package when its headers are used (minimal toolkit), else the toolkit's; then the other place.
# The pip package ships only the versioned libcublasLt.so.<major>, hence the explicit names.
# At run time torch has already loaded the same soname; the RPATH in CMakeLists.txt covers the rest.
set(_sgl_cublaslt_names cublasLt libcublasLt.so.13 libcublasLt.so.12)
set(_sgl_pip_lib_dirs "")
foreach(_root IN LISTS SGL_PIP_CUDA_ROOTS)
  list(APPEND _sgl_pip_lib_dirs "${_root}/lib")
endforeach()
if(SGL_CUDA_EXTRA_INCLUDE)
  set(_sgl_cublaslt_order pip toolkit)
else()
  set(_sgl_cublaslt_order toolkit pip)
endif()
if(NOT SGL_CUBLASLT_LIBRARY)
  foreach(_where IN LISTS _sgl_cublaslt_order)
    if(_where STREQUAL "pip" AND _sgl_pip_lib_dirs)
      find_library(SGL_CUBLASLT_LIBRARY NAMES ${_sgl_cublaslt_names} HINTS ${_sgl_pip_lib_dirs} NO_DEFAULT_PATH)
    elseif(_where STREQUAL "toolkit")
      find_library(SGL_CUBLASLT_LIBRARY NAMES ${_sgl_cublaslt_names} HINTS "${SGL_CUDA_ROOT}"
                   PATH_SUFFIXES lib64 lib targets/x86_64-linux/lib targets/sbsa-linux/lib NO_DEFAULT_PATH)
    endif()
    if(SGL_CUBLASLT_LIBRARY)
      break()
    endif()
  endforeach()
endif()
if(NOT SGL_CUBLASLT_LIBRARY)
  message(FATAL_ERROR "sgl_kernel: libcublasLt not found (bmm_fp8 needs it). Looked in the CUDA toolkit "
                      "(${SGL_CUDA_ROOT}/lib64) and the pip CUDA packages (${_sgl_pip_lib_dirs}). Install a "
                      "CUDA build of torch (it depends on nvidia-cublas), or pass "
                      "-DSGL_CUBLASLT_LIBRARY=/path/to/libcublasLt.so.")
endif()
set(SGL_CUBLASLT_ORIGIN "given path")
cmake_path(IS_PREFIX SGL_CUDA_ROOT "${SGL_CUBLASLT_LIBRARY}" NORMALIZE _sgl_in_toolkit)
if(_sgl_in_toolkit)
  set(SGL_CUBLASLT_ORIGIN "CUDA toolkit")
endif()
foreach(_dir IN LISTS _sgl_pip_lib_dirs)
  cmake_path(IS_PREFIX _dir "${SGL_CUBLASLT_LIBRARY}" NORMALIZE _sgl_in_pip)
  if(_sgl_in_pip)
    set(SGL_CUBLASLT_ORIGIN "pip CUDA package")
  endif()
endforeach()
