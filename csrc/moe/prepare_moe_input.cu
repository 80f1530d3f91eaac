// SPDX-License-Identifier: Apache-2.0
// prepare_moe_input (API.md 2.4; contract in moe.h): the grouped-GEMM layout of the CUTLASS MoE
// path. A counting sort of the flat entries of topk_ids by expert with no padding, where an
// entry's slot is its expert's offset plus the number of earlier entries of that expert, so the
// slots inside an expert ascend with the flat index and the same input gives the same bits.
//
// The rank of an entry. A warp owns a contiguous piece of a block's entries, walked in rounds of
// 32 consecutive entries, one a lane; shared memory holds one row of E counters per such warp.
// Per round, __match_any_sync groups the lanes of an expert; the group's lowest lane reads the
// row's counter and advances it by the group's size, and each lane's rank among its warp's
// entries of the expert is that counter + the lanes of its group below it. The rank is kept in
// the entry's register (packed with its expert), so one match per entry suffices. Then one pass
// down each column of the table (threads per expert chosen by the launcher, a segmented warp
// scan joining their rows) turns the counts into the entries of the expert in the warps before,
// and an entry's slot is base[e] + that + its rank. No atomic decides a slot.
//
// Launches:
//   numel <= kSingleMaxElems (decode; or too few entries for a chunk of at least E): one block,
//     one launch. The ranks give the counts c_e; a block-wide scan gives the offsets; then the
//     entries are placed. If the entries do not fit the block's registers and table at once
//     (many experts), the block counts them first (a histogram) and ranks and places them in
//     sub-chunks in order, each sub-chunk's column pass advancing base[e].
//   larger: three launches over B blocks, block b owning the contiguous chunk b (all chunks hold
//     floor(numel / B) >= E or one more entry):
//     1. count: block b's histogram of its chunk, stored in output_permutation at the start of
//        its own chunk (E <= the chunk's length: scratch the outputs provide, so no workspace);
//     2. scan (one block): per expert, the exclusive prefix of the blocks' counts, in place;
//        c_e, the offsets and problem sizes;
//     3. place: block b reads its prefixes (before it writes any of its chunk of
//        output_permutation, the only block that does), then ranks and places like the one-block
//        path. Each block also fills the unused slots [expert_offsets[E], numel) of its chunk.
//   No thread-block clusters (moe_align.cu's large path): the three launches run on every arch
//   and spread a prefill call over as many SMs as it has chunks, at the cost of two launches.
// Dropped ids (outside [0, E)) are counted nowhere, get output_permutation = -1 and raise
// *bad_flag; input_permutation[q] = -1 for q in [expert_offsets[E], numel). Every slot is below
// numel, so no id value makes the kernel write outside its outputs. Positions are int32 (the
// launcher refuses numel >= 2^31, and blockscale offsets that could pass 2^31 - 1).
// PDL: before SGL_PDL_WAIT() only shared memory is touched. The one-block kernel releases its
// dependents once its loads are issued (after the counting pass when it works in sub-chunks), the
// place kernel once its prefixes are read, count and scan right after the wait (their dependents
// are the next kernel of this op, whose wait covers them). No workspace is allocated: CUDA-graph
// capturable.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "moe/moe.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::moe {

