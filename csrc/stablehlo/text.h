// Writing MLIR text in the generic operation syntax: SSA names, tensor types, literals, regions.
//
// Design: the emitter (emitter.cpp) talks only to `Body`, which appends one operation per call and
// returns the SSA value it defines, typed, so the emitter composes ops like expressions. Types are
// element-type strings ("f32", "ui32", "i1") because the translation also needs types the IR does
// not have (the unsigned words of Philox). One counter names every value of the function, so
// values defined inside regions never shadow outer ones.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace torch_tpu::stablehlo {

struct TType {
  std::string elem;  // MLIR element type: f16 bf16 f32 f64 i1 i8 i16 i32 i64 ui8 ui32 ui64
  std::vector<int64_t> shape;
  std::string str() const;  // "tensor<2x3xf32>", "tensor<i64>"
};

struct Val {
  std::string ref;  // "%v3", "%arg0", "%r2#1"
  TType type;
};

// The MLIR element type of an IR dtype.
std::string elem_of(ir::DType t);
bool elem_is_float(const std::string& e);
bool elem_is_unsigned(const std::string& e);  // ui* and i1 (compare_type UNSIGNED)
int elem_bits(const std::string& e);

// Literal text of `v` converted to element type `e` the way torch converts a Python number
// (float types: exact bit pattern in hex, so inf/NaN/-0 survive; integers wrap; i1 is != 0).
std::string float_literal(double v, const std::string& e);
std::string int_literal(int64_t v, const std::string& e);

class Body {
 public:
  Body(std::string* out, int* counter, int indent) : out_(out), counter_(counter), indent_(indent) {}

  // One operation with one result: %vN = "name"(operands) {attrs} : (types) -> result.
  Val op(const std::string& name, const std::vector<Val>& operands, const TType& result, const std::string& attrs = "",
         const std::string& regions = "");
  // One operation with several results; returns %vN#0, %vN#1, ...
  std::vector<Val> op_n(const std::string& name, const std::vector<Val>& operands, const std::vector<TType>& results,
                        const std::string& attrs, const std::string& regions);
  // A region ({ ^bb0(args): body; "stablehlo.return"(...) }) whose block arguments have types
  // `args`; `fn` emits the body and returns the values to return.
  std::string region(const std::vector<TType>& args,
                     const std::function<std::vector<Val>(Body&, const std::vector<Val>&)>& fn);
  void line(const std::string& text);

  // Shorthands (results keep the first operand's shape).
  Val unary(const std::string& name, const Val& x) { return op(name, {x}, x.type); }
  Val binary(const std::string& name, const Val& x, const Val& y) { return op(name, {x, y}, x.type); }
  Val compare(const char* dir, const Val& x, const Val& y);  // dir: "EQ", "LT", ...
  Val select(const Val& pred, const Val& t, const Val& f) { return op("stablehlo.select", {pred, t, f}, t.type); }
  Val convert(const Val& x, const std::string& elem);
  Val bitcast(const Val& x, const std::string& elem);
  Val reshape(const Val& x, const std::vector<int64_t>& shape);
  // A constant of `shape` with every element `literal` (from float_literal/int_literal).
  Val splat(const std::string& literal, const std::string& elem, const std::vector<int64_t>& shape = {});
  Val fsplat(double v, const std::string& elem, const std::vector<int64_t>& shape = {}) {
    return splat(float_literal(v, elem), elem, shape);
  }
  Val isplat(int64_t v, const std::string& elem, const std::vector<int64_t>& shape = {}) {
    return splat(int_literal(v, elem), elem, shape);
  }
  // Broadcast a 0-d value to `shape`.
  Val broadcast(const Val& scalar, const std::vector<int64_t>& shape);
  Val iota(const std::string& elem, const std::vector<int64_t>& shape, int64_t dim);

 private:
  std::string fresh();

  std::string* out_;
  int* counter_;
  int indent_;
};

std::string i64_array(const std::vector<int64_t>& v);  // "array<i64: 1, 2>"
std::string i64_list(const std::vector<int64_t>& v);   // "[1, 2]"

}  // namespace torch_tpu::stablehlo
