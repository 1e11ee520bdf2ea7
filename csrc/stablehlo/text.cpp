#include "stablehlo/text.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdio>
#include <cstring>

#include "common/check.h"

namespace torch_tpu::stablehlo {

std::string TType::str() const {
  std::string s = "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + elem + ">";
}

std::string elem_of(ir::DType t) {
  switch (t) {
    case ir::DType::kU8:
      return "ui8";
    case ir::DType::kI8:
      return "i8";
    case ir::DType::kI16:
      return "i16";
    case ir::DType::kI32:
      return "i32";
    case ir::DType::kI64:
      return "i64";
    case ir::DType::kF16:
      return "f16";
    case ir::DType::kF32:
      return "f32";
    case ir::DType::kF64:
      return "f64";
    case ir::DType::kBool:
      return "i1";
    case ir::DType::kBF16:
      return "bf16";
  }
  TPU_CHECK_NOT_IMPLEMENTED(false, "StableHLO emitter: dtype code ", static_cast<int>(t), " has no StableHLO type");
  return "";
}

bool elem_is_float(const std::string& e) { return e == "f16" || e == "bf16" || e == "f32" || e == "f64"; }
bool elem_is_unsigned(const std::string& e) { return e == "i1" || e.rfind("ui", 0) == 0; }

int elem_bits(const std::string& e) {
  if (e == "i1") return 1;
  if (e == "bf16") return 16;
  size_t digits = e.find_first_of("0123456789");
  return std::stoi(e.substr(digits));
}

std::string float_literal(double v, const std::string& e) {
  char buf[32];
  if (e == "f64") {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
  } else if (e == "f32") {
    float f = static_cast<float>(v);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    std::snprintf(buf, sizeof buf, "0x%08X", bits);
  } else if (e == "f16") {
    c10::Half h = static_cast<c10::Half>(v);  // as torch.tensor(v, dtype=float16) rounds
    std::snprintf(buf, sizeof buf, "0x%04X", static_cast<unsigned>(h.x));
  } else if (e == "bf16") {
    c10::BFloat16 h = static_cast<c10::BFloat16>(v);
    std::snprintf(buf, sizeof buf, "0x%04X", static_cast<unsigned>(h.x));
  } else {
    TPU_CHECK(false, "StableHLO emitter: float literal for non-float type ", e);
  }
  return buf;
}

std::string int_literal(int64_t v, const std::string& e) {
  if (e == "i1") return v != 0 ? "true" : "false";
  if (e == "i8") return std::to_string(static_cast<int8_t>(v));
  if (e == "i16") return std::to_string(static_cast<int16_t>(v));
  if (e == "i32") return std::to_string(static_cast<int32_t>(v));
  if (e == "i64") return std::to_string(v);
  if (e == "ui8") return std::to_string(static_cast<uint8_t>(v));
  if (e == "ui32") return std::to_string(static_cast<uint32_t>(v));
  if (e == "ui64") return std::to_string(static_cast<uint64_t>(v));
  TPU_CHECK(false, "StableHLO emitter: integer literal for type ", e);
  return "";
}

std::string i64_array(const std::vector<int64_t>& v) {
  if (v.empty()) return "array<i64>";
  std::string s = "array<i64: ";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ">";
}

std::string i64_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Body::fresh() { return "%v" + std::to_string((*counter_)++); }

void Body::line(const std::string& text) {
  out_->append(static_cast<size_t>(indent_), ' ');
  *out_ += text;
  *out_ += '\n';
}

static std::string signature(const std::vector<Val>& operands, const std::vector<TType>& results) {
  std::string s = "(";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].type.str();
  s += ") -> ";
  if (results.size() == 1) return s + results[0].str();
  s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].str();
  return s + ")";
}

