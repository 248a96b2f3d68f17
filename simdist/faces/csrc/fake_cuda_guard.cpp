// A stand-in CUDA DeviceGuardImpl for CPU-only builds of PyTorch, so autograd can run on simdist's
// CUDA-typed SimTensors (autograd records each input's device and stream through this interface; a CPU
// build has none for CUDA and the process aborts).
//
// When the library loads it registers only a reducer timer for CUDA (for torch DDP's logger, below), which a CPU
// build has none of and nothing else uses. No guard is registered when it loads. simdist_guard_set_enabled(1), called while a simdist run
// is installed (simdist/patches.py), stores the impl into torch's CUDA slot of the device-guard registry,
// and only when that slot is empty (never over a real CUDA build's impl; simdist/guard.py does not even
// build this on such builds); simdist_guard_set_enabled(0) empties the slot again, so outside a run
// getDeviceGuardImpl(CUDA) throws exactly as before. The impl itself is gated by the same flag, for
// pointers torch cached while it was in (e.g. a c10::Event made inside a run): disabled, every throwing
// method raises the c10::Error a CPU build raises ("PyTorch is not linked with support for cuda
// devices"); deviceCount() (noexcept) answers 0; setDevice only records the thread-local index (the
// autograd engine's device threads call it as they start, where an exception would end the process).
//
// Enabled, the impl keeps a thread-local current device and reports 64 devices. Its streams and events are
// simdist's, through callbacks simdist/faces/guard_events.py registers (simdist_guard_set_callbacks): a c10::Stream's
// id is the simulated stream's own id (simdist/engine/streams.py), so what torch's C++ records per tensor is the
// stream that was current in the rank when it ran, as on a GPU. Autograd keeps, for every node, the stream current
// when its forward op ran, makes it current while the node's backward runs (exchangeStream) and joins streams
// with events where producer and consumer differ (torch/csrc/autograd/engine.cpp, input_buffer.cpp): simdist
// sees those as stream switches, markers and waits on its simulated streams. A pool stream
// (getStreamFromGlobalPool: a CUDA Future runs its callbacks on one) is a stream of the device's pool that
// torch.cuda.Stream() takes from; id 0 is "the rank's current stream" (a Stream named outside a rank, or before
// the rank had a device). What C++ code records and waits (a CUDA
// ivalue::Future's events, which DDP's Reducer waits in C++; torch.Event) becomes markers and waits on simulated
// streams. Without callbacks every stream is id 0 and events are no-ops.
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <Python.h>

#include <atomic>
#include <typeinfo>

