#include "distributed/backend.h"

#include <ATen/ATen.h>

#include <numeric>
#include <optional>
#include <set>

#include "common/check.h"
#include "device/device.h"
#include "device/stream.h"
#include "runtime/residency.h"

namespace torch_tpu::distributed {

namespace {

bool is_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

void check_tensor(const at::Tensor& t, const char* op) {
  TPU_CHECK_VALUE(t.defined(), op, ": got an undefined tensor");
  TPU_CHECK_VALUE(t.layout() == at::kStrided, op, ": only dense (strided) tensors are supported, got ", t.layout());
  TPU_CHECK_VALUE(is_tpu(t) || t.device().is_cpu(), op, ": tensor on ", t.device(),
                  "; the tpu backend takes tpu (or cpu) tensors");
}

// A CPU tensor over the same memory (tpu memory is host RAM on the host runtime). The deleter
// holds a reference to the tpu storage, so the memory outlives the alias.
at::Tensor host_alias(const at::Tensor& t) {
  if (!is_tpu(t)) return t;
  c10::Storage storage = t.storage();
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [storage](void*) {}, t.options().device(c10::kCPU));
}

std::vector<at::Tensor> host_aliases(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(host_alias(t));
  return out;
}

std::vector<std::vector<at::Tensor>> host_aliases(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& l : lists) out.push_back(host_aliases(l));
  return out;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// Gloo has no ReduceOp.AVG: the backend sums and divides afterwards, so the dtype must divide.
// ReduceOp.AVG is not a Gloo op: `op` becomes SUM and the returned finish step divides
// `results` (the host aliases the collective writes) by the group size. Any other op: no step.
std::function<void()> avg_as_sum(c10d::ReduceOp& op, const std::vector<at::Tensor>& checked,
                                 std::vector<at::Tensor> results, int group_size, const char* name) {
  if (!(op == c10d::ReduceOp::AVG)) return {};
  for (const auto& t : checked) {
    TPU_CHECK_VALUE(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()), name,
                    ": ReduceOp.AVG needs a floating-point dtype, got ", t.scalar_type());
  }
  op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  if (results.empty()) return {};
  return [results = std::move(results), group_size]() mutable {
    for (auto& t : results) t.div_(group_size);
  };
}

// The local operands of a failed collective, e.g. "tpu:0 Float [4], tpu:0 Float [8]".
std::string describe_operands(const std::vector<at::Tensor>& ts) {
  std::string out;
  for (const auto& t : ts) {
    if (!out.empty()) out += ", ";
    out += t.defined() ? c10::str(t.device(), " ", t.scalar_type(), " ", t.sizes()) : std::string("undefined");
  }
  return out.empty() ? std::string("none") : out;
}

// What a transport error most likely means, for the message (docs/distributed.md, "Faults").
const char* likely_cause(const std::string& what) {
  if (what.find("size doesn't match") != std::string::npos)
    return "the ranks passed tensors of different sizes or dtypes to this collective";
  if (what.find("reset by peer") != std::string::npos || what.find("closed by peer") != std::string::npos ||
      what.find("Socket closed") != std::string::npos || what.find("Broken pipe") != std::string::npos)
    return "a peer process exited or crashed; if no peer was killed, the ranks likely passed tensors of different "
           "sizes or dtypes to this collective (Gloo aborts the rank that receives more bytes than its tensor "
           "holds); TORCH_DISTRIBUTED_DEBUG=DETAIL checks shapes and dtypes on every rank before each collective "
           "and raises instead";
  if (what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos)
    return "a peer did not join this collective within the process group's timeout (it hangs, called a different "
           "collective, or passed tensors of different sizes)";
  return nullptr;
}

