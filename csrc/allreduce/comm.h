// SPDX-License-Identifier: Apache-2.0
// Host-side state of one custom all-reduce handle (torch-free; custom_ar.cc). The bindings
// (allreduce_ops.cc) check tensors and turn the std::runtime_error these methods throw into
// RuntimeErrors; every message already starts with "sgl_kernel.<op>: ".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "allreduce/custom_ar.h"

namespace sgl_kernel::allreduce {

class Comm {
 public:
  // `signals[r]`: rank r's signal buffer as mapped here; `rank_data`: device scratch for the
  // pointer tables of registered buffers (zeroed here). Reads SGL_KERNEL_AR_TIMEOUT_MS,
  // SGL_KERNEL_AR_MAX_BLOCKS and SGL_KERNEL_AR_ALGO.
  Comm(int device, const std::vector<int64_t>& signals, void* rank_data, int64_t rank_data_bytes, int rank,
       bool full_nvlink);
  ~Comm();  // closes the IPC mappings this handle opened; frees the error word
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int device() const { return device_; }

  // ptrs[r]: rank r's copy of one buffer, as mapped here.
  void register_buffer(const std::vector<int64_t>& ptrs);

  // out = sum over ranks of the registered input (see API.md 2.6 for reg_buffer).
  void all_reduce(cudaStream_t stream, Dtype dtype, const void* inp, void* out, int64_t bytes, void* reg_buffer,
                  int64_t reg_buffer_bytes);

  // Buffers recorded during graph capture: 64 handle bytes each, and offsets from their bases.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> graph_buffer_ipc_meta();
  void register_graph_buffers(const std::vector<std::vector<int64_t>>& handles,
                              const std::vector<std::vector<int64_t>>& offsets);

  // Raise if a kernel of this handle reported an error (timeout, unregistered graph buffer).
  void check_healthy(const char* op) const;

 private:
  RankPtrs* alloc_slot(const char* op);
  void* open_handle(const std::string& handle);
  Algo choose(int64_t bytes) const;

  int device_;
  int rank_;
  int world_;
  bool full_nvlink_;
  Signal* signals_[kMaxRanks] = {};
  RankPtrs* rank_data_;
  int64_t slots_;        // RankPtrs that fit in rank_data
  int64_t slots_used_ = 0;
  uint64_t timeout_ns_;
  int max_blocks_;
  Algo algo_;
  int64_t push_max_bytes_;      // auto: push up to this many bytes
  int64_t two_shot_min_bytes_;  // auto, world > 2 on full NVLink: two-shot from this many bytes
  uint32_t* error_host_ = nullptr;    // host-mapped error word
  uint32_t* error_device_ = nullptr;
  std::map<const void*, RankPtrs*> buffers_;                  // this rank's address -> table
  std::vector<std::pair<const void*, RankPtrs*>> recorded_;   // graph inputs awaiting registration
  std::map<std::string, void*> opened_;                       // IPC handle bytes -> mapping
};

// The handle table behind the opaque `fa` integers (ids, never reused).
int64_t create_comm(int device, const std::vector<int64_t>& signals, void* rank_data, int64_t rank_data_bytes,
                    int rank, bool full_nvlink);
Comm& lookup_comm(const char* op, int64_t fa);
void destroy_comm(int64_t fa);

}  // namespace sgl_kernel::allreduce