namespace {

std::atomic<bool> g_enabled{false};
// Events recorded through this impl (a c10::Event's first record) and not yet destroyed. A C++ object made in a run
// can outlive it holding some: a CUDA ivalue::Future destroys its events under c10::OptionalDeviceGuard
// (ATen/core/ivalue_inl.h ~Future), which asks the registry for the CUDA guard and exchanges the device; torch DDP's
// Reducer keeps such Futures (notes b2). While any lives after a run the impl stays in the slot, "draining": the
// device exchange of such a guard only records the index, every other method raises as disabled, and the slot is
// emptied when the last of them is destroyed.
std::atomic<int64_t> g_live_events{0};
std::atomic<bool> g_draining{false};
void release_slot();  // empties torch's CUDA slot of the registry if it holds this impl (below)
thread_local c10::DeviceIndex t_device = 0;
thread_local bool t_rank_thread = false;  // a simulated rank's thread (simdist_guard_set_device was called on it)
constexpr c10::DeviceIndex kDeviceCount = 64;

// simdist's side of streams and events (never throw: each returns a plain value)
struct Callbacks {
  int64_t (*record)(int64_t event, int device, int64_t stream);  // returns the event's id (a new one for 0)
  void (*block)(int64_t event, int device, int64_t stream);
  int (*query)(int64_t event);
  void (*synchronize_event)(int64_t event);
  void (*destroy)(int64_t event);
  void (*exchange)(int device, int64_t stream);  // the rank's current stream on `device` becomes stream `stream`
  void (*synchronize_device)(int device);
  int64_t (*current)(int device, int which);  // the id of the rank's current (which=0) or default (1) stream
  void (*record_data)(const void* key, int device, int64_t stream);  // record_stream of the storage at `key`
  int64_t (*pool)(int device, int priority);  // the device's next pool stream (the pool torch.cuda.Stream() takes from)
  void (*device)(int index);  // torch's C++ made `index` the current device of the calling rank thread
};
std::atomic<const Callbacks*> g_callbacks{nullptr};

inline const Callbacks* callbacks() { return g_callbacks.load(std::memory_order_acquire); }

// Calls a simdist callback with any pending Python error set aside: torch's C++ can call the guard while an
// exception from Python unwinds (a tensor hook that raised: python_hook.cpp throws with the error indicator still
// set, and the node's stream guard restores its stream on the way out), and a ctypes callback run with an error
// set fails at its first C call (SystemError), which would replace the program's own exception.
template <typename F>
inline auto preserving_error(F f) -> decltype(f()) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  struct Restore {
    PyObject *t, *v, *b;
    PyGILState_STATE g;
    ~Restore() {
      PyErr_Restore(t, v, b);
      PyGILState_Release(g);
    }
  } restore{type, value, tb, gil};
  return f();
}
inline int64_t event_id(void* event) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(event)); }
inline c10::Stream stream_of(c10::Device d, int64_t id) { return c10::Stream(c10::Stream::UNSAFE, d, id); }
inline c10::Stream pool_stream(c10::Device d, int priority) {
  auto cb = callbacks();
  int64_t id = cb ? preserving_error([&] { return cb->pool(d.index() >= 0 ? d.index() : t_device, priority); }) : 0;
  return stream_of(d, id);
}
// The answers of callbacks()->current, cached per thread until simdist changes any rank's current streams or
// devices (simdist_guard_streams_changed bumps the epoch): autograd asks for every tensor it records.
std::atomic<uint64_t> g_epoch{1};
thread_local int64_t t_answer[2][kDeviceCount] = {};
thread_local uint64_t t_answer_epoch[2][kDeviceCount] = {};
inline int64_t rank_stream(c10::DeviceIndex i, int which) {
  auto cb = callbacks();
  if (!cb) return 0;
  if (i < 0 || i >= kDeviceCount) return preserving_error([&] { return cb->current(i, which); });
  uint64_t e = g_epoch.load(std::memory_order_acquire);
  if (t_answer_epoch[which][i] != e) {
    t_answer[which][i] = preserving_error([&] { return cb->current(i, which); });
    t_answer_epoch[which][i] = e;
  }
  return t_answer[which][i];
}

inline void check_enabled() {
  TORCH_CHECK(g_enabled.load(std::memory_order_relaxed), "PyTorch is not linked with support for ",
              c10::DeviceType::CUDA, " devices");
}

// A device switch made by torch's C++ (the autograd engine's guard around a node of another device, and its
// restore) is the rank's too: simdist keeps the rank's current device in Python, where its ops look. Only on rank
// threads: the engine's own device threads set their device as they start, outside any rank.
inline void switch_device(c10::DeviceIndex i) {
  if (i < 0 || i == t_device) return;
  t_device = i;
  if (!t_rank_thread || !g_enabled.load(std::memory_order_relaxed)) return;
  if (auto cb = callbacks()) preserving_error([&] { cb->device(i); });
}

