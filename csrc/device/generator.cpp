#include "device/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/Utils.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/irange.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/check.h"
#include "device/device.h"

namespace torch_tpu::device {

TpuGenerator::TpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGenerator::get_offset() const { return offset_; }
uint64_t TpuGenerator::current_seed() const { return seed_; }

uint64_t TpuGenerator::seed() {
  std::random_device rd;
  uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  set_current_seed(s);
  return s;
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TPU_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.numel() == 16,
            "RNG state must be a torch.ByteTensor of 16 bytes (seed, offset); got ", new_state.numel(), " elements");
  const auto* p = static_cast<const uint8_t*>(new_state.data());
  uint64_t seed, offset;
  std::memcpy(&seed, p, 8);
  std::memcpy(&offset, p + 8, 8);
  seed_ = seed;
  offset_ = offset;
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  auto state = at::detail::empty_cpu({16}, at::ScalarType::Byte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  auto* p = state.data_ptr<uint8_t>();
  std::memcpy(p, &seed_, 8);
  std::memcpy(p + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TpuGenerator::reserve(uint64_t counters) {
  std::lock_guard<std::mutex> g(mutex_);
  uint64_t first = offset_;
  offset_ += counters;
  return {seed_, first};
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::vector<at::Generator>* gens = [] {
    auto* v = new std::vector<at::Generator>();
    for (c10::DeviceIndex d = 0; d < count(); ++d) v->push_back(at::make_generator<TpuGenerator>(d));
    return v;
  }();
  if (device < 0) device = current();
  check_index(device);
  return (*gens)[static_cast<size_t>(device)];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current();
  check_index(device);
  return at::make_generator<TpuGenerator>(device);
}

}  // namespace torch_tpu::device
