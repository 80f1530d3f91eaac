// SPDX-License-Identifier: Apache-2.0
// Host-side state of the custom all-reduce handles (comm.h). Torch-free: CUDA runtime only
// (plus cuMemGetAddressRange through the runtime's driver entry point, no libcuda link).
#include "allreduce/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <cuda.h>

namespace sgl_kernel::allreduce {

namespace {

template <typename... Args>
[[noreturn]] void fail(const char* op, const Args&... args) {
  std::ostringstream os;
  os << "sgl_kernel." << op << ": ";
  (os << ... << args);
  throw std::runtime_error(os.str());
}

void cuda_ok(const char* op, cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so later calls are unaffected
    fail(op, what, " failed: ", cudaGetErrorString(err));
  }
}

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) {
    fail("init_custom_ar", name, " must be an integer in [", lo, ", ", hi, "], got '", v, "'");
  }
  return x;
}

Algo env_algo() {
  const char* v = std::getenv("SGL_KERNEL_AR_ALGO");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return Algo::kAuto;
  if (std::strcmp(v, "oneshot") == 0) return Algo::kOneShot;
  if (std::strcmp(v, "twoshot") == 0) return Algo::kTwoShot;
  if (std::strcmp(v, "push") == 0) return Algo::kPush;
  fail("init_custom_ar", "SGL_KERNEL_AR_ALGO must be auto, oneshot, twoshot or push, got '", v, "'");
}

const char* barrier_name(uint32_t b) {
  switch (b) {
    case kStart: return "start";
    case kMid: return "middle";
    case kEnd: return "end";
    case kPushWait: return "push data";
    default: return "?";
  }
}

std::string handle_key(const cudaIpcMemHandle_t& h) { return std::string(h.reserved, CUDA_IPC_HANDLE_SIZE); }

// IPC handles this process produced (get_graph_buffer_ipc_meta) -> the allocation base here.
// cudaIpcOpenMemHandle refuses a handle of the calling process; when all ranks live in one
// process (tests, single-process emulation) a peer's handle is found here instead.
std::mutex g_local_mutex;
std::unordered_map<std::string, void*> g_local_handles;

// The allocation that holds `ptr`: its base (cuMemGetAddressRange via the runtime).
void* allocation_base(const char* op, const void* ptr) {
  using GetRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetRange get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<GetRange>(fn);
  }();
  if (get_range == nullptr) fail(op, "the CUDA driver does not provide cuMemGetAddressRange");
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = get_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) fail(op, "cuMemGetAddressRange failed (error ", static_cast<int>(r), ") for a recorded buffer");
  return reinterpret_cast<void*>(base);
}

}  // namespace

