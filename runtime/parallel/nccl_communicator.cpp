#include "runtime/parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
// NCCL 2.28's device API (device_window): its structures have no version field before 2.29,
// so only 2.28 headers are used, and only with a 2.28 library (checked at run time).
#if NCCL_VERSION_CODE >= 22800 && NCCL_VERSION_CODE < 22900 && __has_include(<nccl_device.h>)
#define WEFT_NCCL_DEVICE_API 1
#include <nccl_device.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/log.hpp"

namespace weft::parallel {
namespace {

// NCCL is opened when a group is made (dlopen), not linked: a Weft built with NCCL still
// starts on a machine without it, and says so only when asked for tensor parallelism on GPUs.
// $WEFT_NCCL_LIBRARY names the library to open; else libnccl.so.2 on the loader's path
// (LD_LIBRARY_PATH: e.g. /usr/local/cuda/lib64, or the nvidia/nccl/lib of a PyTorch install).
struct NcclApi {
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  std::string error;  // why it could not be opened; empty when every entry above is set
  // Optional: absent from older releases (ncclMemAlloc and ncclCommRegister came in 2.19,
  // windows in 2.27); collective_memory falls back to the caller's memory without them.
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclMemAlloc) mem_alloc = nullptr;
  decltype(&ncclMemFree) mem_free = nullptr;
  decltype(&ncclCommRegister) comm_register = nullptr;
  decltype(&ncclCommDeregister) comm_deregister = nullptr;
  decltype(&ncclCommWindowRegister) window_register = nullptr;
  decltype(&ncclCommWindowDeregister) window_deregister = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
#if defined(WEFT_NCCL_DEVICE_API)
  // The device API (2.28): device_window.
  decltype(&ncclDevCommCreate) dev_comm_create = nullptr;
  decltype(&ncclDevCommDestroy) dev_comm_destroy = nullptr;
  decltype(&ncclLsaBarrierCreateRequirement) lsa_barrier_requirement = nullptr;
  ncclTeam_t (*team_lsa)(ncclComm_t) = nullptr;  // the host ncclTeamLsa
  std::string device_api_symbols = "C symbols";  // or "C++ symbols" (early 2.28 releases)
#endif
  int version = 0;  // ncclGetVersion's code (22809 for 2.28.9); 0 when unknown
};

// "2.28.9" from ncclGetVersion's code (NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z
// after).
std::string version_text(int code) {
  if (code <= 0) return "(version unknown)";
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    const char* named = std::getenv("WEFT_NCCL_LIBRARY");
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {named, "libnccl.so.2", "libnccl.so"}) {
      if (name == nullptr || *name == '\0') continue;
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
    }
    if (lib == nullptr) {
      a.error = "cannot open the NCCL library (" + tried +
                "): install NCCL, add its folder to LD_LIBRARY_PATH or set WEFT_NCCL_LIBRARY";
      return a;
    }
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && a.error.empty()) a.error = std::string("NCCL has no ") + symbol;
    };
    bind(a.get_error_string, "ncclGetErrorString");
    bind(a.get_unique_id, "ncclGetUniqueId");
    bind(a.comm_init_rank, "ncclCommInitRank");
    bind(a.comm_destroy, "ncclCommDestroy");
    bind(a.all_reduce, "ncclAllReduce");
    bind(a.all_gather, "ncclAllGather");
    bind(a.broadcast, "ncclBroadcast");
    bind(a.send, "ncclSend");
    bind(a.recv, "ncclRecv");
    bind(a.group_start, "ncclGroupStart");
    bind(a.group_end, "ncclGroupEnd");
    auto bind_optional = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    };
    bind_optional(a.get_version, "ncclGetVersion");
    bind_optional(a.mem_alloc, "ncclMemAlloc");
    bind_optional(a.mem_free, "ncclMemFree");
    bind_optional(a.comm_register, "ncclCommRegister");
    bind_optional(a.comm_deregister, "ncclCommDeregister");
    bind_optional(a.window_register, "ncclCommWindowRegister");
    bind_optional(a.window_deregister, "ncclCommWindowDeregister");
    bind_optional(a.get_last_error, "ncclGetLastError");
