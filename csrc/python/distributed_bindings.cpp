// Python bindings for the tpu process-group backend (csrc/distributed/backend.h). The Python
// side (torch_tpu/distributed/) creates the Gloo transport and registers the backend with
// torch.distributed; this only constructs the C++ backend around it.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/backend.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace torch_tpu::python {

void init_distributed_bindings(py::module_& m) {
  m.def(
      "_dist_tpu_backend",
      [](const c10::intrusive_ptr<c10d::Backend>& transport, int rank, int size) -> c10::intrusive_ptr<c10d::Backend> {
        return c10::make_intrusive<distributed::TpuBackend>(transport, rank, size);
      },
      py::arg("transport"), py::arg("rank"), py::arg("size"),
      "The tpu c10d backend over `transport` (a ProcessGroupGloo of the same rank and size).");
}

}  // namespace torch_tpu::python