Comm::Comm(int device, const std::vector<int64_t>& signals, void* rank_data, int64_t rank_data_bytes, int rank,
           bool full_nvlink)
    : device_(device), rank_(rank), world_(static_cast<int>(signals.size())), full_nvlink_(full_nvlink) {
  const char* op = "init_custom_ar";
  if (world_ != 2 && world_ != 4 && world_ != 6 && world_ != 8) {
    fail(op, "ipc_tensors must hold one signal buffer per rank for a world size of 2, 4, 6 or 8, got ", world_);
  }
  if (rank < 0 || rank >= world_) fail(op, "rank must be in [0, ", world_, "), got ", rank);
  if (!full_nvlink && world_ != 2) {
    fail(op, "full_nvlink=False (GPUs not all connected by NVLink) is only supported with 2 ranks, got ", world_);
  }
  for (int r = 0; r < world_; ++r) {
    if (signals[r] == 0) fail(op, "ipc_tensors[", r, "] is a null address");
    if (signals[r] % 256 != 0) fail(op, "ipc_tensors[", r, "] must be 256-byte aligned, got address ", signals[r]);
    signals_[r] = reinterpret_cast<Signal*>(signals[r]);
  }
  if (reinterpret_cast<uintptr_t>(rank_data) % alignof(RankPtrs) != 0) fail(op, "rank_data must be 8-byte aligned");
  slots_ = rank_data_bytes / static_cast<int64_t>(sizeof(RankPtrs));
  if (slots_ < 1) fail(op, "rank_data must hold at least ", sizeof(RankPtrs), " bytes, got ", rank_data_bytes);
  rank_data_ = static_cast<RankPtrs*>(rank_data);
  timeout_ns_ = static_cast<uint64_t>(env_int("SGL_KERNEL_AR_TIMEOUT_MS", 60000, 0, int64_t{1} << 40)) * 1000000ull;
  max_blocks_ = static_cast<int>(env_int("SGL_KERNEL_AR_MAX_BLOCKS", kDefaultBlocks, 1, kMaxBlocks));
  algo_ = env_algo();
  // auto's switch points, from bench_allreduce.py --algos (sessions 30 and 31, 2 and 4 GPUs of
  // 4-GPU H100 and H200 hosts over NVLink; 6 and 8 ranks not measured). 2 ranks: push up to its
  // capacity (4 MiB: 18.0 against one-shot's 19.4 us; 2 MiB 10.0 against 12.9), then one-shot.
  // 4 ranks: push up to 1 MiB (14.7 against two-shot's 15.8), two-shot above (1.5 MiB 18.2
  // against push's 19.6). 6 and 8 ranks: push up to the session-30 capacities (a 4 MiB
  // region), two-shot from 256 KiB.
  push_max_bytes_ = world_ == 2   ? push_capacity(2)
                    : world_ == 4 ? (int64_t{1} << 20)
                                  : (int64_t{4} << 20) / (2 * world_) / 256 * 256;
  two_shot_min_bytes_ = world_ <= 4 ? (int64_t{1} << 20) : (int64_t{256} << 10);
  cuda_ok(op, cudaMemset(rank_data_, 0, static_cast<size_t>(slots_) * sizeof(RankPtrs)), "zeroing rank_data");
  void* host = nullptr;
  cuda_ok(op, cudaHostAlloc(&host, sizeof(uint32_t), cudaHostAllocMapped), "cudaHostAlloc (error word)");
  error_host_ = static_cast<uint32_t*>(host);
  *error_host_ = kErrNone;
  void* dev = nullptr;
  const cudaError_t err = cudaHostGetDevicePointer(&dev, host, 0);
  if (err != cudaSuccess) {
    cudaFreeHost(host);
    cuda_ok(op, err, "cudaHostGetDevicePointer (error word)");
  }
  error_device_ = static_cast<uint32_t*>(dev);
}

Comm::~Comm() {
  for (auto& [key, ptr] : opened_) cudaIpcCloseMemHandle(ptr);
  if (error_host_ != nullptr) cudaFreeHost(error_host_);
  cudaGetLastError();
}

void Comm::check_healthy(const char* op) const {
  const uint32_t code = *reinterpret_cast<volatile const uint32_t*>(error_host_);
  if (code == kErrNone) return;
  const uint32_t kind = code & 0xff, rank = (code >> 8) & 0xff, peer = (code >> 16) & 0xff, barrier = code >> 24;
  if (kind == kErrTimeout) {
    fail(op, "an earlier all_reduce on this handle timed out: rank ", rank, " waited more than ",
         timeout_ns_ / 1000000, " ms (SGL_KERNEL_AR_TIMEOUT_MS) for rank ", peer, " at the ", barrier_name(barrier),
         " barrier; its output was not computed and the ranks' flags are out of step, so this handle is "
         "unusable: dispose it and create a new one on freshly zeroed signal buffers (peers may have left "
         "data in this one), and find out why that rank did not call all_reduce");
  }
  fail(op, "a CUDA graph replayed an all_reduce whose input was recorded during capture but never registered "
           "(call get_graph_buffer_ipc_meta and register_graph_buffers on every rank after capture, before "
           "replay); its output was not computed and this handle is unusable: dispose it and create a new one "
           "on freshly zeroed signal buffers");
}