// ReduceOp.PREMUL_SUM (FSDP2's gradient divide factor; torch.distributed._make_nccl_premul_sum) is
// not a Gloo op: `op` becomes SUM and the returned factor scales each rank's contribution before
// the sum (scale-then-sum, as AVG is sum-then-divide). nullopt for any other op.
std::optional<double> premul_as_sum(c10d::ReduceOp& op, const std::vector<at::Tensor>& checked, const char* name) {
  if (!(op == c10d::ReduceOp::PREMUL_SUM)) return std::nullopt;
  for (const auto& t : checked) {
    TPU_CHECK_VALUE(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()), name,
                    ": ReduceOp.PREMUL_SUM needs a floating-point dtype, got ", t.scalar_type());
  }
  const auto* supplement = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TPU_CHECK_VALUE(supplement != nullptr, name,
                  ": ReduceOp.PREMUL_SUM without a factor; make it with torch.distributed._make_nccl_premul_sum");
  // A tensor factor is read once here, on the calling thread (a one-element tensor).
  double factor = supplement->tensor_factor.defined() ? supplement->tensor_factor.item<double>()
                                                      : supplement->double_factor;
  op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return factor;
}

// Scaled copies of `inputs` for PREMUL_SUM, made when the collective starts (the producers have
// run); the caller's inputs are not modified.
std::vector<at::Tensor> scaled(const std::vector<at::Tensor>& inputs, std::optional<double> factor) {
  if (!factor) return inputs;
  std::vector<at::Tensor> out;
  out.reserve(inputs.size());
  for (const auto& t : inputs) out.push_back(t * *factor);
  return out;
}

// A DistBackendError naming the collective, rank and local tensors, with the transport's message
// and the likely cause. Never throws: it runs on the transport's and the backend's threads.
std::exception_ptr describe_error(const char* title, std::exception_ptr error, int rank, int size,
                                  const std::vector<at::Tensor>& operands) noexcept {
  try {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      what = e.what_without_backtrace();
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    const char* cause = likely_cause(what);
    return std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        c10::str("torch_tpu: ", title, " failed on rank ", rank, " of ", size, " (local tensors: ",
                 describe_operands(operands), "): ", what, cause ? c10::str(". Likely cause: ", cause) : "")));
  } catch (...) {
    return error;  // out of memory while describing it: the transport's error as it is
  }
}

// Gloo's send/recv works have no Future, and a coalesced job's works are TpuWorks of this
// backend: those complete through the completion thread.
bool completes_by_future(c10d::OpType type) {
  return type != c10d::OpType::SEND && type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE &&
         type != c10d::OpType::COALESCED;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TpuWork

TpuWork::TpuWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> result,
                 std::vector<at::Tensor> operands)
    : c10d::Work(rank, type, title),
      title_(title),
      result_(std::move(result)),
      operands_(std::move(operands)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

std::vector<at::Tensor> TpuWork::result() { return result_; }

c10::intrusive_ptr<c10::ivalue::Future> TpuWork::getFuture() { return future_; }

void TpuWork::complete(std::exception_ptr error) noexcept {
  try {
    finish(error);  // wait() returns (or rethrows) from here on
  } catch (...) {
  }
  // Future callbacks (DDP comm hooks) run inline here, on the transport's or the completion
  // thread: one that throws must not escape onto that thread (std::terminate), so it is reported
  // and dropped; the work itself has completed.
  try {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(result_));
    }
  } catch (const std::exception& e) {
    TORCH_WARN("torch_tpu: a callback on the Future of a ", title_, " work threw: ", e.what());
  } catch (...) {
    TORCH_WARN("torch_tpu: a callback on a collective work's Future threw a non-standard exception");
  }
}

// ---------------------------------------------------------------------------------------------
// TpuBackend: threads and the launch path

TpuBackend::TpuBackend(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size)
    : c10d::Backend(rank, size), transport_(std::move(transport)) {
  TPU_CHECK_VALUE(transport_, "tpu process group: the transport backend is null");
  TPU_CHECK_VALUE(transport_->getRank() == rank && transport_->getSize() == size,
                  "tpu process group: the transport has rank ", transport_->getRank(), " of ", transport_->getSize(),
                  ", expected ", rank, " of ", size);
  issue_thread_ = std::thread([this] { issue_loop(); });
  completion_thread_ = std::thread([this] { completion_loop(); });
}