#if defined(WEFT_NCCL_DEVICE_API)
    // Declared extern "C" in the 2.28.9 headers; early 2.28 headers declared them as C++
    // functions, so their mangled names are tried too (the same arguments either way).
    auto bind_either = [&](auto& fn, const char* symbol, const char* mangled) {
      bind_optional(fn, symbol);
      if (fn == nullptr) {
        bind_optional(fn, mangled);
        if (fn != nullptr) a.device_api_symbols = "C++ symbols";
      }
    };
    bind_either(a.dev_comm_create, "ncclDevCommCreate",
                "_Z17ncclDevCommCreateP8ncclCommPK23ncclDevCommRequirementsP11ncclDevComm");
    bind_either(a.dev_comm_destroy, "ncclDevCommDestroy",
                "_Z18ncclDevCommDestroyP8ncclCommPK11ncclDevComm");
    bind_either(
        a.lsa_barrier_requirement, "ncclLsaBarrierCreateRequirement",
        "_Z31ncclLsaBarrierCreateRequirement8ncclTeamiP20ncclLsaBarrierHandleP27ncclDevResour"
        "ceRequirements");
    bind_either(a.team_lsa, "ncclTeamLsa", "_Z11ncclTeamLsaP8ncclComm");
#endif
    if (a.get_version != nullptr && a.get_version(&a.version) != ncclSuccess) a.version = 0;
    return a;
  }();
  return api;
}

Error nccl_error(const char* call, ncclResult_t rc) {
  return Error(ErrorCode::kIo, std::string("nccl ") + call + ": " + nccl().get_error_string(rc));
}
Error cuda_error(const char* call, cudaError_t rc) {
  return Error(ErrorCode::kIo, std::string("cuda ") + call + ": " + cudaGetErrorString(rc));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, ncclComm_t comm, int device, cudaStream_t stream)
      : bootstrap_(bootstrap), comm_(comm), device_(device), stream_(stream) {}
  // Registrations are local to the rank (NCCL's user guide), so a rank that leaves early does
  // not hold the others; the memory goes back after the communicator that mapped it.
  ~NcclCommunicator() override {
    if (!memory_.empty()) {
      cudaSetDevice(device_);
      cudaDeviceSynchronize();  // no collective still reads it
#if defined(WEFT_NCCL_DEVICE_API)
      for (const auto& d : device_comms_)
        nccl().dev_comm_destroy(comm_, &d->made.comm);
#endif
      for (const auto& m : memory_) {
        if (m.window != nullptr) nccl().window_deregister(comm_, m.window);
        if (m.handle != nullptr) nccl().comm_deregister(comm_, m.handle);
      }
    }
    nccl().comm_destroy(comm_);
    for (const auto& m : memory_)
      nccl().mem_free(m.data);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const noexcept override {
    return bootstrap_.rank();
  }
  int size() const noexcept override {
    return bootstrap_.size();
  }
  std::string name() const override {
    return "nccl";
  }
  bool device_buffers() const noexcept override {
    return true;
  }

  Result<void> all_reduce_sum(std::span<float> data) override {
    const auto rc = nccl().all_reduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum,
                                      comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllReduce", rc);
    return {};
  }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> data) override {
    const auto rc = nccl().all_reduce(data.data(), data.data(), data.size(), ncclBfloat16, ncclSum,
                                      comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllReduce (bf16)", rc);
    return {};
  }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    if (auto ok = check_gather_sizes(*this, mine.size(), all.size()); !ok) return ok;
    const auto rc =
        nccl().all_gather(mine.data(), all.data(), mine.size(), ncclFloat32, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclAllGather", rc);
    return {};
  }
  Result<void> broadcast(std::span<std::byte> data, int root) override {
    if (auto ok = check_root(*this, root); !ok) return ok;
    const auto rc =
        nccl().broadcast(data.data(), data.data(), data.size(), ncclUint8, root, comm_, stream_);
    if (rc != ncclSuccess) return nccl_error("ncclBroadcast", rc);
    return {};
  }
  Result<void> barrier() override {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) return cuda_error("cudaSetDevice", rc);
    if (auto rc = cudaStreamSynchronize(stream_); rc != cudaSuccess) {
      return cuda_error("cudaStreamSynchronize", rc);
    }
    return bootstrap_.barrier();
  }
  // ncclSend/ncclRecv, each in a group of its own, enqueued on the stream; bytes as ncclUint8.
  Result<void> send(std::span<const std::byte> data, int dest) override {
    if (auto ok = check_peer(*this, "send", dest); !ok) return ok;
    nccl().group_start();
    const auto rc = nccl().send(data.data(), data.size(), ncclUint8, dest, comm_, stream_);
    const auto end = nccl().group_end();
    if (rc != ncclSuccess) return nccl_error("ncclSend", rc);
    if (end != ncclSuccess) return nccl_error("ncclGroupEnd (send)", end);
    return {};
  }
  Result<void> recv(std::span<std::byte> data, int source) override {
    if (auto ok = check_peer(*this, "recv", source); !ok) return ok;
    nccl().group_start();
    const auto rc = nccl().recv(data.data(), data.size(), ncclUint8, source, comm_, stream_);
    const auto end = nccl().group_end();
    if (rc != ncclSuccess) return nccl_error("ncclRecv", rc);
    if (end != ncclSuccess) return nccl_error("ncclGroupEnd (recv)", end);
    return {};
  }
  Result<void> wait_sends() override {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) return cuda_error("cudaSetDevice", rc);
    if (auto rc = cudaStreamSynchronize(stream_); rc != cudaSuccess) {
      return cuda_error("cudaStreamSynchronize", rc);
    }
    return {};
  }
  // The split of the NCCL group follows the bootstrap's: a NCCL communicator over the members
  // with the same color, joined through the bootstrap's split.
  Result<std::unique_ptr<Communicator>> split(int color, int key) override;

  // ncclMemAlloc'd memory, registered as a symmetric window (NCCL 2.27+: small collectives on
  // it run NCCL's symmetric kernels, which on NVLink need no multicast) or as a user buffer
  // (ncclCommRegister). Each step that can fail on one rank only is followed by an agreement
  // over the bootstrap (MPI), so every rank returns the same outcome.
  Result<CollectiveMemory> collective_memory(std::size_t bytes, CollectiveMemoryKind kind) override;

  // A symmetric window (as above) and an NCCL device communicator with `barriers` LSA barriers
  // (ncclDevCommCreate), for kernels that read the other ranks' windows themselves.
  Result<DeviceWindow> device_window(std::size_t bytes, int barriers) override;

 private:
  // Whether every rank says `ok` (a min over the bootstrap); false when the vote itself fails.
  bool all_agree(bool ok) {
    float votes = ok ? 1.0f : 0.0f;
    if (!bootstrap_.all_reduce_sum(std::span<float>(&votes, 1))) return false;
    return votes == static_cast<float>(bootstrap_.size());
  }

  struct Memory {
    void* data = nullptr;
    ncclWindow_t window = nullptr;
    void* handle = nullptr;  // ncclCommRegister's
  };

