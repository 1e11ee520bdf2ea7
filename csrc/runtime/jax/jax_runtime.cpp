#include "runtime/jax/jax_runtime.h"

#include <ATen/ATen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "common/check.h"
#include "runtime/select.h"
#include "runtime/internal_dispatch.h"
#include "stablehlo/emitter.h"

namespace py = pybind11;

namespace torch_tpu::runtime::jax {
namespace {

// Set once by set_engine (GIL held), read under the GIL; never destroyed (see the header).
py::object* g_engine = nullptr;

bool python_alive() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

// Raises the c10 error matching a Python exception of the engine (called with the GIL held).
[[noreturn]] void rethrow(py::error_already_set& e, const char* what) {
  std::string msg = std::string("torch_tpu JAX runtime: ") + what + ": " + py::str(e.value()).cast<std::string>();
  if (e.matches(PyExc_NotImplementedError)) TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  TORCH_CHECK(false, msg);
}

// A CPU tensor over a tensor binding's memory (no copy).
at::Tensor wrap_binding(const Binding& b) {
  auto opts = at::TensorOptions().dtype(b.dtype);
  TPU_CHECK(b.sizes.size() == b.strides.size(), "JAX runtime: binding has ", b.sizes.size(), " sizes but ",
            b.strides.size(), " strides");
  if (c10::multiply_integers(b.sizes) == 0) return at::empty(b.sizes, opts);
  TPU_CHECK(b.data != nullptr, "JAX runtime: tensor binding with null data");
  return at::from_blob(b.data, b.sizes, b.strides, opts);
}

class JaxExecutable final : public Executable {
 public:
  JaxExecutable(stablehlo::Module module, std::vector<int32_t> results, py::object compiled)
      : module_(std::move(module)), results_(std::move(results)), compiled_(new py::object(std::move(compiled))) {}

  ~JaxExecutable() override {
    if (!python_alive()) return;  // leaked: Python objects cannot be released any more
    py::gil_scoped_acquire gil;
    delete compiled_;
  }

  std::string describe() const override {
    return "StableHLO module on JAX CPU: " + std::to_string(module_.arguments.size()) + " arguments, " +
           std::to_string(results_.size()) + " results, " + std::to_string(module_.text.size()) + " bytes of text\n";
  }

  ExecutableStats stats() const override { return {1, 0, 0}; }

  void run(const std::vector<Binding>& inputs, const std::vector<OutputTarget>& outputs, RngState rng) const override {
    InternalDispatchGuard guard;
    set_last_failed_node(-1);
    // Which result each target takes, checked before anything runs.
    std::vector<size_t> result_of(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      const OutputTarget& o = outputs[k];
      auto it = std::find(results_.begin(), results_.end(), o.node);
      TPU_CHECK(it != results_.end(), "JAX runtime: node ", o.node, " was not compiled as an output");
      TPU_CHECK(o.dest.kind == Binding::Kind::Tensor, "JAX runtime: output destination of %", o.node,
                " must be a tensor");
      result_of[k] = static_cast<size_t>(it - results_.begin());
    }
    std::vector<at::Tensor> args;
    args.reserve(module_.arguments.size());
    for (const stablehlo::Argument& a : module_.arguments) args.push_back(gather(a, inputs, rng));

    TPU_CHECK(python_alive(), "JAX runtime: the Python interpreter is shutting down; cannot run a program");
    py::gil_scoped_acquire gil;
    std::vector<at::Tensor> values;
    try {
      py::list results = (*g_engine).attr("execute")(*compiled_, args);
      values = results.cast<std::vector<at::Tensor>>();
    } catch (py::error_already_set& e) {
      rethrow(e, "running a StableHLO module failed");
    }
    TPU_CHECK(values.size() == results_.size(), "JAX runtime: the module returned ", values.size(),
              " results, expected ", results_.size());
    // Destinations are written in node order (the host runtime's order: a later node's write
    // into overlapping memory wins), several of one node in the order given.
    std::vector<size_t> order(outputs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return outputs[a].node < outputs[b].node; });
    for (size_t k : order) {
      const Binding& dest = outputs[k].dest;
      const at::Tensor& v = values[result_of[k]];
      TPU_CHECK(v.sizes().equals(dest.sizes), "JAX runtime: destination shape ", c10::IntArrayRef(dest.sizes),
                " != shape ", v.sizes(), " of %", outputs[k].node);
      if (v.numel() > 0) wrap_binding(dest).copy_(v);
    }
    values.clear();  // the results may own Python (numpy) memory: released under the GIL
  }

