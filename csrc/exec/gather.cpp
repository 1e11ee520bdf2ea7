// Argument gathering (gather.h): one walk over an ATen call's arguments writes its program-cache
// key and its runtime bindings.
#include "exec/gather.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/check.h"
#include "common/hash.h"
#include "device/device.h"
#include "exec/poison.h"

namespace torch_tpu::exec {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

// Key word tags: every argument contributes a tag so different argument shapes never collide.
enum Tag : int64_t {
  kTagTensor = 1,
  kTagNone,
  kTagScalar,
  kTagInt,
  kTagList,
  kTagDouble,
  kTagBool,
  kTagString,
  kTagDevice,
  kTagGenerator,
  kTagMathBits = 1000,    // + 1 (conj) + 2 (neg): above any rank, which is mixed next
  kTagContiguous = 1010,  // + 1 when contiguous (OpInfo::keys_contiguity)
};

ArgKind classify(const c10::Argument& a) {
  auto type = a.real_type();
  if (type->kind() == c10::TypeKind::OptionalType) type = type->castRaw<c10::OptionalType>()->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return ArgKind::Tensor;
    case c10::TypeKind::ListType: {
      auto elem = type->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::OptionalType) elem = elem->castRaw<c10::OptionalType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) return ArgKind::Tensor;
      return elem->kind() == c10::TypeKind::NumberType ? ArgKind::RuntimeScalarList : ArgKind::Baked;
    }
    case c10::TypeKind::NumberType:
    case c10::TypeKind::FloatType: return ArgKind::RuntimeScalar;
    case c10::TypeKind::GeneratorType: return ArgKind::Generator;
    default: return ArgKind::Baked;
  }
}

std::mutex g_info_mu;
std::unordered_map<const c10::FunctionSchema*, OpInfo*> g_infos;


OpInfo& op_info_locked(const c10::OperatorHandle& op) {
  const auto* key = &op.schema();
  std::lock_guard<std::mutex> g(g_info_mu);
  auto it = g_infos.find(key);
  if (it != g_infos.end()) return *it->second;
  auto* info = new OpInfo();  // lives as long as the operator registration
  info->qualname = op.schema().name();
  info->overload = op.schema().overload_name();
  for (const auto& a : op.schema().arguments()) {
    info->kinds.push_back(classify(a));
    if (a.type()->kind() == c10::TypeKind::DeviceObjType ||
        (a.type()->kind() == c10::TypeKind::OptionalType &&
         a.type()->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::DeviceObjType)) {
      info->has_device_arg = true;
    }
  }
  for (const auto& r : op.schema().returns()) {
    if (r.alias_info() != nullptr && !r.alias_info()->isWrite()) info->is_view = true;
  }
  const std::string& name = info->qualname;
  if (name.find("convolution") != std::string::npos) info->layout = OutputLayout::kAnyInput;
  for (const char* contiguous : {"layer_norm", "grid_sampler", "max_unpool", "channel_shuffle"}) {
    if (name.find(contiguous) != std::string::npos) info->layout = OutputLayout::kContiguous;
  }
  if (name.rfind("aten::_foreach_", 0) == 0) info->layout = OutputLayout::kPerListElement;
  info->value_read_first = name == "aten::fill_" || name == "aten::fill";
  info->writes_overlapping = info->value_read_first || name == "aten::zero_";
  for (const char* fill : {"aten::fill", "aten::fill_", "aten::masked_fill", "aten::masked_fill_", "aten::index_fill",
                           "aten::index_fill_"}) {
    if (name != fill) continue;
    for (size_t i = 0; i < op.schema().arguments().size(); ++i) {
      if (op.schema().arguments()[i].name() == "value" && info->kinds[i] == ArgKind::RuntimeScalar) {
        info->fill_value_arg = static_cast<int8_t>(i);
      }
    }
  }
  info->keys_contiguity = name == "aten::_linalg_det" || name == "aten::_linalg_slogdet";
  if (name.find("3d") != std::string::npos) info->layout_min_rank = 5;
  if (name.find("adaptive_avg_pool3d") != std::string::npos) info->layout = OutputLayout::kContiguous;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (info->layout == OutputLayout::kAnyInput && arguments[i].name() == "transposed") {
      info->transposed_arg = static_cast<int8_t>(i);
    }
  }
  g_infos.emplace(key, info);
  return *info;
}

inline int64_t double_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

inline void mix(CallState& st, int64_t w) {
  st.key.push_back(w);
  st.hash = mix_word(st.hash, w);
}

std::string device_str(const c10::Device& d) {
  return d.type() == kTpu ? "tpu:" + std::to_string(static_cast<int>(d.index())) : d.str();
}

void check_same_device(CallState& st, const at::Tensor& t, const OpInfo& info, size_t arg) {
  if (!st.device_known) {
    st.device = t.device();
    st.device_known = true;
  } else if (t.device() != st.device) {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                device_str(st.device), " and ", device_str(t.device()), "! (when checking argument ", arg, " of ",
                info.qualname, info.overload.empty() ? "" : "." + info.overload, ")");
  }
}