struct SimdistCudaGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }

  c10::Device exchangeDevice(c10::Device d) const override {
    if (!g_draining.load(std::memory_order_relaxed)) check_enabled();
    c10::Device old(c10::DeviceType::CUDA, t_device);
    switch_device(d.index());
    return old;
  }
  c10::Device getDevice() const override {
    if (!g_draining.load(std::memory_order_relaxed)) check_enabled();
    return c10::Device(c10::DeviceType::CUDA, t_device);
  }
  void setDevice(c10::Device d) const override { switch_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { switch_device(d.index()); }
  c10::Stream getStream(c10::Device d) const override {
    check_enabled();
    return stream_of(d, rank_stream(d.index() >= 0 ? d.index() : t_device, 0));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    check_enabled();
    return stream_of(d, rank_stream(d.index() >= 0 ? d.index() : t_device, 1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    check_enabled();
    return pool_stream(d, isHighPriority ? -1 : 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    check_enabled();
    return pool_stream(d, priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    check_enabled();
    c10::DeviceIndex i = s.device_index() >= 0 ? s.device_index() : t_device;
    int64_t old = rank_stream(i, 0);
    if (old != s.id()) {
      if (auto cb = callbacks()) {
        preserving_error([&] { cb->exchange(i, s.id()); });  // (bumps the epoch)
        if (i >= 0 && i < kDeviceCount && s.id() != 0) {
          t_answer[0][i] = s.id();
          t_answer_epoch[0][i] = g_epoch.load(std::memory_order_acquire);
        }
      }
    }
    return stream_of(s.device(), old);
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (!event) return;
    if (g_enabled.load(std::memory_order_relaxed))
      if (auto cb = callbacks()) preserving_error([&] { cb->destroy(event_id(event)); });
    if (g_live_events.fetch_sub(1) == 1 && g_draining.load()) release_slot();
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {
    check_enabled();
    if (auto cb = callbacks()) {
      int64_t id = preserving_error([&] { return cb->record(event_id(*event), stream.device_index(), stream.id()); });
      if (*event == nullptr && id != 0) g_live_events.fetch_add(1);
      *event = reinterpret_cast<void*>(static_cast<intptr_t>(id));
    }
  }
  void block(void* event, const c10::Stream& stream) const override {
    check_enabled();
    if (auto cb = callbacks(); cb && event)
      preserving_error([&] { cb->block(event_id(event), stream.device_index(), stream.id()); });
  }
  bool queryEvent(void* event) const override {
    check_enabled();
    auto cb = callbacks();
    return !(cb && event) || preserving_error([&] { return cb->query(event_id(event)); }) != 0;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_enabled.load(std::memory_order_relaxed) ? kDeviceCount : 0;
  }
  bool queryStream(const c10::Stream& /*stream*/) const override {
    check_enabled();
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    check_enabled();
    if (auto cb = callbacks()) {
      preserving_error([&] {
        int64_t id = cb->record(0, stream.device_index(), stream.id());
        cb->synchronize_event(id);
        cb->destroy(id);
      });
    }
  }
  void synchronizeEvent(void* event) const override {
    check_enabled();
    if (auto cb = callbacks(); cb && event) preserving_error([&] { cb->synchronize_event(event_id(event)); });
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_enabled();
    if (auto cb = callbacks()) preserving_error([&] { cb->synchronize_device(device_index); });
  }
  // Tensor.record_stream as autograd's InputBuffer does it for a gradient used on another stream
  // (record_stream_any_impl): a simulated tensor's C++ storage holds no data, so the DataPtr's address (a member
  // of the StorageImpl, one per tensor) names it; simdist maps it back to the tensor (guard_events.py).
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    if (auto cb = callbacks())
      preserving_error([&] { cb->record_data(&data_ptr, stream.device_index(), stream.id()); });
  }
};

// at::getAccelerator(), which autograd asks for the device type whose streams it tracks (InputBuffer::add
// asks that accelerator's current stream for every CUDA gradient), reports CUDA only when the CUDA hooks say
// isBuilt(). A CPU build's CUDA hooks are the default CUDAHooksInterface, created once when torch._C is
// imported (before simdist can register any), so they cannot be replaced through the registry. Instead,
// while enabled, that one hooks object is given this class's vtable (the class adds no data members, so it
// is the same object with three answers changed), and the original vtable is put back when disabled.
struct SimdistCudaHooks final : public at::CUDAHooksInterface {
  bool isBuilt() const override { return g_enabled.load(std::memory_order_relaxed); }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    if (g_enabled.load(std::memory_order_relaxed)) return device_index >= 0 && device_index < kDeviceCount;
    return at::CUDAHooksInterface::hasPrimaryContext(device_index);
  }
  c10::DeviceIndex deviceCount() const override {
    return g_enabled.load(std::memory_order_relaxed) ? kDeviceCount : at::CUDAHooksInterface::deviceCount();
  }
};
static_assert(sizeof(SimdistCudaHooks) == sizeof(at::CUDAHooksInterface), "the hooks must add no data");

void* g_default_hooks_vptr = nullptr;

// Gives torch's CUDA hooks object this class's vtable (on) or its own back (off). False when the object is
// not the default CUDAHooksInterface (a CUDA build's real hooks: left alone).
bool swap_hooks(bool on) {
  auto& hooks = const_cast<at::CUDAHooksInterface&>(at::detail::getCUDAHooks());
  void** vptr_slot = reinterpret_cast<void**>(&hooks);
  static const SimdistCudaHooks model;
  void* ours = *reinterpret_cast<void* const*>(&model);
  void* cur = __atomic_load_n(vptr_slot, __ATOMIC_SEQ_CST);
  if (cur != ours) {
    if (typeid(hooks) != typeid(at::CUDAHooksInterface)) return false;
    g_default_hooks_vptr = cur;
  }
  void* want = on ? ours : g_default_hooks_vptr;
  if (want != nullptr) __atomic_store_n(vptr_slot, want, __ATOMIC_SEQ_CST);
  return true;
}

SimdistCudaGuardImpl* impl() {
  static SimdistCudaGuardImpl* p = new SimdistCudaGuardImpl();  // leaked on purpose, like torch's own impls
  return p;
}

std::atomic<const c10::impl::DeviceGuardImplInterface*>& cuda_slot() {
  return c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::DeviceType::CUDA)];
}

void release_slot() {
  g_draining.store(false);
  const c10::impl::DeviceGuardImplInterface* expected = impl();
  cuda_slot().compare_exchange_strong(expected, nullptr);
}

}  // namespace

