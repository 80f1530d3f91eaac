// SPDX-License-Identifier: Apache-2.0
// Host-side GPU facts (include/sgl_kernel/runtime.h). Torch-free.
#include "sgl_kernel/runtime.h"

#include <atomic>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <cuda_runtime.h>

namespace sgl_kernel {

namespace {
constexpr int kMaxDevices = 64;
std::atomic<int> g_capability[kMaxDevices];  // 0 = not queried yet

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}
}  // namespace

int device_capability(int device) {
  if (device < 0 || device >= kMaxDevices) throw std::runtime_error("device index out of range");
  int cached = g_capability[device].load(std::memory_order_relaxed);
  if (cached != 0) return cached;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls are unaffected
    throw std::runtime_error("cannot read the compute capability of CUDA device " + std::to_string(device));
  }
  const int cc = major * 10 + minor;
  g_capability[device].store(cc, std::memory_order_relaxed);
  return cc;
}

int device_sm_count(int device) {
  static std::atomic<int> cache[kMaxDevices];  // 0 = not yet queried
  constexpr int kFallback = 132;
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v != 0) return v;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    cudaGetLastError();  // clear the (non-sticky) error
    sms = kFallback;
  }
  if (cacheable) cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

double device_memory_bandwidth(int device) {
  static std::atomic<double> cache[kMaxDevices];  // 0 = not yet queried (or unreadable)
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const double v = cache[device].load(std::memory_order_relaxed);
    if (v != 0) return v;
  }
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error
    return 0;
  }
  const double bw = 2.0 * khz * 1e3 * bits / 8.0;  // double data rate
  if (cacheable) cache[device].store(bw, std::memory_order_relaxed);
  return bw;
}

bool archs_cover(const std::string& archs, int cc) {
  const int dev_major = cc / 10;
  for (std::string a : split_csv(archs)) {
    bool ptx = false;
    const auto plus = a.find("+ptx");
    if (plus != std::string::npos) {
      ptx = true;
      a = a.substr(0, plus);
    }
    // 'a' targets (sm_90a, compute_90a) run only on that exact arch; 'f' targets on the same
    // major with a minor >= theirs; plain SASS likewise; plain PTX on anything >= it.
    char suffix = 0;
    if (!a.empty() && (a.back() == 'a' || a.back() == 'f')) {
      suffix = a.back();
      a.pop_back();
    }
    const int target = std::stoi(a);
    if (suffix == 'a') {
      if (cc == target) return true;
    } else if (ptx && suffix == 0) {
      if (cc >= target) return true;
    } else if (dev_major == target / 10 && cc >= target) {
      return true;
    }
  }
  return false;
}

std::string format_archs(const std::string& archs) {
  std::string out;
  for (const std::string& a : split_csv(archs)) {
    if (!out.empty()) out += ", ";
    const auto plus = a.find("+ptx");
    if (plus != std::string::npos) {
      out += "sm_" + a.substr(0, plus) + "+compute_" + a.substr(0, plus);
    } else {
      out += "sm_" + a;
    }
  }
  return out.empty() ? std::string("none") : out;
}

}  // namespace sgl_kernel