static std::string call(const std::string& name, const std::vector<Val>& operands, const std::string& attrs,
                        const std::string& regions) {
  std::string s = "\"" + name + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].ref;
  s += ")";
  if (!regions.empty()) s += " (" + regions + ")";
  if (!attrs.empty()) s += " {" + attrs + "}";
  return s;
}

Val Body::op(const std::string& name, const std::vector<Val>& operands, const TType& result, const std::string& attrs,
             const std::string& regions) {
  Val v{fresh(), result};
  line(v.ref + " = " + call(name, operands, attrs, regions) + " : " + signature(operands, {result}));
  return v;
}

std::vector<Val> Body::op_n(const std::string& name, const std::vector<Val>& operands,
                            const std::vector<TType>& results, const std::string& attrs, const std::string& regions) {
  std::string base = fresh();
  line(base + ":" + std::to_string(results.size()) + " = " + call(name, operands, attrs, regions) + " : " +
       signature(operands, results));
  std::vector<Val> out;
  for (size_t i = 0; i < results.size(); ++i) out.push_back({base + "#" + std::to_string(i), results[i]});
  return out;
}

std::string Body::region(const std::vector<TType>& args,
                         const std::function<std::vector<Val>(Body&, const std::vector<Val>&)>& fn) {
  std::string text = "{\n";
  std::vector<Val> block_args;
  std::string header = "^bb0(";
  for (size_t i = 0; i < args.size(); ++i) {
    block_args.push_back({"%a" + std::to_string((*counter_)++), args[i]});
    header += (i ? ", " : "") + block_args.back().ref + ": " + args[i].str();
  }
  Body inner(&text, counter_, indent_ + 2);
  inner.line(header + "):");
  std::vector<Val> rets = fn(inner, block_args);
  std::string ret = "\"stablehlo.return\"(";
  for (size_t i = 0; i < rets.size(); ++i) ret += (i ? ", " : "") + rets[i].ref;
  ret += ") : (";
  for (size_t i = 0; i < rets.size(); ++i) ret += (i ? ", " : "") + rets[i].type.str();
  inner.line(ret + ") -> ()");
  text.append(static_cast<size_t>(indent_), ' ');
  return text + "}";
}

Val Body::compare(const char* dir, const Val& x, const Val& y) {
  const std::string& e = x.type.elem;
  const char* type = elem_is_float(e) ? "FLOAT" : elem_is_unsigned(e) ? "UNSIGNED" : "SIGNED";
  return op("stablehlo.compare", {x, y}, {"i1", x.type.shape},
            std::string("comparison_direction = #stablehlo<comparison_direction ") + dir +
                ">, compare_type = #stablehlo<comparison_type " + type + ">");
}

Val Body::convert(const Val& x, const std::string& elem) {
  if (x.type.elem == elem) return x;
  return op("stablehlo.convert", {x}, {elem, x.type.shape});
}

Val Body::bitcast(const Val& x, const std::string& elem) {
  return op("stablehlo.bitcast_convert", {x}, {elem, x.type.shape});
}

Val Body::reshape(const Val& x, const std::vector<int64_t>& shape) {
  if (x.type.shape == shape) return x;
  return op("stablehlo.reshape", {x}, {x.type.elem, shape});
}

Val Body::splat(const std::string& literal, const std::string& elem, const std::vector<int64_t>& shape) {
  TType t{elem, shape};
  return op("stablehlo.constant", {}, t, "value = dense<" + literal + "> : " + t.str());
}

Val Body::broadcast(const Val& scalar, const std::vector<int64_t>& shape) {
  if (scalar.type.shape == shape) return scalar;
  return op("stablehlo.broadcast_in_dim", {scalar}, {scalar.type.elem, shape}, "broadcast_dimensions = array<i64>");
}

Val Body::iota(const std::string& elem, const std::vector<int64_t>& shape, int64_t dim) {
  return op("stablehlo.iota", {}, {elem, shape}, "iota_dimension = " + std::to_string(dim) + " : i64");
}

}  // namespace torch_tpu::stablehlo
