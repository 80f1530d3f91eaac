# SPDX-License-Identifier: Apache-2.0
# ccache as the compiler launcher for C, C++ and CUDA when it is installed
# (SGL_KERNEL_CCACHE=OFF disables it). Cache keys stay stable because the build
# directory is stable (pyproject: build-dir = build/{wheel_tag}).
option(SGL_KERNEL_CCACHE "Use ccache when found" ON)
set(SGL_CCACHE_STATUS "not found")
if(SGL_KERNEL_CCACHE)
  find_program(SGL_CCACHE_PROGRAM ccache)
  if(SGL_CCACHE_PROGRAM)
    foreach(_lang C CXX CUDA)
      if(NOT CMAKE_${_lang}_COMPILER_LAUNCHER)
        set(CMAKE_${_lang}_COMPILER_LAUNCHER "${SGL_CCACHE_PROGRAM}")
      endif()
    endforeach()
    set(SGL_CCACHE_STATUS "${SGL_CCACHE_PROGRAM}")
  endif()
else()
  set(SGL_CCACHE_STATUS "disabled")
endif()