#if defined(WEFT_NCCL_DEVICE_API)
  // ncclDevCommCreate's output with room to spare (a library of another 2.28 release may
  // write a longer structure), and the copy the kernels get: only the fields whose offsets
  // are the same in every 2.28 release (the ranks, the resource window and the start of its
  // inlined copy), the barrier handle set from ncclLsaBarrierCreateRequirement's output.
  struct DeviceComm {
    union Made {
      ncclDevComm comm;
      unsigned char bytes[sizeof(ncclDevComm) + 1024];
    } made;
    ncclDevComm kernels;
  };
  std::vector<std::unique_ptr<DeviceComm>> device_comms_;
#endif

  Communicator& bootstrap_;
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;
  std::vector<Memory> memory_;
};

// Whether the symmetric kernels of this NCCL need cuda::stream_fence before them: from 2.28 to
// 2.30.6 they are launched with programmatic dependent launch but do not wait for the kernel
// before them (restored in 2.30.7), so they can read an input that is not yet flushed.
// WEFT_TP_SYMMETRIC_FENCE=0 or 1 overrides, for measuring what the fence costs.
bool symmetric_fence_needed(int version) {
  if (const char* v = std::getenv("WEFT_TP_SYMMETRIC_FENCE"); v != nullptr && *v != '\0') {
    return std::strcmp(v, "0") != 0;
  }
  return version <= 0 || version < 23007;
}