RankPtrs* Comm::alloc_slot(const char* op) {
  if (slots_used_ >= slots_) {
    fail(op, "rank_data is full: it holds ", slots_, " buffer tables of ", sizeof(RankPtrs),
         " bytes; pass a larger rank_data to init_custom_ar");
  }
  return rank_data_ + slots_used_++;
}

void Comm::register_buffer(const std::vector<int64_t>& ptrs) {
  const char* op = "register_buffer";
  if (static_cast<int>(ptrs.size()) != world_) {
    fail(op, "expects one address per rank (", world_, "), got ", ptrs.size());
  }
  RankPtrs table{};
  for (int r = 0; r < world_; ++r) {
    if (ptrs[r] == 0) fail(op, "fake_ipc_ptrs[", r, "] is a null address");
    if (ptrs[r] % 16 != 0) fail(op, "fake_ipc_ptrs[", r, "] must be 16-byte aligned, got address ", ptrs[r]);
    table.ptr[r] = reinterpret_cast<const void*>(ptrs[r]);
  }
  if (buffers_.count(table.ptr[rank_]) != 0) fail(op, "the buffer at ", ptrs[rank_], " is already registered");
  RankPtrs* slot = alloc_slot(op);
  cuda_ok(op, cudaMemcpy(slot, &table, sizeof(table), cudaMemcpyHostToDevice), "copying the pointer table");
  buffers_[table.ptr[rank_]] = slot;
}

Algo Comm::choose(int64_t bytes) const {
  const bool push_fits = bytes <= push_capacity(world_);
  if (algo_ == Algo::kPush) return push_fits ? Algo::kPush : Algo::kOneShot;
  if (algo_ != Algo::kAuto) return algo_;
  if (push_fits && bytes <= push_max_bytes_) return Algo::kPush;
  if (world_ == 2 || !full_nvlink_) return Algo::kOneShot;
  return bytes < two_shot_min_bytes_ ? Algo::kOneShot : Algo::kTwoShot;
}