// torch DDP's Reducer makes a timer for its parameters' device type (c10d::TimerRegistry); a CPU build of torch
// registers none for CUDA and DDP's logger then fails an internal assert at the first forward. This host-clock
// timer (the CPU timer's behaviour) is what a simulated CUDA device gets; it only serves DDP's logging.
namespace c10d {
namespace {
struct SimdistCudaTimer final : public Timer {
  explicit SimdistCudaTimer(c10::Device /* unused */) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t a = getTimeRef(start), b = getTimeRef(end);
    if (a == kUnsetTime || b == kUnsetTime || b < a) return std::nullopt;
    return b - a;
  }
};
}  // namespace
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kCUDA, SimdistCudaTimer);
}  // namespace c10d

extern "C" {
// on != 0: put the impl into torch's (empty) CUDA slot; on == 0: take it out again. Returns 1 when the impl
// is in the slot afterwards. Never replaces a guard impl it did not put there (a CUDA build's real one).
int simdist_guard_set_enabled(int on) {
  const c10::impl::DeviceGuardImplInterface* mine = impl();
  auto& slot = cuda_slot();
  if (on) {
    g_draining.store(false);
    const c10::impl::DeviceGuardImplInterface* expected = nullptr;
    if (!slot.compare_exchange_strong(expected, mine) && expected != mine) return 0;
    if (!swap_hooks(true)) {
      expected = mine;
      slot.compare_exchange_strong(expected, nullptr);
      return 0;
    }
    g_enabled.store(true);
    return 1;
  }
  g_enabled.store(false);
  swap_hooks(false);
  if (g_live_events.load() > 0 && slot.load() == mine) {
    g_draining.store(true);  // events made in the run still live: the slot empties when the last is destroyed
    if (g_live_events.load() > 0) return 0;
  }
  release_slot();
  return 0;
}
int simdist_guard_enabled() { return g_enabled.load() ? 1 : 0; }
// 1 while the impl stays in torch's registry after a run for events made in it (see g_live_events).
int simdist_guard_draining() { return g_draining.load() ? 1 : 0; }
// simdist's streams and events behind the guard's (nullptr: events are no-ops). The struct stays alive while set.
void simdist_guard_set_callbacks(const void* cb) {
  g_callbacks.store(static_cast<const Callbacks*>(cb), std::memory_order_release);
}
// The calling thread's current CUDA device as torch's C++ side sees it (simdist keeps each rank's current device
// in Python; code that asks C++, such as FakeTensorMode for device="cuda", must get the same answer).
void simdist_guard_set_device(int index) {
  t_rank_thread = true;
  if (index >= 0) t_device = static_cast<c10::DeviceIndex>(index);
}
// simdist changed a rank's current stream or made a device: the cached answers of callbacks()->current are stale.
void simdist_guard_streams_changed() { g_epoch.fetch_add(1, std::memory_order_acq_rel); }
// The key recordDataPtrOnStream passes for `tensor_impl`'s storage (the address of its StorageImpl's DataPtr).
const void* simdist_guard_storage_key(const void* tensor_impl) {
  auto* t = static_cast<const c10::TensorImpl*>(tensor_impl);
  if (!t->has_storage()) return nullptr;
  return &t->unsafe_storage().data_ptr();
}
// 1 when torch's CUDA hooks are the default (CPU build) ones or already swapped: set_enabled can work.
int simdist_guard_hooks_ours() {
  const auto& hooks = at::detail::getCUDAHooks();
  return typeid(hooks) == typeid(at::CUDAHooksInterface) || typeid(hooks) == typeid(SimdistCudaHooks) ? 1 : 0;
}
}