TpuBackend::~TpuBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  issue_cv_.notify_all();
  issue_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    issue_done_ = true;
  }
  completion_cv_.notify_all();
  completion_thread_.join();
}

void TpuBackend::setTimeout(std::chrono::milliseconds timeout) {
  transport_->setTimeout(timeout);
  c10d::Backend::setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::launch(c10d::OpType type, const char* title,
                                                  const std::vector<at::Tensor>& tensors,
                                                  std::vector<at::Tensor> result, Start start, Finish finish,
                                                  int barrier_device) {
  for (const auto& t : tensors) check_tensor(t, title);
  // Every tpu device whose tensors take part (or the barrier's device) is flushed (pending fused
  // work goes to its stream), and gets an event on its current stream unless that stream has
  // already run everything: the transport must read values the tpu stream has produced. An idle
  // stream needs no event, which keeps the stream's worker and the issue thread off the path of
  // a small collective (recording an event queues a marker the worker has to run).
  std::set<c10::DeviceIndex> devices;
  for (const auto& t : tensors) {
    if (is_tpu(t)) devices.insert(t.device().index());
  }
  if (barrier_device >= 0) devices.insert(static_cast<c10::DeviceIndex>(barrier_device));
  if (runtime::residency() != nullptr) {
    // Values may live only in device buffers (PJRT) and the transport reads and writes host
    // memory: wait for the streams, bring the bytes back and drop the device copies.
    for (auto d : devices) device::synchronize_stream(device::current_stream(d));
    auto bring_back = [](const std::vector<at::Tensor>& list) {
      for (const auto& t : list) {
        if (is_tpu(t) && t.numel() > 0)
          runtime::before_host_write(t.data_ptr(), runtime::span_bytes(t.sizes(), t.strides(), t.itemsize()),
                                     /*every_byte=*/false);
      }
    };
    bring_back(tensors);
    bring_back(result);
  }
  std::vector<void*> events;
  try {
    for (auto d : devices) {
      device::flush_pending(d, device::FlushCause::kStreamEvent);
      c10::Stream stream = device::current_stream(d);
      if (device::query_stream(stream)) continue;
      void* event = nullptr;
      events.push_back(nullptr);
      device::event_record(&event, stream, false);
      events.back() = event;
    }
  } catch (...) {
    for (void* e : events) device::event_destroy(e);
    throw;
  }
  auto work = c10::make_intrusive<TpuWork>(getRank(), type, title, std::move(result), tensors);
  ++sequence_number_;
  IssueJob job{std::move(events), std::move(start), std::move(finish), work, title, type};
  bool issue_here = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (coalescing_) coalesced_.push_back(work);
    // Fast path: nothing to wait for and nobody ahead of this job, so issuing it here keeps the
    // FIFO order; `issuing_` makes later jobs queue behind it until it has been started.
    if (job.events.empty() && issue_queue_.empty() && !issuing_) {
      issuing_ = true;
      issue_here = true;
    } else {
      issue_queue_.push_back(std::move(job));
    }
  }
  bool wake_issue_thread = !issue_here;
  if (issue_here) {
    issue(job);
    std::lock_guard<std::mutex> lock(mutex_);
    issuing_ = false;
    // Wake the issue thread only for jobs queued meanwhile: a needless wake-up per call is a
    // context switch on the path this fast path exists to keep short.
    wake_issue_thread = !issue_queue_.empty();
  }
  if (wake_issue_thread) issue_cv_.notify_one();
  return work;
}