void Comm::all_reduce(cudaStream_t stream, Dtype dtype, const void* inp, void* out, int64_t bytes, void* reg_buffer,
                      int64_t reg_buffer_bytes) {
  const char* op = "all_reduce";
  check_healthy(op);
  if (bytes == 0) return;
  const uintptr_t p0 = reinterpret_cast<uintptr_t>(inp), o0 = reinterpret_cast<uintptr_t>(out);
  const auto overlaps = [&](uintptr_t i0) {
    return o0 < i0 + static_cast<uintptr_t>(bytes) && i0 < o0 + static_cast<uintptr_t>(bytes);
  };
  Algo algo = choose(bytes);
  // push reads this rank's input where it is, each pack before its sum is stored: out may be
  // inp itself but not a shifted overlap of it (then the staging copy of one-shot).
  if (algo == Algo::kPush && reg_buffer != nullptr && overlaps(p0) && p0 != o0) algo = Algo::kOneShot;
  const RankPtrs* table = nullptr;
  const void* input = inp;
  if (reg_buffer != nullptr) {
    const auto it = buffers_.find(reg_buffer);
    if (it == buffers_.end()) {
      fail(op, "reg_buffer (address ", reinterpret_cast<uintptr_t>(reg_buffer),
           ") is not a registered buffer (register_buffer)");
    }
    if (reg_buffer_bytes < bytes) {
      fail(op, "inp holds ", bytes, " bytes but reg_buffer_sz_bytes is ", reg_buffer_bytes);
    }
    table = it->second;
    if (algo != Algo::kPush) {  // push needs no copy: the peers never read inp
      input = reg_buffer;
      if (reg_buffer != inp) {
        cuda_ok(op, cudaMemcpyAsync(reg_buffer, inp, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
                "copying inp into reg_buffer");
      }
    }
  } else {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda_ok(op, cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    if (status == cudaStreamCaptureStatusActive) {
      // Every capture records its input afresh, even at an address registered before: the
      // peers' buffers of this graph may differ from those of an earlier registration.
      RankPtrs* slot = alloc_slot(op);  // zeroed: the kernel refuses it until registered
      recorded_.emplace_back(inp, slot);
      table = slot;
    } else {
      const auto it = buffers_.find(inp);
      if (it == buffers_.end()) {
        fail(op, "reg_buffer is 0, so inp must be a registered buffer, but inp (address ",
             reinterpret_cast<uintptr_t>(inp),
             ") is not; pass the staging buffer as reg_buffer, or capture this call in a CUDA graph and "
             "register it afterwards (get_graph_buffer_ipc_meta / register_graph_buffers)");
      }
      table = it->second;
    }
  }
  // The peers read a registered input until the end barrier; writing the result over it
  // would race. (With reg_buffer == 0 this holds for every algorithm: one contract.) Push
  // with a staging buffer reads inp itself, which out can only equal (see above).
  const bool reads_in_place = algo == Algo::kPush && reg_buffer != nullptr;
  if (!reads_in_place && overlaps(reinterpret_cast<uintptr_t>(input))) {
    fail(op, "out overlaps the registered input buffer that the peers read (",
         reg_buffer != nullptr ? "reg_buffer" : "inp", "); use a separate output tensor");
  }
  LaunchArgs a{};
  for (int r = 0; r < world_; ++r) a.peers[r] = signals_[r];
  a.self = signals_[rank_];
  a.inputs = table;
  a.in = inp;
  a.out = out;
  a.packs = bytes / 16;
  a.rank = rank_;
  a.world = world_;
  a.algo = algo;
  const int64_t per_block_packs = a.algo == Algo::kTwoShot ? (a.packs + world_ - 1) / world_ : a.packs;
  a.blocks = static_cast<int>(std::min<int64_t>(max_blocks_, (per_block_packs + kThreads - 1) / kThreads));
  a.dtype = dtype;
  a.timeout_ns = timeout_ns_;
  a.error = error_device_;
#if SGL_KERNEL_HAS_ALLREDUCE
  cuda_ok(op, launch_all_reduce(a, stream), "launching the all-reduce kernel");
#else
  fail(op, "this build holds no all-reduce kernels (no CUDA arch >= sm_80 in SGL_KERNEL_CUDA_ARCHS)");
#endif
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> Comm::graph_buffer_ipc_meta() {
  const char* op = "get_graph_buffer_ipc_meta";
  std::vector<int64_t> handles;
  std::vector<int64_t> offsets;
  handles.reserve(recorded_.size() * CUDA_IPC_HANDLE_SIZE);
  for (const auto& [ptr, slot] : recorded_) {
    void* base = allocation_base(op, ptr);
    cudaIpcMemHandle_t h{};
    const cudaError_t err = cudaIpcGetMemHandle(&h, base);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail(op, "cudaIpcGetMemHandle failed for a buffer recorded during capture: ", cudaGetErrorString(err),
           " (CUDA IPC needs memory from cudaMalloc; PyTorch's expandable_segments allocator "
           "(PYTORCH_CUDA_ALLOC_CONF) cannot share its memory this way)");
    }
    {
      const std::lock_guard<std::mutex> lock(g_local_mutex);
      g_local_handles[handle_key(h)] = base;
    }
    for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; ++i) handles.push_back(static_cast<unsigned char>(h.reserved[i]));
    offsets.push_back(static_cast<int64_t>(reinterpret_cast<const char*>(ptr) - static_cast<const char*>(base)));
  }
  return {std::move(handles), std::move(offsets)};
}

void* Comm::open_handle(const std::string& key) {
  const auto it = opened_.find(key);
  if (it != opened_.end()) return it->second;
  {
    const std::lock_guard<std::mutex> lock(g_local_mutex);
    const auto local = g_local_handles.find(key);
    if (local != g_local_handles.end()) return local->second;
  }
  cudaIpcMemHandle_t h{};
  std::memcpy(h.reserved, key.data(), CUDA_IPC_HANDLE_SIZE);
  void* ptr = nullptr;
  cuda_ok("register_graph_buffers", cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle of a peer's graph buffer");
  opened_[key] = ptr;
  return ptr;
}

void Comm::register_graph_buffers(const std::vector<std::vector<int64_t>>& handles,
                                  const std::vector<std::vector<int64_t>>& offsets) {
  const char* op = "register_graph_buffers";
  const size_t n = recorded_.size();
  if (static_cast<int>(handles.size()) != world_ || static_cast<int>(offsets.size()) != world_) {
    fail(op, "expects handles and offsets from every rank (", world_, "), got ", handles.size(), " and ",
         offsets.size());
  }
  for (int r = 0; r < world_; ++r) {
    if (handles[r].size() != n * CUDA_IPC_HANDLE_SIZE || offsets[r].size() != n) {
      fail(op, "rank ", r, " sent ", handles[r].size(), " handle bytes and ", offsets[r].size(),
           " offsets, but this rank recorded ", n, " buffers during capture (", n * CUDA_IPC_HANDLE_SIZE,
           " bytes); every rank must capture the same all_reduce calls");
    }
  }
  std::vector<RankPtrs> tables(n);
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) {
        tables[i].ptr[r] = recorded_[i].first;
        continue;
      }
      std::string key(CUDA_IPC_HANDLE_SIZE, '\0');
      for (int j = 0; j < CUDA_IPC_HANDLE_SIZE; ++j) {
        const int64_t byte = handles[r][i * CUDA_IPC_HANDLE_SIZE + j];
        if (byte < 0 || byte > 255) fail(op, "handles[", r, "] holds ", byte, ", not a byte value");
        key[j] = static_cast<char>(byte);
      }
      tables[i].ptr[r] = static_cast<const char*>(open_handle(key)) + offsets[r][i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    cuda_ok(op, cudaMemcpy(recorded_[i].second, &tables[i], sizeof(RankPtrs), cudaMemcpyHostToDevice),
            "copying the pointer table");
    buffers_[recorded_[i].first] = recorded_[i].second;
  }
  recorded_.clear();
}

namespace {
std::mutex g_table_mutex;
std::unordered_map<int64_t, std::unique_ptr<Comm>> g_table;
int64_t g_next_id = 1;
}  // namespace

int64_t create_comm(int device, const std::vector<int64_t>& signals, void* rank_data, int64_t rank_data_bytes,
                    int rank, bool full_nvlink) {
  auto comm = std::make_unique<Comm>(device, signals, rank_data, rank_data_bytes, rank, full_nvlink);
  const std::lock_guard<std::mutex> lock(g_table_mutex);
  const int64_t id = g_next_id++;
  g_table.emplace(id, std::move(comm));
  return id;
}

Comm& lookup_comm(const char* op, int64_t fa) {
  const std::lock_guard<std::mutex> lock(g_table_mutex);
  const auto it = g_table.find(fa);
  if (it == g_table.end()) fail(op, "fa=", fa, " is an unknown or disposed handle (init_custom_ar returns handles)");
  return *it->second;
}

void destroy_comm(int64_t fa) {
  std::unique_ptr<Comm> comm;
  {
    const std::lock_guard<std::mutex> lock(g_table_mutex);
    const auto it = g_table.find(fa);
    if (it == g_table.end()) fail("dispose", "fa=", fa, " is an unknown or already disposed handle");
    comm = std::move(it->second);
    g_table.erase(it);
  }
}

}  // namespace sgl_kernel::allreduce