namespace {
namespace prep {

constexpr int kMaxItems = 16;         // entries a lane holds in registers per sub-chunk
constexpr int kMaxWarps = 32;
constexpr int kSingleThreads = 1024;  // the one-block kernel's most threads
constexpr int kPassThreads = 512;     // count and place kernels
constexpr int kScanThreads = 1024;
constexpr int kCountBatch = 4;        // count: rounds of loads a warp has in flight
constexpr int kScanInts = 64;         // scan_experts' scratch: two values a warp
constexpr int kBlockscaleAlign = 128;
// Shared memory of a block at most: within the opt-in limit of every supported arch (sm86 /
// sm89 allow 99 KB a block). The counter table gets what the per-expert arrays leave.
constexpr int64_t kSmemBudget = 96 * 1024;
// Packed entry: (rank << kExpertBits) | (e + 1); 0 in the low bits: dropped or no entry.
constexpr int kExpertBits = 13;
constexpr int kExpertMask = (1 << kExpertBits) - 1;
// Match key of a lane without an expert: unique per lane, never an expert.
constexpr uint32_t kLoneKey = 0x80000000u;

static_assert(kMaxPrepareExperts + 1 <= kExpertMask, "e + 1 fits the packed entry");
static_assert(32 * kMaxItems <= (1 << (31 - kExpertBits)), "a rank inside a warp's piece fits the packed entry");

// NOTE (untuned: no GPU when written): one launch up to kSingleMaxElems entries (decode is at
// most 1024 with T=128 and topk 8: one entry a thread); past it the three launches, with chunks
// of about kChunkTarget entries (T=16384, topk 8: 64 blocks of 2048, 4 entries a lane).
// kMaxChunks bounds the scan kernel's work (B rows of E counts) for huge calls.
constexpr int64_t kSingleMaxElems = 4096;
constexpr int64_t kChunkTarget = 2048;
constexpr int64_t kMaxChunks = 512;

struct Layout {
  int chunk;      // multi-block: floor(numel / blocks); block b owns [chunk_start(b), chunk_start(b + 1))
  int rem;        // numel % blocks: the first rem chunks hold one more entry
  int blocks;     // B
  int rows;       // R: warps that own entries, rows of the counter table
  int col_log2;   // log2 of the threads per expert in column_prefix
  bool one_pass;  // one-block kernel: every entry fits one sub-chunk
};

__device__ __forceinline__ int chunk_start(const Layout& l, int b) {
  return b * l.chunk + min(b, l.rem);  // <= numel < 2^31
}

// p[0, count) = 0; p 16-byte aligned; the whole block.
__device__ __forceinline__ void zero_shared(int* p, int count) {
  int4* p4 = reinterpret_cast<int4*>(p);
  const int count4 = count >> 2;
  for (int j = threadIdx.x; j < count4; j += blockDim.x) p4[j] = make_int4(0, 0, 0, 0);
  for (int j = 4 * count4 + threadIdx.x; j < count; j += blockDim.x) p[j] = 0;
}

// Every lane of the warp: raise *flag when a lane saw a dropped id.
__device__ __forceinline__ void raise_bad(int32_t* flag, bool bad) {
  if (flag != nullptr && __any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

__device__ __forceinline__ int expert_of(int32_t v, int num_experts) {
  return static_cast<uint32_t>(v) < static_cast<uint32_t>(num_experts) ? v : -1;
}

// The warp's entries [ws, we) (we - ws <= 32 * kItems; ws == we: none), lane l of round k holding
// entry ws + 32 k + l. Plain loads: the ids are written by the kernel before this one.
template <int kItems>
__device__ __forceinline__ void load_piece(const int32_t* ids,  // [numel]
                                           int ws, int we, int (&v)[kItems]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i = ws + 32 * k + lane;
    v[k] = i < we ? ids[i] : -1;
  }
}

// Whole warp. v[k]: in, the id of entry ws + 32 k + lane; out, the packed entry (rank among the
// warp's entries of its expert so far, counted in flat-index order). row: this warp's counters
// [E] in shared memory, advanced by the piece's entries of each expert. Returns whether a lane
// saw a dropped id.
template <int kItems>
__device__ __forceinline__ bool rank_piece(int (&v)[kItems], int ws, int we, int num_experts, int* row) {
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  bool bad = false;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i0 = ws + 32 * k;
    int packed = 0;
    if (i0 < we) {  // warp-uniform: rounds past the piece cost nothing
      int e = -1;
      if (i0 + lane < we) {
        e = expert_of(v[k], num_experts);
        bad |= e < 0;
      }
      const uint32_t key = e >= 0 ? static_cast<uint32_t>(e) : (kLoneKey | static_cast<uint32_t>(lane));
      const uint32_t group = __match_any_sync(0xffffffffu, key);
      const int leader = __ffs(group) - 1;
      int first = 0;
      if (e >= 0 && lane == leader) {
        first = row[e];
        row[e] = first + __popc(group);
      }
      first = __shfl_sync(0xffffffffu, first, leader);
      if (e >= 0) packed = ((first + __popc(group & lanes_below)) << kExpertBits) | (e + 1);
      __syncwarp();  // the next round's leaders read the advanced counters
    }
    v[k] = packed;
  }
  return bad;
}

// Whole warp: output_permutation[i] = slot (or -1) for the piece's entries, input_permutation[slot]
// = token. slot = row[e] + rank (+ add[e] when add != nullptr).
template <int kItems>
__device__ __forceinline__ void place_piece(const int (&v)[kItems], int ws, int we, const int* row, const int* add,
                                            const PrepareMoeInputParams& p, const FastDivmod& tok) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int i = ws + 32 * k + lane;
    if (i < we) {
      const int e1 = v[k] & kExpertMask;
      int q = -1;
      if (e1 != 0) {
        const int e = e1 - 1;
        q = row[e] + (v[k] >> kExpertBits) + (add != nullptr ? add[e] : 0);
        p.input_permutation[q] = static_cast<int32_t>(tok.div(static_cast<uint32_t>(i)));
      }
      p.output_permutation[i] = q;
    }
  }
}