Result<CollectiveMemory> NcclCommunicator::collective_memory(std::size_t bytes,
                                                             CollectiveMemoryKind kind) {
  const NcclApi& api = nccl();
  const bool symmetric = kind == CollectiveMemoryKind::kSymmetric;
  const std::string what = std::string("nccl collective memory (") +
                           collective_memory_kind_name(kind) + ", " + std::to_string(bytes) +
                           " bytes, NCCL " + version_text(api.version) + ")";
  if (kind == CollectiveMemoryKind::kPlain || bytes == 0) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": ask for registered or symmetric memory of at least one byte");
  }
  // Windows need 4 KB alignment (NCCL_WIN_REQUIRED_ALIGNMENT); ncclMemAlloc rounds further up
  // to the allocation granularity, so the rounded size is within the allocation.
  bytes = (bytes + 4095) / 4096 * 4096;
  std::string why;  // this rank's reason for falling back, if any
  if (api.mem_alloc == nullptr || api.mem_free == nullptr) {
    why = "this NCCL has no ncclMemAlloc (2.19 or later)";
  } else if (symmetric && (api.window_register == nullptr || api.window_deregister == nullptr)) {
    why = "this NCCL has no ncclCommWindowRegister (2.27 or later)";
  } else if (!symmetric && (api.comm_register == nullptr || api.comm_deregister == nullptr)) {
    why = "this NCCL has no ncclCommRegister (2.19 or later)";
  }
  Memory m;
  if (why.empty()) {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      why = std::string("cudaSetDevice: ") + cudaGetErrorString(rc);
    } else if (auto nrc = api.mem_alloc(&m.data, bytes); nrc != ncclSuccess) {
      why = std::string("ncclMemAlloc: ") + api.get_error_string(nrc);
      m.data = nullptr;
    }
  }
  auto give_up = [&](const std::string& reason) -> Error {
    if (m.window != nullptr) api.window_deregister(comm_, m.window);
    if (m.handle != nullptr) api.comm_deregister(comm_, m.handle);
    if (m.data != nullptr) api.mem_free(m.data);
    const std::string text = what + ": " + reason + "; using plain device memory";
    log_warn(text);
    return Error(ErrorCode::kUnsupported, text);
  };
  if (!all_agree(why.empty())) {
    return give_up(why.empty() ? "another rank could not allocate it" : why);
  }
  // Both registrations are made by every rank together (a window is a collective call).
  ncclResult_t rc = ncclSuccess;
  if (symmetric) {
    rc = api.window_register(comm_, m.data, bytes, &m.window, NCCL_WIN_COLL_SYMMETRIC);
    if (rc == ncclSuccess && m.window == nullptr) {
      why =
          "ncclCommWindowRegister returned no window (symmetric memory needs CUDA VMM: "
          "NCCL_CUMEM_ENABLE, NCCL_WIN_ENABLE)";
    }
  } else {
    rc = api.comm_register(comm_, m.data, bytes, &m.handle);
  }
  if (rc != ncclSuccess) {
    why = std::string(symmetric ? "ncclCommWindowRegister: " : "ncclCommRegister: ") +
          api.get_error_string(rc);
  }
  if (!all_agree(why.empty())) {
    return give_up(why.empty() ? "another rank could not register it" : why);
  }
  memory_.push_back(m);
  CollectiveMemory out;
  out.data = m.data;
  out.bytes = bytes;
  out.kind = kind;
  out.fence_before_collectives = symmetric && symmetric_fence_needed(api.version);
  out.description = std::string(symmetric ? "symmetric window (ncclMemAlloc + "
                                            "ncclCommWindowRegister"
                                          : "registered buffer (ncclMemAlloc + "
                                            "ncclCommRegister") +
                    "), NCCL " + version_text(api.version) +
                    (out.fence_before_collectives ? ", fenced" : "");
  if (bootstrap_.rank() == 0) {
    log_info("nccl: " + std::to_string(bytes) + " bytes as a " + out.description);
  }
  return out;
}

#if defined(WEFT_NCCL_DEVICE_API)
// What the CUDA runtime says `p` is: "device", "managed", "host (mapped)", "host" (pinned but
// at another device address: a kernel cannot read it there), "unregistered" (not known to
// CUDA: VMM memory on some drivers, or plain host memory), for the checks and the log.
std::string memory_type(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return "unknown";
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
      return "device";
    case cudaMemoryTypeManaged:
      return "managed";
    case cudaMemoryTypeHost:
      return a.devicePointer == p ? "host (mapped)" : "host";
    default:
      return "unregistered";
  }
}

