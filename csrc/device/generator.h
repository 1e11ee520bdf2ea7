// Per-device random number generator: counter-based Philox state (seed, offset).
//
// Design: a random op never consumes host-side randomness. Its program takes the generator's
// seed and current offset as runtime inputs and the generator's offset advances by the number
// of Philox counters the program uses (known at compile time), so the same seed gives the same
// numbers in every mode, on every runtime, and regardless of when the op actually executes.
// The state tensor (get_rng_state) is 16 bytes: seed then offset, both little-endian uint64.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <mutex>

namespace torch_tpu::device {

class TpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;  // picks a nondeterministic seed, returns it
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserves `counters` Philox counters: returns (seed, first offset). Thread-safe.
  std::pair<uint64_t, uint64_t> reserve(uint64_t counters);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a device (created on first use). Throws for an invalid index.
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torch_tpu::device