void TpuBackend::issue(IssueJob& job) {
  Works works;
  std::exception_ptr error;
  try {
    for (void* e : job.events) device::event_synchronize(e);
    works = job.start();
  } catch (...) {
    error = std::current_exception();
  }
  for (void* e : job.events) device::event_destroy(e);
  job.events.clear();
  if (error) {
    job.work->complete(describe_error(job.title, error, getRank(), getSize(), job.work->operands()));
    return;
  }
  complete_when_done({std::move(works), std::move(job.finish), std::move(job.work), job.title, job.type});
}

void TpuBackend::complete_when_done(CompletionJob job) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  if (job.transport_works.size() == 1 && completes_by_future(job.type)) {
    try {
      future = job.transport_works[0]->getFuture();
    } catch (const c10::Error&) {
      // A transport work without a Future: the completion thread waits for it instead.
    }
  }
  if (future) {
    // Runs on Gloo's worker thread when its work finishes (or inline, if it already has).
    future->addCallback([work = std::move(job.work), finish = std::move(job.finish), title = job.title,
                         rank = getRank(), size = getSize()](c10::ivalue::Future& f) {
      std::exception_ptr error;
      try {
        if (f.hasError()) std::rethrow_exception(f.exception_ptr());
        if (finish) finish();
      } catch (...) {
        error = describe_error(title, std::current_exception(), rank, size, work->operands());
      }
      work->complete(error);
    });
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completion_queue_.push_back(std::move(job));
  }
  completion_cv_.notify_one();
}

void TpuBackend::issue_loop() {
  for (;;) {
    IssueJob job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      issue_cv_.wait(lock, [&] { return (stopping_ || !issue_queue_.empty()) && !issuing_; });
      if (issue_queue_.empty()) return;
      job = std::move(issue_queue_.front());
      issue_queue_.pop_front();
      issuing_ = true;
    }
    issue(job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      issuing_ = false;
    }
  }
}

void TpuBackend::completion_loop() {
  for (;;) {
    CompletionJob job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      completion_cv_.wait(lock, [&] { return issue_done_ || !completion_queue_.empty(); });
      if (completion_queue_.empty()) return;
      job = std::move(completion_queue_.front());
      completion_queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      for (auto& w : job.transport_works) w->wait();
      if (job.finish) job.finish();
    } catch (...) {
      error = describe_error(job.title, std::current_exception(), getRank(), getSize(), job.work->operands());
    }
    job.work->complete(error);
  }
}

void TpuBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  TPU_CHECK(!coalescing_, "tpu process group: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> TpuBackend::endCoalescing() {
  Works works;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TPU_CHECK(coalescing_, "tpu process group: endCoalescing called without startCoalescing");
    coalescing_ = false;
    works = std::move(coalesced_);
  }
  std::vector<at::Tensor> result;
  for (auto& w : works) {
    auto r = w->result();
    result.insert(result.end(), r.begin(), r.end());
  }
  // The completion thread is FIFO: it reaches this job after the coalesced works completed, so
  // waiting for them only collects their errors.
  return launch(c10d::OpType::COALESCED, "coalesced", {}, std::move(result), [works] { return works; });
}