// Column pass over the table rows[R][E] (whole block; 2^col_log2 threads an expert, each a
// contiguous range of rows, joined by a segmented warp scan): rows[w][e] becomes acc0 + the
// entries of e in rows below w, and acc[e] acc0 + all of them, where acc0 = acc[e] when
// from_acc (advancing slot bases), else 0 (counting).
__device__ __forceinline__ void column_prefix(int* rows, int R, int num_experts, int col_log2, int* acc,
                                              bool from_acc) {
  const int E = num_experts;
  const int width = 1 << col_log2;
  const int total = E << col_log2;
  for (int u0 = 0; u0 < total; u0 += blockDim.x) {  // block-uniform trip count (shuffles below)
    const int u = u0 + threadIdx.x;
    const bool active = u < total;
    const int e = active ? u >> col_log2 : 0;
    const int j = u & (width - 1);
    const int w0 = (j * R) >> col_log2;
    const int w1 = active ? ((j + 1) * R) >> col_log2 : w0;
    int local = 0;
    for (int w = w0; w < w1; ++w) local += rows[w * E + e];
    int x = local;
    for (int off = 1; off < width; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, off, width);
      if (j >= off) x += y;
    }
    int run = x - local;
    if (from_acc && active) run += acc[e];
    __syncwarp();  // every thread of the expert has read acc[e] before its last thread writes it
    for (int w = w0; w < w1; ++w) {
      const int c = rows[w * E + e];
      rows[w * E + e] = run;
      run += c;
    }
    if (active && j == width - 1) acc[e] = run;
  }
}

__device__ __forceinline__ uint32_t round_blockscale(int c) {
  return (static_cast<uint32_t>(c) + (kBlockscaleAlign - 1)) & ~static_cast<uint32_t>(kBlockscaleAlign - 1);
}