Result<DeviceWindow> NcclCommunicator::device_window(std::size_t bytes, int barriers) {
  const NcclApi& api = nccl();
  const std::string what = "nccl device window (" + std::to_string(bytes) + " bytes, " +
                           std::to_string(barriers) + " LSA barriers, NCCL " +
                           version_text(api.version) + ", built with NCCL " +
                           version_text(NCCL_VERSION_CODE) + " headers)";
  if (bytes == 0 || barriers < 1) {
    return Error(ErrorCode::kInvalidArgument, what + ": ask for at least one byte and one barrier");
  }
  bytes = (bytes + 4095) / 4096 * 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT, as collective_memory
  // The reason this rank falls back, if any; the NCCL call's own message is appended.
  std::string why;
  auto failed = [&](const char* call, ncclResult_t rc) {
    why = std::string(call) + ": " + api.get_error_string(rc);
    const char* last = api.get_last_error != nullptr ? api.get_last_error(comm_) : nullptr;
    if (last != nullptr && *last != '\0') why += std::string(" (") + last + ")";
  };
  if (api.version / 100 != NCCL_VERSION_CODE / 100) {
    // 2.29 and later version these structures (size, magic, version first): a 2.28 build
    // would hand them the wrong layout.
    why = "the device API of this build is NCCL " + version_text(NCCL_VERSION_CODE) +
          "'s (2.28 structures, not versioned), the library is " + version_text(api.version);
  } else if (api.dev_comm_create == nullptr || api.dev_comm_destroy == nullptr ||
             api.lsa_barrier_requirement == nullptr || api.team_lsa == nullptr) {
    why =
        "this NCCL has no ncclDevCommCreate, ncclDevCommDestroy, ncclTeamLsa or "
        "ncclLsaBarrierCreateRequirement (2.28 or later)";
  } else if (api.mem_alloc == nullptr || api.window_register == nullptr ||
             api.window_deregister == nullptr) {
    why = "this NCCL has no ncclMemAlloc or ncclCommWindowRegister (2.27 or later)";
  }
  Memory m;
  auto made = std::make_unique<DeviceComm>();
  bool created = false;
  auto give_up = [&](const std::string& reason) -> Error {
    if (created) api.dev_comm_destroy(comm_, &made->made.comm);
    if (m.window != nullptr) api.window_deregister(comm_, m.window);
    if (m.data != nullptr) api.mem_free(m.data);
    const std::string text = what + ": " + reason;
    log_warn(text);
    return Error(ErrorCode::kUnsupported, text);
  };
  if (why.empty()) {
    if (auto rc = cudaSetDevice(device_); rc != cudaSuccess) {
      why = std::string("cudaSetDevice: ") + cudaGetErrorString(rc);
    } else if (auto nrc = api.mem_alloc(&m.data, bytes); nrc != ncclSuccess) {
      failed("ncclMemAlloc", nrc);
      m.data = nullptr;
    } else if (auto zero = cudaMemset(m.data, 0, bytes); zero != cudaSuccess) {
      why = std::string("cudaMemset: ") + cudaGetErrorString(zero);
    }
  }
  if (!all_agree(why.empty())) return give_up(why.empty() ? "another rank failed" : why);
  if (auto rc = api.window_register(comm_, m.data, bytes, &m.window, NCCL_WIN_COLL_SYMMETRIC);
      rc != ncclSuccess) {
    failed("ncclCommWindowRegister", rc);
    m.window = nullptr;
  } else if (m.window == nullptr) {
    why =
        "ncclCommWindowRegister returned no window (symmetric memory needs CUDA VMM: "
        "NCCL_CUMEM_ENABLE, NCCL_WIN_ENABLE)";
  }
  if (!all_agree(why.empty())) return give_up(why.empty() ? "another rank failed" : why);
  // The barriers as a resource requirement of our own (not ncclDevCommRequirements'
  // lsaBarrierCount, whose handle lands at an offset of ncclDevComm that moved within 2.28):
  // the handle is ours, and the kernels pass it to the barrier session themselves. The
  // requirement structures are zeroed with room to spare, as the library writes them.
  const ncclTeam_t team = api.team_lsa(comm_);
  union {
    ncclDevResourceRequirements req;
    unsigned char bytes[sizeof(ncclDevResourceRequirements) + 256];
  } resource{};
  union {
    ncclDevCommRequirements req;
    unsigned char bytes[sizeof(ncclDevCommRequirements) + 256];
  } reqs{};
  std::memset(resource.bytes, 0, sizeof resource.bytes);
  std::memset(reqs.bytes, 0, sizeof reqs.bytes);
  ncclLsaBarrierHandle handle{};
  constexpr std::uint32_t kUnset = 0xFFFFFFFFu;
  handle.bufHandle = kUnset;
  if (team.nRanks != size() || team.rank != rank()) {
    why = "the ranks are not all load/store accessible (NCCL's LSA team has " +
          std::to_string(team.nRanks) + " ranks, this rank is " + std::to_string(team.rank) +
          " in it; the group has " + std::to_string(size()) + ")";
  } else if (auto rc = api.lsa_barrier_requirement(team, barriers, &handle, &resource.req);
             rc != ncclSuccess) {
    failed("ncclLsaBarrierCreateRequirement", rc);
  } else {
    if (resource.req.outBufferHandle == nullptr) resource.req.outBufferHandle = &handle.bufHandle;
    reqs.req.resourceRequirementsList = &resource.req;
  }
  if (!all_agree(why.empty())) return give_up(why.empty() ? "another rank failed" : why);
  std::memset(made->made.bytes, 0, sizeof made->made.bytes);
  if (auto rc = api.dev_comm_create(comm_, &reqs.req, &made->made.comm); rc != ncclSuccess) {
    failed("ncclDevCommCreate", rc);
  } else {
    created = true;
    const ncclDevComm& c = made->made.comm;
    const auto* rw = &c.resourceWindow_inlined;
    if (c.rank != rank() || c.nRanks != size() || c.lsaRank != rank() || c.lsaSize != size()) {
      why = "ncclDevCommCreate's output names rank " + std::to_string(c.rank) + " of " +
            std::to_string(c.nRanks) + ", LSA rank " + std::to_string(c.lsaRank) + " of " +
            std::to_string(c.lsaSize) + " (expected " + std::to_string(rank()) + " of " +
            std::to_string(size()) + "): its layout is not this build's";
    } else if (handle.bufHandle == kUnset || handle.nBarriers != barriers) {
      why = "ncclDevCommCreate left the barriers' handle unset (buffer " +
            std::to_string(handle.bufHandle) + ", " + std::to_string(handle.nBarriers) +
            " barriers)";
    } else if (c.resourceWindow == nullptr || rw->lsaFlatBase == nullptr) {
      why = "ncclDevCommCreate's output has no resource window";
    } else if (memory_type(m.window) == "host" || memory_type(c.resourceWindow) == "host") {
      // The kernels read both descriptors (ncclGetLsaPointer, the barrier's resource buffer).
      why =
          "the window's or the resource window's descriptor is host memory the GPU cannot "
          "read at that address";
    }
  }
  if (!all_agree(why.empty())) return give_up(why.empty() ? "another rank failed" : why);
  // The kernels' copy: the stable fields only, everything else zero.
  ncclDevComm& k = made->kernels;
  std::memset(&k, 0, sizeof k);
  const ncclDevComm& c = made->made.comm;
  k.rank = c.rank;
  k.nRanks = c.nRanks;
  k.nRanks_rcp32 = c.nRanks_rcp32;
  k.lsaRank = c.lsaRank;
  k.lsaSize = c.lsaSize;
  k.lsaSize_rcp32 = c.lsaSize_rcp32;
  k.windowTable = c.windowTable;
  k.resourceWindow = c.resourceWindow;
  k.resourceWindow_inlined.winHost = c.resourceWindow_inlined.winHost;
  k.resourceWindow_inlined.lsaFlatBase = c.resourceWindow_inlined.lsaFlatBase;
  k.resourceWindow_inlined.lsaRank = c.resourceWindow_inlined.lsaRank;
  k.resourceWindow_inlined.worldRank = c.resourceWindow_inlined.worldRank;
  k.resourceWindow_inlined.stride4G = c.resourceWindow_inlined.stride4G;
  k.resourceWindow_inlined.mcOffset4K = c.resourceWindow_inlined.mcOffset4K;
  k.lsaBarrier = handle;
  memory_.push_back(m);
  DeviceWindow out;
  out.data = m.data;
  out.bytes = bytes;
  out.window = m.window;
  out.dev_comm = &made->kernels;
  out.barrier_buffer = handle.bufHandle;
  out.barriers = handle.nBarriers;
  out.description = "symmetric window (ncclMemAlloc + ncclCommWindowRegister) and " +
                    std::to_string(barriers) + " LSA barriers (ncclDevCommCreate), NCCL " +
                    version_text(api.version) + " (headers " + version_text(NCCL_VERSION_CODE) +
                    ", " + api.device_api_symbols + "; descriptors in " + memory_type(m.window) +
                    " memory)";
  device_comms_.push_back(std::move(made));
  if (bootstrap_.rank() == 0)
    log_info("nccl: " + std::to_string(bytes) + " bytes as a " + out.description);
  return out;
}
#else
Result<DeviceWindow> NcclCommunicator::device_window(std::size_t bytes, int barriers) {
  (void)bytes;
  (void)barriers;
  return Error(ErrorCode::kUnsupported,
               "nccl device window: this build has no NCCL 2.28 device headers (nccl_device.h), "
               "built with NCCL " +
                   version_text(NCCL_VERSION_CODE));
}
#endif