// 1 if a scalar binding is exactly 1, 2 if exactly 0, else 0 (see add_scalar_binding).
int64_t scalar_special(const runtime::Binding& b) {
  if (c10::isFloatingType(b.dtype)) return b.d == 1.0 ? 1 : (b.d == 0.0 && !std::signbit(b.d)) ? 2 : 0;
  return b.i == 1 ? 1 : b.i == 0 ? 2 : 0;
}

void add_scalar_binding(CallState& st, const c10::Scalar& s, c10::ScalarType dtype, bool wrapped, bool bake) {
  runtime::Binding b;
  b.kind = runtime::Binding::Kind::Scalar;
  b.dtype = dtype;
  const bool complex = c10::isComplexType(dtype) || s.isComplex();
  if (c10::isFloatingType(dtype)) {
    b.d = s.toDouble();
  } else if (!complex) {
    b.i = s.toLong();
  }
  mix(st, kTagScalar);
  mix(st, static_cast<int64_t>(dtype));
  mix(st, wrapped);
  if (complex) {  // always baked into the program (lowering/bridge.py): the key holds the value
    const auto z = s.toComplexDouble();
    mix(st, double_bits(z.real()));
    mix(st, double_bits(z.imag()));
  }
  // Identity values (alpha=1, beta=0, +1) are specialized: the lowering sees a constant and
  // can drop the multiply. Other values stay runtime inputs, so a changing lr never recompiles.
  mix(st, scalar_special(b));
  if (bake) {
    mix(st, c10::isFloatingType(dtype) ? double_bits(b.d) : b.i);
  }
  st.bindings.push_back(std::move(b));
  st.tensors.emplace_back();
}

// CPU's kernels convert a fill value to the tensor's type with c10's checked conversion, which
// raises "value cannot be converted to type int64_t without overflow" (NaN, inf or out of range
// for an integer type; past the finite range for a float type). Bool and complex accept any.
void check_fill_value(const c10::Scalar& s, c10::ScalarType dtype) {
  if (s.isComplex()) return;
  switch (dtype) {
    case c10::kByte: (void)s.to<uint8_t>(); break;
    case c10::kChar: (void)s.to<int8_t>(); break;
    case c10::kShort: (void)s.to<int16_t>(); break;
    case c10::kInt: (void)s.to<int>(); break;
    case c10::kLong: (void)s.to<int64_t>(); break;
    case c10::kHalf: (void)s.to<c10::Half>(); break;
    case c10::kBFloat16: (void)s.to<c10::BFloat16>(); break;
    case c10::kFloat: (void)s.to<float>(); break;
    default: break;
  }
}

// A Scalar argument (or an element of a Scalar[]): a Python number, as double, bool or int64.
void add_python_scalar(CallState& st, const c10::Scalar& s, const OpInfo& info) {
  c10::ScalarType dtype = s.isComplex()         ? c10::kComplexDouble
                          : s.isFloatingPoint() ? c10::kDouble
                          : s.isBoolean()       ? c10::kBool
                                                : c10::kLong;
  add_scalar_binding(st, s, dtype, true, st.bake);
}

void add_tensor(CallState& st, const at::Tensor& t, const OpInfo& info, size_t arg) {
  if (!t.defined()) {
    mix(st, kTagNone);
    return;
  }
  if (t.device().type() != kTpu) {
    if (t.device().is_cpu() && t.dim() == 0) {  // CPU scalars mix with any device, as in PyTorch
      add_scalar_binding(st, t.item(), t.scalar_type(), t.unsafeGetTensorImpl()->is_wrapped_number(), st.bake);
      return;
    }
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                st.device_known ? device_str(st.device) : std::string("tpu"), " and ", device_str(t.device()),
                "! (when checking argument ", arg, " of ", info.qualname,
                info.overload.empty() ? "" : "." + info.overload, ")");
  }
  check_same_device(st, t, info, arg);
  if (any_poisoned()) check_not_poisoned(t);
  mix(st, kTagTensor);
  mix(st, static_cast<int64_t>(t.scalar_type()));
  // PyTorch's lazy conj() and neg views: the program applies them (lowering/bridge.py).
  if (t.is_conj() || t.is_neg()) mix(st, kTagMathBits + (t.is_conj() ? 1 : 0) + (t.is_neg() ? 2 : 0));
  if (info.keys_contiguity) mix(st, kTagContiguous + (t.is_contiguous() ? 1 : 0));
  mix(st, t.dim());
  for (auto s : t.sizes()) mix(st, s);
  st.bindings.push_back(tensor_binding(t));
  st.tensors.push_back(t);
}

}  // namespace