// Whole block. base[e] = sum_{e' < e} tot[e'] for e <= E; writes expert_offsets, the same scan
// of round_up(tot, 128) to blockscale_offsets (if any), problem_sizes1 / 2. scan: kScanInts ints
// of shared memory. tot and base are read / written after the caller's and before the last
// barrier here.
__device__ __forceinline__ void scan_experts(const int* tot, int* base, int* scan, const PrepareMoeInputParams& p) {
  const int E = p.num_experts;
  const int nt = blockDim.x;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int per = (E + nt - 1) / nt;  // thread t owns experts [e0, e1)
  const int e0 = min(tid * per, E);
  const int e1 = min(e0 + per, E);
  // Blockscale sums in uint32_t: they wrap (unused) when blockscale_offsets is nullptr and the
  // launcher's int32 bound on them does not hold.
  int a = 0;       // entries
  uint32_t s = 0;  // rows of 128
  for (int e = e0; e < e1; ++e) {
    const int c = tot[e];
    a += c;
    s += round_blockscale(c);
  }
  int xa = a;
  uint32_t xs = s;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int ya = __shfl_up_sync(0xffffffffu, xa, off);
    const uint32_t ys = __shfl_up_sync(0xffffffffu, xs, off);
    if (lane >= off) {
      xa += ya;
      xs += ys;
    }
  }
  if (lane == 31) {
    scan[warp] = xa;
    scan[32 + warp] = static_cast<int>(xs);
  }
  __syncthreads();
  if (warp == 0) {
    const int nw = nt >> 5;
    int wa = lane < nw ? scan[lane] : 0;
    uint32_t wsum = lane < nw ? static_cast<uint32_t>(scan[32 + lane]) : 0u;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int ya = __shfl_up_sync(0xffffffffu, wa, off);
      const uint32_t ys = __shfl_up_sync(0xffffffffu, wsum, off);
      if (lane >= off) {
        wa += ya;
        wsum += ys;
      }
    }
    __syncwarp();
    scan[lane] = wa;
    scan[32 + lane] = static_cast<int>(wsum);
  }
  __syncthreads();
  int at = xa - a + (warp > 0 ? scan[warp - 1] : 0);
  uint32_t bt = xs - s + (warp > 0 ? static_cast<uint32_t>(scan[32 + warp - 1]) : 0u);
  int32_t* blockscale = p.blockscale_offsets;
  for (int e = e0; e < e1; ++e) {
    base[e] = at;
    p.expert_offsets[e] = at;
    if (blockscale != nullptr) blockscale[e] = static_cast<int32_t>(bt);
    const int c = tot[e];
    at += c;
    bt += round_blockscale(c);
  }
  if (tid == nt - 1) {  // its range ends at E (or is empty past it): at, bt are the totals
    base[E] = at;
    p.expert_offsets[E] = at;
    if (blockscale != nullptr) blockscale[E] = static_cast<int32_t>(bt);
  }
  // problem sizes, rows of 3, coalesced: (c, 2n, k) and (c, k, n)
  const int two_n = 2 * p.n;
  for (int j = tid; j < 3 * E; j += nt) {
    const int e = j / 3;
    const int col = j - 3 * e;
    const int c = tot[e];
    p.problem_sizes1[j] = col == 0 ? c : (col == 1 ? two_n : p.k);
    p.problem_sizes2[j] = col == 0 ? c : (col == 1 ? p.k : p.n);
  }
  __syncthreads();
}

// Whole block: input_permutation[q] = -1 for q in [lo, hi).
__device__ __forceinline__ void fill_unused(int32_t* input_permutation, int lo, int hi) {
  for (int q = lo + static_cast<int>(threadIdx.x); q < hi; q += blockDim.x) input_permutation[q] = -1;
}

// Whole block: hist[e] += the entries of expert e in [c0, c1) (warp-aggregated shared atomics;
// hist zeroed and published by the caller). Returns whether this thread saw a dropped id.
__device__ __forceinline__ bool count_range(const int32_t* ids,  // [numel]
                                            int c0, int c1, int num_experts, int* hist) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nw = blockDim.x >> 5;
  bool bad = false;
  for (int b = c0 + warp * 32 * kCountBatch; b < c1; b += nw * 32 * kCountBatch) {  // warp-uniform
    int v[kCountBatch];
#pragma unroll
    for (int u = 0; u < kCountBatch; ++u) {
      const int i = b + u * 32 + lane;
      v[u] = i < c1 ? ids[i] : -1;
    }
#pragma unroll
    for (int u = 0; u < kCountBatch; ++u) {
      if (b + u * 32 < c1) {
        const int i = b + u * 32 + lane;
        int e = -1;
        if (i < c1) {
          e = expert_of(v[u], num_experts);
          bad |= e < 0;
        }
        const uint32_t key = e >= 0 ? static_cast<uint32_t>(e) : (kLoneKey | static_cast<uint32_t>(lane));
        const uint32_t group = __match_any_sync(0xffffffffu, key);
        if (e >= 0 && lane == __ffs(group) - 1) atomicAdd(&hist[e], __popc(group));
      }
    }
  }
  return bad;
}