// A split NCCL communicator together with the host communicator it was bootstrapped over (the
// NCCL one refers to it, so it is destroyed first).
class OwningBootstrap final : public Communicator {
 public:
  OwningBootstrap(std::unique_ptr<Communicator> bootstrap, std::unique_ptr<Communicator> nccl)
      : bootstrap_(std::move(bootstrap)), nccl_(std::move(nccl)) {}
  ~OwningBootstrap() override { nccl_.reset(); }
  int rank() const noexcept override { return nccl_->rank(); }
  int size() const noexcept override { return nccl_->size(); }
  std::string name() const override { return nccl_->name(); }
  bool device_buffers() const noexcept override { return true; }
  Result<void> all_reduce_sum(std::span<float> d) override { return nccl_->all_reduce_sum(d); }
  Result<void> all_reduce_sum_bf16(std::span<std::uint16_t> d) override {
    return nccl_->all_reduce_sum_bf16(d);
  }
  Result<void> all_gather(std::span<const float> mine, std::span<float> all) override {
    return nccl_->all_gather(mine, all);
  }
  Result<void> broadcast(std::span<std::byte> d, int root) override {
    return nccl_->broadcast(d, root);
  }
  Result<void> barrier() override { return nccl_->barrier(); }
  Result<void> send(std::span<const std::byte> d, int dest) override {
    return nccl_->send(d, dest);
  }
  Result<void> recv(std::span<std::byte> d, int source) override { return nccl_->recv(d, source); }
  Result<void> wait_sends() override { return nccl_->wait_sends(); }
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    return nccl_->split(color, key);
  }
  Result<CollectiveMemory> collective_memory(std::size_t bytes,
                                             CollectiveMemoryKind kind) override {
    return nccl_->collective_memory(bytes, kind);
  }
  Result<DeviceWindow> device_window(std::size_t bytes, int barriers) override {
    return nccl_->device_window(bytes, barriers);
  }

 private:
  std::unique_ptr<Communicator> bootstrap_;
  std::unique_ptr<Communicator> nccl_;
};