// Per-thread memo in front of the shared table: the per-op path takes no lock for it.
OpInfo& op_info(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo*> memo;
  const auto* key = &op.schema();
  auto it = memo.find(key);
  if (it != memo.end()) return *it->second;
  OpInfo& info = op_info_locked(op);
  memo.emplace(key, &info);
  return info;
}

bool has_complex_tensor(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_complex()) return true;
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (t.defined() && t.is_complex()) return true;
      }
    }
  }
  return false;
}

// Walks the arguments: key + bindings. Throws for mixed devices and unsupported values.
void gather(CallState& st, const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  st.bake = info.bake_scalars || (info.bake_scalars_complex && has_complex_tensor(args));
  st.key.clear();
  st.bindings.clear();
  st.tensors.clear();
  st.first_binding.clear();
  st.device_known = false;
  st.generator.reset();
  st.hash = kFnvOffsetBasis;
  mix(st, reinterpret_cast<intptr_t>(&info));
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    st.first_binding.push_back(static_cast<int32_t>(st.bindings.size()));
    switch (info.kinds[i]) {
      case ArgKind::Tensor:
        if (v.isTensor()) {
          add_tensor(st, v.toTensor(), info, i);
        } else if (v.isNone()) {
          mix(st, kTagNone);
        } else if (v.isTensorList()) {
          auto list = v.toTensorList();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(list.size()));
          for (const at::Tensor& t : list) add_tensor(st, t, info, i);
        } else if (v.isList()) {  // Tensor?[]
          auto list = v.toListRef();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(list.size()));
          for (const auto& e : list) {
            if (e.isNone()) {
              mix(st, kTagNone);
            } else {
              add_tensor(st, e.toTensor(), info, i);
            }
          }
        } else {
          TPU_CHECK(false, "unexpected value for a tensor argument of ", info.qualname);
        }
        break;
      case ArgKind::RuntimeScalar:
        if (v.isNone()) {
          mix(st, kTagNone);
        } else {
          if (static_cast<int8_t>(i) == info.fill_value_arg && args[0].isTensor()) {
            check_fill_value(v.toScalar(), args[0].toTensor().scalar_type());
          }
          add_python_scalar(st, v.toScalar(), info);
        }
        break;
      case ArgKind::RuntimeScalarList: {
        auto list = v.toListRef();
        mix(st, kTagList);
        mix(st, static_cast<int64_t>(list.size()));
        for (const auto& e : list) add_python_scalar(st, e.toScalar(), info);
        break;
      }
      case ArgKind::Generator:
        mix(st, kTagGenerator);
        if (v.isGenerator()) st.generator = v.toGenerator();
        break;
      case ArgKind::Baked:
        if (v.isInt()) {
          mix(st, kTagInt);
          mix(st, v.toInt());
        } else if (v.isBool()) {
          mix(st, kTagBool);
          mix(st, v.toBool());
        } else if (v.isNone()) {
          mix(st, kTagNone);
        } else if (v.isIntList()) {
          auto l = v.toIntList();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(l.size()));
          for (int64_t x : l) mix(st, x);
        } else if (v.isDouble()) {
          mix(st, kTagDouble);
          mix(st, double_bits(v.toDouble()));
        } else if (v.isDoubleList()) {
          auto l = v.toDoubleList();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(l.size()));
          for (double d : l) mix(st, double_bits(d));
        } else if (v.isBoolList()) {
          auto l = v.toBoolList();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(l.size()));
          for (bool b : l) mix(st, b);
        } else if (v.isString()) {
          mix(st, kTagString);
          auto str = v.toStringView();  // FNV-1a: stable across processes (the disk tier's keys)
          mix(st, static_cast<int64_t>(fnv1a(str.data(), str.size())));
        } else if (v.isDevice()) {
          auto d = v.toDevice();
          mix(st, kTagDevice);
          mix(st, static_cast<int64_t>(d.type()));
          if (d.type() == kTpu && !st.device_known) {
            st.device = c10::Device(kTpu, d.has_index() ? d.index() : device::current());
            device::check_index(st.device.index());
            st.device_known = true;
          }
        } else if (v.isList()) {
          auto l = v.toListRef();
          mix(st, kTagList);
          mix(st, static_cast<int64_t>(l.size()));
          for (const auto& e : l) {
            TPU_CHECK(e.isScalar(), "unsupported list argument for ", info.qualname);
            mix(st, double_bits(e.toScalar().toDouble()));
          }
        } else if (v.isScalar()) {
          mix(st, kTagDouble);
          mix(st, double_bits(v.toScalar().toDouble()));
        } else {
          // Keying such a value by its kind alone could reuse a program compiled for another
          // value; refuse instead of guessing.
          TPU_CHECK_NOT_IMPLEMENTED(false, "argument ", i, " of ", info.qualname, " has type ", v.tagKind(),
                                    ", which the tpu dispatcher cannot key programs on");
        }
        break;
    }
  }
  if (!st.device_known) st.device = c10::Device(kTpu, device::current());
}

}  // namespace torch_tpu::exec
