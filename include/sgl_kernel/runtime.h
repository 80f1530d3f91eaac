// SPDX-License-Identifier: Apache-2.0
// Host-side facts about the running GPU (torch-free; defined in csrc/common/runtime.cc).
#pragma once

#include <string>

namespace sgl_kernel {

// Compute capability of CUDA device `device` as 10 * major + minor (90 for an H100);
// cached per device after the first query. Throws std::runtime_error if it cannot be read.
int device_capability(int device);

// Whether a build holding the comma-separated targets `archs` ("80,89,90a,120+ptx") has
// machine code, or PTX the driver can compile, for a device of capability `cc`.
// sm_XY runs on X.Z with Z >= Y; sm_XYa only on X.Y; PTX compute_XY on anything >= X.Y.
bool archs_cover(const std::string& archs, int cc);

// Multiprocessor count of CUDA device `device`, cached per device after the first query
// (132, an H100/H200's count, if it cannot be read; callers use it for grid sizing only).
int device_sm_count(int device);

// Peak DRAM bandwidth of CUDA device `device` in bytes per second (2 x memory clock x bus
// width: 3.35e12 for an H100 SXM, 4.8e12 for an H200), cached per device after the first
// query; 0 if it cannot be read. For kernel choices that differ between such parts.
double device_memory_bandwidth(int device);

// "sm_80, sm_89, sm_90a" for messages.
std::string format_archs(const std::string& archs);

}  // namespace sgl_kernel
