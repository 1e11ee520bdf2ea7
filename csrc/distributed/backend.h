// The c10d process-group backend for tpu tensors ("tpu" in torch.distributed).
//
// Design (docs/distributed.md): on the host runtime a tpu tensor's memory is host RAM, so a
// collective on tpu tensors is a collective on CPU tensors that alias that memory. The transport
// is a real engine, PyTorch's bundled Gloo (a ProcessGroupGloo created on the same store, passed
// in as a generic c10d::Backend, so no Gloo header is needed); this class adds what makes the
// aliasing correct and asynchronous:
//   1. On the calling thread: check the tensors (dense, tpu or CPU), make zero-copy CPU aliases
//      (from_blob; each alias keeps its tpu storage alive) and flush pending fused work of every
//      tpu device involved (collectives are flush points). A device whose current stream still
//      has unfinished work gets an event recorded on it. The host does not block.
//   2. Issue, in one FIFO order per backend (the order of collectives must be identical on every
//      rank, whichever Python thread called): with no event to wait for and nothing queued
//      before it, the calling thread starts the Gloo operation(s) on the aliases itself (the fast
//      path of a small collective on an idle stream, see "Per-call cost" in docs/distributed.md);
//      otherwise the job goes to the issue thread, which waits for the events (the tensors'
//      producers have run) and then starts it.
//   3. Completion: a single Gloo work with a Future completes the TpuWork from that Future's
//      callback (on Gloo's worker thread, no further hand-off); send/recv and coalesced jobs go
//      through the completion thread, which waits for them in order. Either applies what Gloo
//      lacks first (ReduceOp.AVG = SUM, then a division of the aliased memory). wait() returns
//      then, and the work's Future holds the tpu tensors (not the aliases), so DDP's reducer and
//      comm hooks see tpu values.
// Separate issue and completion paths keep point-to-point patterns (irecv before isend on both
// ranks, batch_isend_irecv) from deadlocking on a serial queue.
// Errors (a peer that died, Gloo's timeout) complete the work with a DistBackendError naming the
// collective, rank, local tensors and likely cause; wait() rethrows it on the caller's thread. No
// exception from this backend escapes onto its or the transport's threads (Gloo's own socket thread
// can still abort on mismatched sizes: docs/distributed.md, "Faults").
//
// Thread safety: the c10d entry points may be called from any thread (autograd threads run DDP's
// hooks); the queues are locked. TpuWork::wait blocks the calling thread (docs/distributed.md,
// "Work.wait()", says why not the stream).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

namespace torch_tpu::distributed {

// The Work of one tpu collective. Completed by the backend's completion thread; wait(),
// isCompleted(), exception() are the base class's (mutex + condition variable).
class TpuWork final : public c10d::Work {
 public:
  // `operands` are every tensor the collective reads or writes (named in its error message).
  TpuWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> result,
          std::vector<at::Tensor> operands);
  // The tensors the collective produced (tpu tensors, as the caller passed them).
  std::vector<at::Tensor> result() override;
  // Completed with result() when the work finishes, or with its error.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  const std::vector<at::Tensor>& operands() const { return operands_; }
  // Called once, on the transport's thread (Future callback), the completion thread, or the
  // issuing thread on a start error. Never throws: an exception from a Future callback is
  // reported as a warning instead of escaping onto that thread.
  void complete(std::exception_ptr error) noexcept;

 private:
  const char* title_;
  std::vector<at::Tensor> result_, operands_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class TpuBackend final : public c10d::Backend {
 public:
  // `transport` is a Gloo backend (any c10d backend that works on CPU tensors) of the same rank
  // and size. Starts the issue and completion threads.
  TpuBackend(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size);
  // Stops the threads after the queued work ran (a collective blocked on a dead peer ends at the
  // transport's timeout).
  ~TpuBackend() override;

  const std::string getBackendName() const override { return "tpu"; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // A per-backend count of collectives, in issue order (ProcessGroupWrapper's fingerprints, under
  // TORCH_DISTRIBUTED_DEBUG=DETAIL, compare it across ranks). Every rank starts at 0.
  void setSequenceNumberForGroup() override { sequence_number_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_number_; }
  // The transport connected when it was created; nothing to do.
  void eagerConnectSingleDevice(at::Device device) override {}

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  using Works = std::vector<c10::intrusive_ptr<c10d::Work>>;
  // Starts the transport's operation(s) on the aliases; runs on the issue thread.
  using Start = std::function<Works()>;
  // Runs on the completion thread after the transport's work succeeded (e.g. AVG's division).
  using Finish = std::function<void()>;

  // Queues one collective: `tensors` are every tensor it reads or writes (their tpu devices get
  // an event; `barrier_device` adds one without a tensor), `result` what the work returns.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* title, const std::vector<at::Tensor>& tensors,
                                        std::vector<at::Tensor> result, Start start, Finish finish = {},
                                        int barrier_device = -1);
  void issue_loop();
  void completion_loop();

  struct IssueJob {
    std::vector<void*> events;  // tpu events to wait for (owned; destroyed after the wait)
    Start start;
    Finish finish;
    c10::intrusive_ptr<TpuWork> work;
    const char* title = "";
    c10d::OpType type = c10d::OpType::UNKNOWN;
  };
  struct CompletionJob {
    Works transport_works;
    Finish finish;
    c10::intrusive_ptr<TpuWork> work;
    const char* title = "";
    c10d::OpType type = c10d::OpType::UNKNOWN;
  };
  // Waits for the job's events, starts the transport's operation and hands the result to
  // complete_when_done. Runs on the issue thread, or on the calling thread for the fast path;
  // never throws (errors complete the work).
  void issue(IssueJob& job);
  // Completes the work when the transport's work finishes: from its Future's callback when it is
  // a single work with a Future, else through the completion thread.
  void complete_when_done(CompletionJob job);

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::mutex mutex_;
  std::condition_variable issue_cv_, completion_cv_;
  std::deque<IssueJob> issue_queue_;
  std::deque<CompletionJob> completion_queue_;
  bool stopping_ = false;    // the issue thread drains its queue and exits
  bool issue_done_ = false;  // then the completion thread does
  bool issuing_ = false;     // a job is being issued (by the issue thread or a caller's fast path)
  bool coalescing_ = false;
  std::atomic<uint64_t> sequence_number_{0};
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  std::thread issue_thread_, completion_thread_;
};

}  // namespace torch_tpu::distributed