 private:
  // The dense value of one module argument.
  static at::Tensor gather(const stablehlo::Argument& a, const std::vector<Binding>& inputs, RngState rng) {
    const auto dtype = static_cast<at::ScalarType>(a.dtype);
    if (a.binding < 0) {
      uint64_t v = a.binding == ir::kRngSeedBinding ? rng.seed : rng.offset;
      return at::scalar_tensor(static_cast<int64_t>(v), at::kLong);
    }
    TPU_CHECK(a.binding < static_cast<int64_t>(inputs.size()), "JAX runtime: the module reads binding ", a.binding,
              " but only ", inputs.size(), " were given");
    const Binding& b = inputs[static_cast<size_t>(a.binding)];
    at::Tensor t;
    if (b.kind == Binding::Kind::Scalar) {
      t = at::isFloatingType(b.dtype) ? at::scalar_tensor(b.d, b.dtype) : at::scalar_tensor(b.i, at::kLong).to(b.dtype);
    } else {
      t = wrap_binding(b);
    }
    if (!t.sizes().equals(a.shape)) {
      TPU_CHECK(t.numel() == c10::multiply_integers(a.shape), "JAX runtime: binding ", a.binding, " has shape ",
                t.sizes(), ", the parameter expects ", c10::IntArrayRef(a.shape));
      t = t.reshape(a.shape);
    }
    return t.to(dtype).contiguous();
  }

  stablehlo::Module module_;
  std::vector<int32_t> results_;  // the module's results: distinct output nodes
  py::object* compiled_;          // the engine's compiled executable (deleted under the GIL)
};

class JaxRuntime final : public Runtime {
 public:
  const char* name() const override { return "jax"; }

  std::unique_ptr<Executable> compile(const ir::Graph& graph, const std::vector<int32_t>& outputs) override {
    std::vector<int32_t> results = outputs;
    std::sort(results.begin(), results.end());
    results.erase(std::unique(results.begin(), results.end()), results.end());
    stablehlo::EmitOptions options;
    options.live_arguments_only = true;
    stablehlo::Module module = stablehlo::emit_module(graph, results, options);
    TPU_CHECK(python_alive(), "JAX runtime: the Python interpreter is shutting down; cannot compile a program");
    py::gil_scoped_acquire gil;
    TPU_CHECK(g_engine != nullptr,
              "TORCH_TPU_RUNTIME=jax: no JAX engine is installed (import torch_tpu installs "
              "torch_tpu.jax_runtime, which needs `pip install jax`)");
    py::object compiled;
    try {
      compiled = (*g_engine).attr("compile")(module.text);
    } catch (py::error_already_set& e) {
      rethrow(e, "compiling the emitted StableHLO module failed");
    }
    return std::make_unique<JaxExecutable>(std::move(module), std::move(results), std::move(compiled));
  }
};

}  // namespace

void set_engine(const py::object& engine) {
  if (g_engine == nullptr) g_engine = new py::object();
  *g_engine = engine;
}

Runtime& jax_runtime() {
  static JaxRuntime* runtime = new JaxRuntime();  // leaked: lives forever
  return *runtime;
}

namespace {
// Selectable as TORCH_TPU_RUNTIME=jax from the moment the extension is loaded (runtime/select.h).
const bool g_registered = (set_jax_runtime(&jax_runtime), true);
}  // namespace

}  // namespace torch_tpu::runtime::jax
