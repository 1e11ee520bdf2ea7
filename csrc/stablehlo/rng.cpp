#include "stablehlo/rng.h"

#include <array>
#include <cmath>
#include <numbers>

namespace torch_tpu::stablehlo {
namespace {

constexpr int64_t kMask32 = 0xFFFFFFFFLL;

// Philox4x32-10 words of counters offset + [0, n), as four ui32 tensors of shape [n].
std::array<Val, 4> philox(Body& b, const Val& seed, const Val& offset, int64_t n) {
  std::vector<int64_t> shape{n};
  Val ctr = b.binary("stablehlo.add", b.broadcast(offset, shape), b.iota("i64", shape, 0));  // wraps like int64
  Val u = b.bitcast(ctr, "ui64");
  Val mask = b.isplat(kMask32, "ui64", shape);
  Val thirty_two = b.isplat(32, "ui64", shape);
  auto lo32 = [&](const Val& v) { return b.convert(b.binary("stablehlo.and", v, mask), "ui32"); };
  auto hi32 = [&](const Val& v) { return b.convert(b.binary("stablehlo.shift_right_logical", v, thirty_two), "ui32"); };
  Val zero = b.isplat(0, "ui32", shape);
  std::array<Val, 4> c{lo32(u), hi32(u), zero, zero};

  Val s = b.bitcast(seed, "ui64");
  Val k0 = b.convert(b.binary("stablehlo.and", s, b.isplat(kMask32, "ui64")), "ui32");
  Val k1 = b.convert(b.binary("stablehlo.shift_right_logical", s, b.isplat(32, "ui64")), "ui32");
  Val m0 = b.isplat(0xD2511F53LL, "ui64", shape);
  Val m1 = b.isplat(0xCD9E8D57LL, "ui64", shape);
  Val w0 = b.isplat(0x9E3779B9LL, "ui32");
  Val w1 = b.isplat(0xBB67AE85LL, "ui32");
  for (int round = 0; round < 10; ++round) {
    Val p0 = b.binary("stablehlo.multiply", b.convert(c[0], "ui64"), m0);
    Val p1 = b.binary("stablehlo.multiply", b.convert(c[2], "ui64"), m1);
    Val x0 = b.binary("stablehlo.xor", b.binary("stablehlo.xor", hi32(p1), c[1]), b.broadcast(k0, shape));
    Val x2 = b.binary("stablehlo.xor", b.binary("stablehlo.xor", hi32(p0), c[3]), b.broadcast(k1, shape));
    c = {x0, lo32(p1), x2, lo32(p0)};
    k0 = b.binary("stablehlo.add", k0, w0);
    k1 = b.binary("stablehlo.add", k1, w1);
  }
  return c;
}

}  // namespace

Val emit_rng(Body& b, const ir::Node& node, const Val& seed, const Val& offset) {
  const std::string e = elem_of(node.dtype);
  const int64_t n = node.numel();
  std::vector<int64_t> flat{n};
  std::array<Val, 4> w = philox(b, seed, offset, n);
  Val out;
  if (node.kind == ir::OpKind::kRngUniform) {
    if (e == "f64") {
      Val hi = b.binary("stablehlo.shift_left", b.convert(w[0], "ui64"), b.isplat(21, "ui64", flat));
      Val lo = b.convert(b.binary("stablehlo.shift_right_logical", w[1], b.isplat(11, "ui32", flat)), "ui64");
      Val bits = b.binary("stablehlo.or", hi, lo);  // < 2^53: exact in f64
      out = b.binary("stablehlo.multiply", b.convert(bits, "f64"), b.fsplat(std::ldexp(1.0, -53), "f64", flat));
    } else {
      int mant = e == "f32" ? 24 : e == "f16" ? 11 : 8;  // bf16: 8
      Val bits = b.binary("stablehlo.shift_right_logical", w[0], b.isplat(32 - mant, "ui32", flat));
      // k * 2^-mant with k < 2^mant is exact in the target type, so no double rounding.
      out = b.binary("stablehlo.multiply", b.convert(bits, e), b.fsplat(std::ldexp(1.0, -mant), e, flat));
    }
  } else {
    Val scale = b.fsplat(std::ldexp(1.0, -32), "f64", flat);
    Val u1 = b.binary("stablehlo.multiply",
                      b.binary("stablehlo.add", b.convert(w[0], "f64"), b.fsplat(1.0, "f64", flat)), scale);
    Val u2 = b.binary("stablehlo.multiply", b.convert(w[1], "f64"), scale);
    Val r = b.unary("stablehlo.sqrt",
                    b.binary("stablehlo.multiply", b.fsplat(-2.0, "f64", flat), b.unary("stablehlo.log", u1)));
    Val t =
        b.unary("stablehlo.cosine", b.binary("stablehlo.multiply", b.fsplat(2.0 * std::numbers::pi, "f64", flat), u2));
    out = b.binary("stablehlo.multiply", r, t);
    // torch's f64 -> f16/bf16 conversion rounds through f32 (c10::Half/BFloat16 take a float).
    if (e == "f16" || e == "bf16") out = b.convert(out, "f32");
    out = b.convert(out, e);
  }
  return b.reshape(out, node.shape);
}

}  // namespace torch_tpu::stablehlo