// Whole block: ranks and places the entries [c0, c1) in sub-chunks of R * 32 * kItems, in order.
// base[e] (shared) is the next slot of expert e, advanced past the range's entries of e; the
// table rows[R][E] is zero on entry.
template <int kItems>
__device__ __forceinline__ void place_range(const PrepareMoeInputParams& p, const Layout& l, int c0, int c1,
                                            int* rows, int* base, const FastDivmod& tok) {
  constexpr int kPiece = 32 * kItems;
  const int E = p.num_experts;
  const int R = l.rows;
  const int warp = threadIdx.x >> 5;
  const bool owner = warp < R;
  int* row = rows + (owner ? warp : 0) * E;
  for (int s0 = c0; s0 < c1; s0 += R * kPiece) {
    const int ws = owner ? min(s0 + warp * kPiece, c1) : c1;
    const int we = min(ws + kPiece, c1);
    int v[kItems];
    load_piece(p.topk_ids, ws, we, v);
    if (owner) rank_piece(v, ws, we, E, row);  // dropped ids were flagged by the count
    __syncthreads();
    column_prefix(rows, R, E, l.col_log2, base, true);
    __syncthreads();
    if (owner) place_piece(v, ws, we, row, nullptr, p, tok);
    if (s0 + R * kPiece < c1) {
      __syncthreads();
      zero_shared(rows, R * E);
      __syncthreads();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels.

// One block. Shared memory (int32): rows[R][E] | tot[E] | base[E + 1] | scan[kScanInts].
template <int kItems>
__global__ void __launch_bounds__(kSingleThreads, 1)
    prepare_single_kernel(const PrepareMoeInputParams p, const Layout l, const FastDivmod tok) {
  extern __shared__ int4 smem4[];
  int* const rows = reinterpret_cast<int*>(smem4);
  const int E = p.num_experts;
  const int R = l.rows;
  int* const tot = rows + R * E;
  int* const base = tot + E;
  int* const scan = base + E + 1;
  const int n = static_cast<int>(p.numel);
  zero_shared(rows, R * E + E);  // the table and tot; shared memory only: before the wait
  SGL_PDL_WAIT();

  if (l.one_pass) {
    constexpr int kPiece = 32 * kItems;
    const int warp = threadIdx.x >> 5;
    const bool owner = warp < R;
    const int ws = owner ? min(warp * kPiece, n) : n;
    const int we = min(ws + kPiece, n);
    int* const row = rows + (owner ? warp : 0) * E;
    int v[kItems];
    load_piece(p.topk_ids, ws, we, v);
    SGL_PDL_LAUNCH_DEPENDENTS();  // loads issued
    __syncthreads();              // the table is zero
    if (owner) raise_bad(p.bad_flag, rank_piece(v, ws, we, E, row));
    __syncthreads();
    column_prefix(rows, R, E, l.col_log2, tot, false);  // rows: entries in earlier warps; tot = c_e
    __syncthreads();
    scan_experts(tot, base, scan, p);
    if (owner) place_piece(v, ws, we, row, base, p, tok);
    fill_unused(p.input_permutation, base[E], n);
  } else {
    __syncthreads();  // tot is zero
    const bool bad = count_range(p.topk_ids, 0, n, E, tot);
    SGL_PDL_LAUNCH_DEPENDENTS();
    raise_bad(p.bad_flag, bad);
    __syncthreads();
    scan_experts(tot, base, scan, p);
    fill_unused(p.input_permutation, base[E], n);  // base[E] is not advanced by place_range
    place_range<kItems>(p, l, 0, n, rows, base, tok);
  }
}

// Block b: the histogram of chunk b, stored at output_permutation[chunk_start(b) + e].
// Shared memory: hist[E].
__global__ void __launch_bounds__(kPassThreads) prepare_count_kernel(const PrepareMoeInputParams p, const Layout l) {
  extern __shared__ int4 smem4[];
  int* const hist = reinterpret_cast<int*>(smem4);
  const int E = p.num_experts;
  zero_shared(hist, E);
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();
  __syncthreads();
  const int c0 = chunk_start(l, blockIdx.x);
  const int c1 = chunk_start(l, blockIdx.x + 1);
  raise_bad(p.bad_flag, count_range(p.topk_ids, c0, c1, E, hist));
  __syncthreads();
  int32_t* const out = p.output_permutation + c0;  // scratch: [E] <= the chunk's length
  for (int e = threadIdx.x; e < E; e += blockDim.x) out[e] = hist[e];
}

// One block: each expert's column of the B histograms becomes its exclusive prefix (in place);
// offsets, blockscale offsets and problem sizes. Threads (g, e) with g < G sum a contiguous
// group of the rows. Shared memory: part[max(E, kScanThreads)] | base[E + 1] | scan[kScanInts].
__global__ void __launch_bounds__(kScanThreads) prepare_scan_kernel(const PrepareMoeInputParams p, const Layout l) {
  extern __shared__ int4 smem4[];
  const int E = p.num_experts;
  const int nt = blockDim.x;
  int* const part = reinterpret_cast<int*>(smem4);
  int* const base = part + max(E, nt);
  int* const scan = base + E + 1;
  const int B = l.blocks;
  const int G = E >= nt ? 1 : min(B, nt / E);
  int32_t* const counts = p.output_permutation;  // row b at chunk_start(b)
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();
  for (int u = threadIdx.x; u < G * E; u += nt) {
    const int g = u / E;
    const int e = u - g * E;
    int s = 0;
#pragma unroll 8
    for (int b = g * B / G; b < (g + 1) * B / G; ++b) s += counts[chunk_start(l, b) + e];
    part[u] = s;
  }
  __syncthreads();
  int my_total = 0;
  for (int u = threadIdx.x; u < G * E; u += nt) {
    const int g = u / E;
    const int e = u - g * E;
    int run = 0;
    for (int h = 0; h < g; ++h) run += part[h * E + e];
#pragma unroll 8
    for (int b = g * B / G; b < (g + 1) * B / G; ++b) {
      int32_t* const at = counts + chunk_start(l, b) + e;
      const int c = *at;
      *at = run;
      run += c;
    }
    my_total = run;  // G > 1: one u a thread at most
  }
  __syncthreads();  // every part[] read
  if (G > 1 && threadIdx.x < G * E && threadIdx.x / E == G - 1) part[threadIdx.x - (G - 1) * E] = my_total;
  __syncthreads();  // part[0, E) = c_e (G == 1: already)
  scan_experts(part, base, scan, p);
}

// Block b: ranks and places chunk b from the slot bases expert_offsets[e] + its prefixes, and
// fills the unused slots of its chunk. Shared memory: rows[R][E] | base[E].
template <int kItems>
__global__ void __launch_bounds__(kPassThreads)
    prepare_place_kernel(const PrepareMoeInputParams p, const Layout l, const FastDivmod tok) {
  extern __shared__ int4 smem4[];
  int* const rows = reinterpret_cast<int*>(smem4);
  const int E = p.num_experts;
  int* const base = rows + l.rows * E;
  zero_shared(rows, l.rows * E);  // shared memory only: before the wait
  SGL_PDL_WAIT();
  const int c0 = chunk_start(l, blockIdx.x);
  const int c1 = chunk_start(l, blockIdx.x + 1);
  const int32_t* const prefix = p.output_permutation + c0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) base[e] = p.expert_offsets[e] + prefix[e];
  const int used = p.expert_offsets[E];
  SGL_PDL_LAUNCH_DEPENDENTS();
  __syncthreads();  // prefixes read before this block writes its chunk of output_permutation
  fill_unused(p.input_permutation, max(used, c0), c1);
  place_range<kItems>(p, l, c0, c1, rows, base, tok);
}

// ---------------------------------------------------------------------------------------------
// Host side.

int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

int floor_log2(int64_t x) {
  int r = 0;
  while ((int64_t{2} << r) <= x) ++r;
  return r;
}

// Rows of E counters that fit the shared-memory budget beside `fixed_ints`, in [1, max_rows].
int rows_fit(int num_experts, int64_t fixed_ints, int max_rows) {
  const int64_t free_ints = kSmemBudget / 4 - fixed_ints;
  return static_cast<int>(std::clamp<int64_t>(free_ints / num_experts, 1, max_rows));
}

// Items a lane (a power of two <= kMaxItems) and rows (<= max_rows) for pieces of `entries`:
// the fewest items that let the rows hold them all, else kMaxItems (sub-chunks).
void fit_items(int64_t entries, int max_rows, int& items, int& rows) {
  items = 1;
  while (items < kMaxItems && ceil_div64(entries, 32 * items) > max_rows) items *= 2;
  rows = static_cast<int>(std::clamp<int64_t>(ceil_div64(entries, 32 * items), 1, max_rows));
}

// log2 of the threads an expert in column_prefix: a power of two <= 32, <= threads / E, and no
// more than the rows need.
int column_log2(int threads, int num_experts, int rows) {
  const int by_threads = floor_log2(std::max(1, threads / num_experts));
  int by_rows = 0;
  while ((1 << by_rows) < rows) ++by_rows;
  return std::min({by_threads, by_rows, 5});
}

template <int kItems>
cudaError_t launch_single(const PrepareMoeInputParams& p, const Layout& l, const FastDivmod& tok,
                          cudaStream_t stream) {
  const int E = p.num_experts;
  int threads = kSingleThreads;
  if (l.one_pass) {
    threads = static_cast<int>(std::clamp<int64_t>(ceil_div64(std::max(32 * l.rows, E), 32) * 32, 32, kSingleThreads));
  }
  Layout lt = l;
  lt.col_log2 = column_log2(threads, E, l.rows);
  const size_t smem = 4 * (static_cast<size_t>(l.rows) * E + 2 * static_cast<size_t>(E) + 1 + kScanInts);
  return launch_kernel(prepare_single_kernel<kItems>, dim3(1), dim3(threads), smem, stream, p.enable_pdl, p, lt,
                       tok);
}

template <int kItems>
cudaError_t launch_place(const PrepareMoeInputParams& p, const Layout& l, const FastDivmod& tok,
                         cudaStream_t stream) {
  const size_t smem = 4 * (static_cast<size_t>(l.rows) + 1) * p.num_experts;
  return launch_kernel(prepare_place_kernel<kItems>, dim3(static_cast<unsigned>(l.blocks)), dim3(kPassThreads), smem,
                       stream, p.enable_pdl, p, l, tok);
}

// kItems dispatch: `items` is a power of two in [1, kMaxItems].
template <template <int> class Launch>
cudaError_t dispatch_items(int items, const PrepareMoeInputParams& p, const Layout& l, const FastDivmod& tok,
                           cudaStream_t stream) {
  switch (items) {
    case 1: return Launch<1>::run(p, l, tok, stream);
    case 2: return Launch<2>::run(p, l, tok, stream);
    case 4: return Launch<4>::run(p, l, tok, stream);
    case 8: return Launch<8>::run(p, l, tok, stream);
    default: return Launch<16>::run(p, l, tok, stream);
  }
}

template <int kItems>
struct SingleLaunch {
  static cudaError_t run(const PrepareMoeInputParams& p, const Layout& l, const FastDivmod& tok, cudaStream_t s) {
    return launch_single<kItems>(p, l, tok, s);
  }
};

template <int kItems>
struct PlaceLaunch {
  static cudaError_t run(const PrepareMoeInputParams& p, const Layout& l, const FastDivmod& tok, cudaStream_t s) {
    return launch_place<kItems>(p, l, tok, s);
  }
};

static_assert(kMaxItems == 16, "dispatch_items covers 1, 2, 4, 8, 16");

cudaError_t launch_one_block(const PrepareMoeInputParams& p, const FastDivmod& tok, cudaStream_t stream) {
  const int E = p.num_experts;
  Layout l{};
  int items = 1;
  fit_items(p.numel, rows_fit(E, 2 * static_cast<int64_t>(E) + 1 + kScanInts, kMaxWarps), items, l.rows);
  l.one_pass = p.numel <= static_cast<int64_t>(l.rows) * 32 * items;
  l.blocks = 1;
  return dispatch_items<SingleLaunch>(items, p, l, tok, stream);
}

cudaError_t launch_chunked(const PrepareMoeInputParams& p, const FastDivmod& tok, cudaStream_t stream) {
  const int E = p.num_experts;
  const int64_t n = p.numel;
  const int64_t blocks = std::min({ceil_div64(n, kChunkTarget), kMaxChunks, n / E});  // >= 2 (the caller)
  Layout l{};
  l.blocks = static_cast<int>(blocks);
  l.chunk = static_cast<int>(n / blocks);
  l.rem = static_cast<int>(n % blocks);
  int items = 1;
  fit_items(l.chunk + (l.rem > 0 ? 1 : 0), rows_fit(E, E, kPassThreads / 32), items, l.rows);
  l.col_log2 = column_log2(kPassThreads, E, l.rows);
  l.one_pass = false;
  const dim3 grid(static_cast<unsigned>(l.blocks));
  SGL_CUDA_TRY(launch_kernel(prepare_count_kernel, grid, dim3(kPassThreads), 4 * static_cast<size_t>(E), stream,
                             p.enable_pdl, p, l));
  const size_t scan_smem = 4 * (static_cast<size_t>(std::max(E, kScanThreads)) + E + 1 + kScanInts);
  SGL_CUDA_TRY(launch_kernel(prepare_scan_kernel, dim3(1), dim3(kScanThreads), scan_smem, stream, p.enable_pdl, p,
                             l));
  return dispatch_items<PlaceLaunch>(items, p, l, tok, stream);
}

}  // namespace prep
}  // namespace

cudaError_t launch_prepare_moe_input(const PrepareMoeInputParams& p, cudaStream_t stream) {
  if (p.numel < 0 || p.numel > INT32_MAX || p.topk < 1 || p.num_experts < 1 || p.num_experts > kMaxPrepareExperts ||
      p.n < 0 || p.k < 0 || 2 * static_cast<int64_t>(p.n) > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  // blockscale offsets: numel + (rounding of each non-empty expert) must fit int32
  const int64_t blockscale_bound =
      p.numel + std::min<int64_t>(p.numel, p.num_experts) * (prep::kBlockscaleAlign - 1);
  if (p.blockscale_offsets != nullptr && blockscale_bound > INT32_MAX) return cudaErrorInvalidValue;
  const FastDivmod tok(static_cast<uint32_t>(p.topk));
  // numel == 0 still launches: the offsets and problem sizes are written.
  if (p.numel > prep::kSingleMaxElems && p.numel / p.num_experts >= 2) return prep::launch_chunked(p, tok, stream);
  return prep::launch_one_block(p, tok, stream);
}

}  // namespace sgl_kernel::moe