// ---------------------------------------------------------------------------------------------
// Collectives: aliases on the calling thread, the transport's operation on the issue thread.

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  auto a = host_aliases(tensors);
  return launch(c10d::OpType::BROADCAST, "broadcast", tensors, tensors,
                [this, a, opts]() mutable { return Works{transport_->broadcast(a, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  auto a = host_aliases(tensors);
  auto o = opts;
  Finish finish = avg_as_sum(o.reduceOp, tensors, a, getSize(), "all_reduce");
  auto premul = premul_as_sum(o.reduceOp, tensors, "all_reduce");
  return launch(
      c10d::OpType::ALLREDUCE, "all_reduce", tensors, tensors,
      [this, a, o, premul]() mutable {
        if (premul) {
          for (auto& t : a) t.mul_(*premul);  // in place: the result overwrites it anyway
        }
        return Works{transport_->allreduce(a, o)};
      },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceCoalescedOptions& opts) {
  auto a = host_aliases(tensors);
  auto o = opts;
  Finish finish = avg_as_sum(o.reduceOp, tensors, a, getSize(), "all_reduce_coalesced");
  auto premul = premul_as_sum(o.reduceOp, tensors, "all_reduce_coalesced");
  return launch(
      c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, tensors,
      [this, a, o, premul]() mutable {
        if (premul) {
          for (auto& t : a) t.mul_(*premul);
        }
        return Works{transport_->allreduce_coalesced(a, o)};
      },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  auto a = host_aliases(tensors);
  auto o = opts;
  TPU_CHECK_VALUE(!(o.reduceOp == c10d::ReduceOp::PREMUL_SUM),
                  "reduce: ReduceOp.PREMUL_SUM is supported by all_reduce and reduce_scatter on the tpu backend, not "
                  "by reduce (scale the tensor, then reduce with ReduceOp.SUM)");
  // Only the root receives the sum, so only the root divides.
  Finish finish =
      avg_as_sum(o.reduceOp, tensors, getRank() == opts.rootRank ? a : std::vector<at::Tensor>{}, getSize(), "reduce");
  return launch(
      c10d::OpType::REDUCE, "reduce", tensors, tensors,
      [this, a, o]() mutable { return Works{transport_->reduce(a, o)}; }, std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto all = flatten(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return launch(c10d::OpType::ALLGATHER, "all_gather", all, flatten(outputs),
                [this, ao, ai, opts]() mutable { return Works{transport_->allgather(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  auto ao = host_alias(output);
  auto ai = host_alias(input);
  return launch(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output, input}, {output},
                [this, ao, ai, opts]() mutable { return Works{transport_->_allgather_base(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto all = flatten(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return launch(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", all, flatten(outputs),
                [this, ao, ai, opts]() mutable { return Works{transport_->allgather_coalesced(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::AllgatherOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return launch(
      c10d::OpType::COALESCED, "all_gather_into_tensor_coalesced", all, outputs,
      [this, ao, ai, opts]() mutable { return Works{transport_->allgather_into_tensor_coalesced(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto all = flatten(outputs);
  all.insert(all.end(), inputs.begin(), inputs.end());
  return launch(c10d::OpType::GATHER, "gather", all, flatten(outputs),
                [this, ao, ai, opts]() mutable { return Works{transport_->gather(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto all = flatten(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  return launch(c10d::OpType::SCATTER, "scatter", all, outputs,
                [this, ao, ai, opts]() mutable { return Works{transport_->scatter(ao, ai, opts)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto o = opts;
  Finish finish = avg_as_sum(o.reduceOp, outputs, ao, getSize(), "reduce_scatter");
  auto premul = premul_as_sum(o.reduceOp, outputs, "reduce_scatter");
  auto all = flatten(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  return launch(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", all, outputs,
      [this, ao, ai, o, premul]() mutable {
        std::vector<std::vector<at::Tensor>> in;
        for (const auto& l : ai) in.push_back(scaled(l, premul));
        return Works{transport_->reduce_scatter(ao, in, o)};
      },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::ReduceScatterOptions& opts) {
  auto ao = host_alias(output);
  auto ai = host_alias(input);
  auto o = opts;
  Finish finish = avg_as_sum(o.reduceOp, {output}, {ao}, getSize(), "reduce_scatter_tensor");
  auto premul = premul_as_sum(o.reduceOp, {output}, "reduce_scatter_tensor");
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output, input}, {output},
      [this, ao, ai, o, premul]() mutable {
        auto in = premul ? ai * *premul : ai;
        return Works{transport_->_reduce_scatter_base(ao, in, o)};
      },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                           std::vector<at::Tensor>& inputs,
                                                                           const c10d::ReduceScatterOptions& opts) {
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  auto o = opts;
  Finish finish = avg_as_sum(o.reduceOp, outputs, ao, getSize(), "reduce_scatter_tensor_coalesced");
  auto premul = premul_as_sum(o.reduceOp, outputs, "reduce_scatter_tensor_coalesced");
  auto all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return launch(
      c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", all, outputs,
      [this, ao, ai, o, premul]() mutable {
        auto in = scaled(ai, premul);
        return Works{transport_->reduce_scatter_tensor_coalesced(ao, in, o)};
      },
      std::move(finish));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_splits,
                                                         std::vector<int64_t>& input_splits,
                                                         const c10d::AllToAllOptions& opts) {
  auto ao = host_alias(output);
  auto ai = host_alias(input);
  return launch(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output, input}, {output},
                [this, ao, ai, output_splits, input_splits, opts]() mutable {
                  return Works{transport_->alltoall_base(ao, ai, output_splits, input_splits, opts)};
                });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& opts) {
  // Gloo's list form needs every tensor to have the same shape. The backend packs the inputs
  // into one flat buffer, runs Gloo's all_to_all_single with one split per peer (alltoallv) and
  // unpacks the received buffer, so each peer's tensor may have its own size and shape.
  const auto n = static_cast<size_t>(getSize());
  TPU_CHECK_VALUE(outputs.size() == n && inputs.size() == n, "all_to_all: expected ", n,
                  " output and input tensors (one per rank), got ", outputs.size(), " and ", inputs.size());
  auto all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end());
  for (const auto& t : all) {
    check_tensor(t, "all_to_all");
    TPU_CHECK_VALUE(t.scalar_type() == inputs[0].scalar_type(), "all_to_all: every tensor must have one dtype, got ",
                    t.scalar_type(), " and ", inputs[0].scalar_type());
  }
  auto ao = host_aliases(outputs);
  auto ai = host_aliases(inputs);
  std::vector<int64_t> in_splits, out_splits;
  for (const auto& t : inputs) in_splits.push_back(t.numel());
  for (const auto& t : outputs) out_splits.push_back(t.numel());
  auto flat = at::TensorOptions().dtype(inputs[0].scalar_type()).device(c10::kCPU);
  auto send = at::empty({std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0})}, flat);
  auto recv = at::empty({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, flat);
  Finish unpack = [ao, recv, out_splits]() mutable {
    int64_t offset = 0;
    for (size_t i = 0; i < ao.size(); ++i) {
      ao[i].copy_(recv.narrow(0, offset, out_splits[i]).view(ao[i].sizes()));
      offset += out_splits[i];
    }
  };
  return launch(
      c10d::OpType::ALLTOALL, "all_to_all", all, outputs,
      [this, ai, send, recv, in_splits, out_splits, opts]() mutable {
        int64_t offset = 0;  // packed here: the inputs' producers have run
        for (size_t i = 0; i < ai.size(); ++i) {
          send.narrow(0, offset, in_splits[i]).view(ai[i].sizes()).copy_(ai[i]);
          offset += in_splits[i];
        }
        return Works{transport_->alltoall_base(recv, send, out_splits, in_splits, opts)};
      },
      std::move(unpack));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  auto a = host_aliases(tensors);
  return launch(c10d::OpType::SEND, "send", tensors, tensors,
                [this, a, dst, tag]() mutable { return Works{transport_->send(a, dst, tag)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  auto a = host_aliases(tensors);
  return launch(c10d::OpType::RECV, "recv", tensors, tensors,
                [this, a, src, tag]() mutable { return Works{transport_->recv(a, src, tag)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  auto a = host_aliases(tensors);
  return launch(c10d::OpType::RECVANYSOURCE, "recv", tensors, tensors,
                [this, a, tag]() mutable { return Works{transport_->recvAnysource(a, tag)}; });
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  // A barrier orders after the work queued so far on the current tpu device (and flushes it in
  // fused mode), like a collective on a tensor of that device.
  return launch(
      c10d::OpType::BARRIER, "barrier", {}, {}, [this, opts]() mutable { return Works{transport_->barrier(opts)}; }, {},
      static_cast<int>(device::current()));
}

}  // namespace torch_tpu::distributed
