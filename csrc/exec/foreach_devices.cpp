// `_foreach_` ops whose lists span devices, as CUDA runs them: its fast kernels need every
// tensor on one device, and otherwise each op takes the per-tensor ("slow") route. We split the
// lists by device instead of by tensor: the elements whose tensors are all on one device run as
// one lowered `_foreach_` call there (one program per device, not one per tensor), and the
// results go back to their positions. An element whose tensors sit on different devices is
// what a per-tensor op would be asked: `_foreach_copy_` copies it across devices (copy_ does);
// any other op raises PyTorch's device-mismatch error for it. FSDP2 and optimizers hand such
// lists to `_foreach_copy_`/`_foreach_add_` when parameters live on several devices.
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <map>
#include <vector>

#include "exec/call.h"

namespace torch_tpu::exec {
namespace {

// The devices of element i across the op's tensor lists of length n (undefined tensors and CPU
// 0-d tensors carry no device, as in PyTorch's same-device check).
std::vector<c10::Device> devices_at(const std::vector<size_t>& lists, c10::ArrayRef<c10::IValue> args, size_t i) {
  std::vector<c10::Device> out;
  for (size_t a : lists) {
    const auto list = args[a].toListRef();
    const c10::IValue& v = list[i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) continue;
    out.push_back(t.device());
  }
  return out;
}

c10::IValue take(const c10::IValue& list, const std::vector<size_t>& idx) {
  if (list.isTensorList()) {
    const auto src = list.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(idx.size());
    for (size_t i : idx) out.push_back(src.get(i));
    return out;
  }
  const auto src = list.toList();
  c10::impl::GenericList out(src.elementType());
  out.reserve(idx.size());
  for (size_t i : idx) out.push_back(src.get(i));
  return out;
}

}  // namespace

bool run_foreach_across_devices(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  // The lists with one entry per element: those as long as the first tensor list.
  std::vector<size_t> lists, per_element;
  int64_t n = -1;
  for (size_t a = 0; a < nargs; ++a) {
    if (!args[a].isList()) continue;
    const int64_t len = static_cast<int64_t>(args[a].toListRef().size());
    if (n < 0 && args[a].isTensorList()) n = len;
    if (len == n) {
      per_element.push_back(a);
      if (args[a].isTensorList() || args[a].toList().elementType()->kind() == c10::TypeKind::OptionalType) lists.push_back(a);
    }
  }
  if (n <= 0 || lists.empty()) return false;
  // The common case, checked without allocating: every tensor on one tpu device.
  {
    std::optional<c10::Device> only;
    bool one = true;
    for (size_t a : lists) {
      for (const c10::IValue& v : args[a].toListRef()) {
        if (!v.isTensor()) continue;
        const at::Tensor& t = v.toTensor();
        if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) continue;
        if (!only) only = t.device();
        one = one && t.device() == *only && only->is_privateuseone();
      }
    }
    if (one) return false;
  }
  // Group elements by device; most calls are on one device and stop at the first check.
  std::map<c10::DeviceIndex, std::vector<size_t>> groups;
  std::vector<size_t> mixed;
  bool several = false;
  std::optional<c10::Device> first;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const auto devs = devices_at(lists, args, i);
    if (devs.empty()) continue;
    bool same = true;
    for (const auto& d : devs) same = same && d == devs[0];
    if (!same || !devs[0].is_privateuseone()) {
      mixed.push_back(i);
      several = true;
      continue;
    }
    if (!first) first = devs[0];
    several = several || devs[0] != *first;
    groups[devs[0].index()].push_back(i);
  }
  if (!several) return false;
  const bool copy = schema.name() == "aten::_foreach_copy_";
  if (!copy && !mixed.empty()) return false;  // the lowered path raises the per-element mismatch
  const bool returns_list = schema.returns().size() == 1 && schema.returns()[0].type()->kind() == c10::TypeKind::ListType;
  std::vector<at::Tensor> results(returns_list ? static_cast<size_t>(n) : 0);
  for (const auto& [device, idx] : groups) {
    torch::jit::Stack sub;
    sub.reserve(nargs);
    size_t next = 0;
    for (size_t a = 0; a < nargs; ++a) {
      const bool split = next < per_element.size() && per_element[next] == a;
      if (split) ++next;
      sub.push_back(split ? take(args[a], idx) : args[a]);
    }
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
    run_lowered(op, &sub);
    if (returns_list) {
      const auto out = sub.back().toTensorList();
      for (size_t k = 0; k < idx.size(); ++k) results[idx[k]] = out.get(k);
    }
  }
  if (copy) {  // _foreach_copy_(self, src, non_blocking): copy_ element by element
    const auto self = args[0].toTensorList();
    const auto src = args[1].toTensorList();
    for (size_t i : mixed) self.get(i).copy_(src.get(i), args[2].toBool());
  }
  torch::jit::drop(*stack, nargs);
  if (returns_list) torch::jit::push(*stack, c10::List<at::Tensor>(results));
  return true;
}

}  // namespace torch_tpu::exec
