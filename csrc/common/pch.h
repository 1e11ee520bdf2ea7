// Precompiled header for the core: the heavy PyTorch headers most core files need.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <torch/library.h>
