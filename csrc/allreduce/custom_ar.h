// SPDX-License-Identifier: Apache-2.0
// Custom all-reduce over peer-mapped buffers (API.md 2.6): the torch-free seam between the
// kernels (custom_ar.cu), the host-side state of one communicator handle (custom_ar.cc) and
// the bindings (allreduce_ops.cc).
//
// Every rank owns one signal buffer of meta_size() + max_size bytes, mapped into every peer
// (CUDA IPC). Its first meta_size() bytes are the header: a Signal (the barrier flags that
// peers write into it, and this rank's per-block call counters), then the push region. The
// two-shot algorithm keeps its reduce-scatter result in the bytes after the header, where the
// peers read it.
//
// Barrier protocol, per kernel block b and per barrier kind k (start, mid, end): a call has
// number e (epoch[b] + 1 of the calling rank; the same on every rank because all ranks make
// the same calls). Rank r tells rank p "r reached barrier k of call e" by storing e into
// p.flags[k][b][r] (release, system scope), then waits until its own flags[k][b][p] == e for
// every peer p (acquire, system scope). No flag is ever reset: a slot only moves from e - 1
// to e, and a peer cannot store e + 1 into a slot before this rank has consumed e (it would
// first need this rank's flags of the barriers in between), so equality is exact.
//
// Push protocol (the push algorithm, small messages): no barrier. Rank r stores its input,
// encoded, into every peer's push region, at slot s (the parity of this rank's count of push
// calls, push_calls) and source r; each rank waits on its own region until every 32-bit word
// of every source is non-zero, decodes, sums in rank order and zeroes what it read. The
// encoding is the bitwise NOT of the word, with the word 0xffffffff (a NaN in every dtype)
// first replaced by 0x7fffffff (also a NaN in every dtype), so an encoded word is never 0
// and the zeroed header is an empty region. Two slots suffice: a peer cannot start push call
// e + 2 (writing slot e % 2 again) before it has finished push call e + 1, which needs data
// that this rank pushes only after its push call e (reading and zeroing slot e % 2) has
// finished. Every block of a call reads push_calls when it starts; the last block to finish
// increments it (push_done counts the finished blocks), so all blocks of a call agree.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::allreduce {

constexpr int kMaxRanks = 8;     // world sizes 2, 4, 6, 8
constexpr int kMaxBlocks = 64;   // upper bound of SGL_KERNEL_AR_MAX_BLOCKS
constexpr int kThreads = 512;    // threads per block of every all-reduce kernel
// 64 against 36: 8 MiB 36.6 -> 32.8 us at 2 ranks, 64 MiB 377.6 -> 327.5 us at 4 (4 H200s, session 30);
// messages under 288 KiB use fewer blocks either way.
constexpr int kDefaultBlocks = 64;

enum Barrier { kStart = 0, kMid = 1, kEnd = 2, kNumBarriers = 3 };
constexpr uint32_t kPushWait = 3;  // the "barrier" of an error report from the push algorithm

struct alignas(128) Signal {
  uint32_t flags[kNumBarriers][kMaxBlocks][kMaxRanks];  // [k][b][r] written by rank r
  uint32_t epoch[kMaxBlocks];                           // calls made by block b (this rank only)
  uint32_t push_calls;  // push calls made by this rank
  uint32_t push_done;   // blocks of the current push call that have finished
};

// Header: the Signal rounded up to 256 bytes, then the push region (2 slots x world sources
// x push_capacity(world) bytes); the two-shot scratch starts after it. 16 MiB: at 2 ranks push
// beat one-shot up to 4 MiB (18.0 against 19.4 us there; 10.0 against 12.9 at 2 MiB; 4 H200s,
// session 31).
constexpr int64_t kSignalBytes = (static_cast<int64_t>(sizeof(Signal)) + 255) / 256 * 256;
constexpr int64_t kPushRegionBytes = int64_t{16} << 20;
constexpr int64_t kMetaSize = kSignalBytes + kPushRegionBytes;

// Largest message of the push algorithm at `world` ranks (a multiple of 256 bytes):
// 4 MiB at 2 ranks, 2 MiB at 4, 1365.25 KiB at 6, 1 MiB at 8. `auto` takes all of it at 2
// ranks and less at 4, 6 and 8 (custom_ar.cc).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int64_t push_capacity(int world) { return kPushRegionBytes / (2 * world) / 256 * 256; }

// One registered buffer: its address on every rank, as mapped in this process.
struct RankPtrs {
  const void* ptr[kMaxRanks];
};

enum class Dtype { kFloat32, kFloat16, kBFloat16 };
enum class Algo { kAuto, kOneShot, kTwoShot, kPush };

// Error word (host-mapped, so the host reads it without synchronising). 0 = no error.
// Bits 0-7: kind; bits 8-15: the rank that saw it; bits 16-23: the peer it waited for;
// bits 24-31: the barrier (kStart, kMid, kEnd, or kPushWait).
enum ErrorKind : uint32_t { kErrNone = 0, kErrTimeout = 1, kErrUnregistered = 2 };

struct LaunchArgs {
  Signal* peers[kMaxRanks];   // every rank's Signal as mapped here (peers[rank] is our own)
  Signal* self;               // peers[rank]
  const RankPtrs* inputs;     // device pointer: the registered input buffer on every rank
  const void* in;             // push: this rank's input (any 16-byte aligned address)
  void* out;
  int64_t packs;              // 16-byte packs of the message
  int rank;
  int world;                  // 2, 4, 6 or 8
  int blocks;                 // grid size (<= kMaxBlocks)
  Algo algo;                  // kOneShot, kTwoShot or kPush (resolved)
  Dtype dtype;
  uint64_t timeout_ns;        // 0 = wait forever
  uint32_t* error;            // device address of the host-mapped error word
};

// Enqueue one all-reduce kernel.
cudaError_t launch_all_reduce(const LaunchArgs& args, cudaStream_t stream);

}  // namespace sgl_kernel::allreduce
