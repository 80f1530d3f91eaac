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

# The C++ compiler must link libstdc++ dynamically, like torch: a toolchain that only has a
# static libstdc++.a (seen: a GPU image's CXX=/opt/gcc/bin/g++) gives a module with a
# private copy of libstdc++ beside torch's shared one, which crashes (SIGSEGV in
# std::ostream as soon as an error message formats a number). Such a compiler is replaced by
# a system g++ that has libstdc++.so, with a message; if there is none, configure fails.
function(_sgl_has_shared_libstdcxx cxx out)
  execute_process(COMMAND "${cxx}" -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE _lib ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND IS_ABSOLUTE "${_lib}" AND EXISTS "${_lib}")
    set(${out} ON PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

if(CMAKE_CXX_COMPILER)
  set(_sgl_cxx "${CMAKE_CXX_COMPILER}")
elseif(DEFINED ENV{CXX} AND NOT "$ENV{CXX}" STREQUAL "")
  set(_sgl_cxx "$ENV{CXX}")
else()
  find_program(_sgl_cxx NAMES c++ g++)
endif()
if(_sgl_cxx)
  _sgl_has_shared_libstdcxx("${_sgl_cxx}" _sgl_cxx_ok)
  if(NOT _sgl_cxx_ok)
    set(_sgl_replacement "")
    foreach(_cand /usr/bin/g++-14 /usr/bin/g++-13 /usr/bin/g++-12 /usr/bin/g++-11 /usr/bin/g++ /usr/bin/c++)
      if(EXISTS "${_cand}")
        _sgl_has_shared_libstdcxx("${_cand}" _cand_ok)
        if(_cand_ok)
          set(_sgl_replacement "${_cand}")
          break()
        endif()
      endif()
    endforeach()
    if(NOT _sgl_replacement)
      message(FATAL_ERROR "sgl_kernel: the C++ compiler ${_sgl_cxx} has no shared libstdc++ "
                          "(-print-file-name=libstdc++.so does not resolve); torch extensions need one. "
                          "Set CXX to a compiler with a shared libstdc++.")
    endif()
    string(REPLACE "g++" "gcc" _sgl_cc "${_sgl_replacement}")
    string(REPLACE "c++" "cc" _sgl_cc "${_sgl_cc}")
    message(STATUS "sgl_kernel: ${_sgl_cxx} has only a static libstdc++; using ${_sgl_replacement} instead")
    set(CMAKE_CXX_COMPILER "${_sgl_replacement}" CACHE FILEPATH "C++ compiler" FORCE)
    if(EXISTS "${_sgl_cc}")
      set(CMAKE_C_COMPILER "${_sgl_cc}" CACHE FILEPATH "C compiler" FORCE)
    endif()
    set(_sgl_cxx "${_sgl_replacement}")
  endif()
  # nvcc's host compiler must pass the same test: CMake links the module with the CUDA
  # toolchain's implicit libraries and directories, so a static-only libstdc++ there ends up
  # inside the module too. Default it to the C++ compiler chosen above.
  set(_sgl_host "")
  if(CMAKE_CUDA_HOST_COMPILER)
    set(_sgl_host "${CMAKE_CUDA_HOST_COMPILER}")
  elseif(DEFINED ENV{CUDAHOSTCXX} AND NOT "$ENV{CUDAHOSTCXX}" STREQUAL "")
    set(_sgl_host "$ENV{CUDAHOSTCXX}")
  endif()
  set(_sgl_host_ok OFF)
  if(_sgl_host)
    _sgl_has_shared_libstdcxx("${_sgl_host}" _sgl_host_ok)
    if(NOT _sgl_host_ok)
      message(STATUS "sgl_kernel: CUDA host compiler ${_sgl_host} has only a static libstdc++; using ${_sgl_cxx}")
    endif()
  endif()
  if(NOT _sgl_host_ok)
    set(CMAKE_CUDA_HOST_COMPILER "${_sgl_cxx}" CACHE FILEPATH "CUDA host compiler" FORCE)
  endif()
endif()