Result<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key) {
  auto part = bootstrap_.split(color, key);
  if (!part) return part.error();
  auto made = make_nccl_communicator(**part, device_, stream_);
  if (!made) return made.error();
  return std::unique_ptr<Communicator>(
      std::make_unique<OwningBootstrap>(std::move(*part), std::move(*made)));
}

}  // namespace

bool nccl_available(std::string* why) {
  if (why != nullptr) *why = nccl().error;
  return nccl().error.empty();
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap,
                                                             int cuda_device, void* cuda_stream) {
  if (bootstrap.device_buffers()) {
    return Error(
        ErrorCode::kInvalidArgument,
        "nccl: the bootstrap communicator must use host buffers (MPI), not " + bootstrap.name());
  }
  // Without NCCL, this rank says so before any collective; the caller ends the group (ranks
  // that could open it wait in the broadcast below: MPI_Abort, as for any one-rank failure).
  if (!nccl().error.empty()) return Error(ErrorCode::kUnsupported, nccl().error);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) {
    if (auto rc = nccl().get_unique_id(&id); rc != ncclSuccess) {
      return nccl_error("ncclGetUniqueId", rc);
    }
  }
  auto sent = bootstrap.broadcast(
      std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id), /*root=*/0);
  if (!sent) return sent.error();
  if (auto rc = cudaSetDevice(cuda_device); rc != cudaSuccess) {
    return cuda_error("cudaSetDevice", rc);
  }
  ncclComm_t comm = nullptr;
  if (auto rc = nccl().comm_init_rank(&comm, bootstrap.size(), id, bootstrap.rank());
      rc != ncclSuccess) {
    return nccl_error("ncclCommInitRank", rc);
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
      bootstrap, comm, cuda_device, static_cast<cudaStream_t>(cuda_stream)));
}

}  // namespace weft::parallel
