// Error checks used across the core. TPU_CHECK messages name what failed (op, dtype, shapes,
// device, bytes) so a user can act on them; they throw c10::Error subclasses, which PyTorch's
// Python bindings turn into the matching Python exceptions.
#pragma once

#include <c10/util/Exception.h>

#define TPU_CHECK(cond, ...) TORCH_CHECK(cond, "torch_tpu: ", __VA_ARGS__)
#define TPU_CHECK_INDEX(cond, ...) TORCH_CHECK_INDEX(cond, "torch_tpu: ", __VA_ARGS__)
#define TPU_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, "torch_tpu: ", __VA_ARGS__)
#define TPU_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, "torch_tpu: ", __VA_ARGS__)
#define TPU_CHECK_NOT_IMPLEMENTED(cond, ...) TORCH_CHECK_NOT_IMPLEMENTED(cond, "torch_tpu: ", __VA_ARGS__)
