// SPDX-License-Identifier: Apache-2.0
// Custom all-reduce over peer-mapped buffers (API.md 2.6): the torch-free seam between the
// kernels (custom_ar.cu), the host-side state of one communicator handle (custom_ar.cc) and
// the bindings (allreduce_ops.cc).
//
// Every rank owns one signal buffer of meta_size() + max_size bytes, mapped into every peer
// (CUDA IPC). Its first meta_size() bytes hold a Signal: the barrier flags that peers write
// into it, and this rank's per-block call counters. The two-shot algorithm keeps its
// reduce-scatter result in the bytes after the Signal, where the peers read it.
//
// Barrier protocol, per kernel block b and per barrier kind k (start, mid, end): a call has
// number e (epoch[b] + 1 of the calling rank; the same on every rank because all ranks make
// the same calls). Rank r tells rank p "r reached barrier k of call e" by storing e into
// p.flags[k][b][r] (release, system scope), then waits until its own flags[k][b][p] == e for
// every peer p (acquire, system scope). No flag is ever reset: a slot only moves from e - 1
// to e, and a peer cannot store e + 1 into a slot before this rank has consumed e (it would
// first need this rank's flags of the barriers in between), so equality is exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::allreduce {

constexpr int kMaxRanks = 8;     // world sizes 2, 4, 6, 8
constexpr int kMaxBlocks = 64;   // upper bound of SGL_KERNEL_AR_MAX_BLOCKS
constexpr int kThreads = 512;    // threads per block of every all-reduce kernel
constexpr int kDefaultBlocks = 36;

enum Barrier { kStart = 0, kMid = 1, kEnd = 2, kNumBarriers = 3 };

struct alignas(128) Signal {
  uint32_t flags[kNumBarriers][kMaxBlocks][kMaxRanks];  // [k][b][r] written by rank r
  uint32_t epoch[kMaxBlocks];                           // calls made by block b (this rank only)
};

// Header size: the Signal rounded up to 256 bytes (the two-shot scratch starts there).
constexpr int64_t kMetaSize = (static_cast<int64_t>(sizeof(Signal)) + 255) / 256 * 256;

// One registered buffer: its address on every rank, as mapped in this process.
struct RankPtrs {
  const void* ptr[kMaxRanks];
};

enum class Dtype { kFloat32, kFloat16, kBFloat16 };
enum class Algo { kAuto, kOneShot, kTwoShot };

// Error word (host-mapped, so the host reads it without synchronising). 0 = no error.
// Bits 0-7: kind; bits 8-15: the rank that saw it; bits 16-23: the peer it waited for;
// bits 24-31: the barrier (kStart, kMid, kEnd).
enum ErrorKind : uint32_t { kErrNone = 0, kErrTimeout = 1, kErrUnregistered = 2 };

struct LaunchArgs {
  Signal* peers[kMaxRanks];   // every rank's Signal as mapped here (peers[rank] is our own)
  Signal* self;               // peers[rank]
  const RankPtrs* inputs;     // device pointer: the registered input buffer on every rank
  void* out;
  int64_t packs;              // 16-byte packs of the message
  int rank;
  int world;                  // 2, 4, 6 or 8
  int blocks;                 // grid size (<= kMaxBlocks)
  Algo algo;                  // kOneShot or kTwoShot (resolved)
  Dtype dtype;
  uint64_t timeout_ns;        // 0 = wait forever
  uint32_t* error;            // device address of the host-mapped error word
};

// Enqueue one all-reduce kernel.
cudaError_t launch_all_reduce(const LaunchArgs& args, cudaStream_t stream);

}  // namespace sgl_kernel::allreduce
