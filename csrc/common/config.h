// The one registry of TORCH_TPU_* environment variables.
//
// Every knob is declared once in config.cpp's table (name, default, meaning); C++ reads values
// through these accessors, Python lists them (torch_tpu.config) and docs/env.md is checked
// against the table by a test, so documentation cannot drift from the code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_tpu::config {

struct EnvVar {
  const char* name;
  const char* default_value;
  const char* doc;
};

// All registered variables, in documentation order. Never throws.
const std::vector<EnvVar>& registry();

// Raw value of a registered variable (the default when unset). Throws c10::Error for a name
// missing from the registry (a programming error).
std::string get(const char* name);
// The raw value when the variable is set (even to ""), nullopt when unset: for variables whose
// "set but empty" differs from unset (TORCH_TPU_CACHE_DIR="" disables the disk tier; an empty
// TORCH_TPU_NUM_DEVICES counts as unset). Throws like get() for an unregistered name.
std::optional<std::string> get_if_set(const char* name);
// An integer (the whole value; throws c10::ValueError naming the variable otherwise).
int64_t get_int(const char* name);
// get_int, in [lo, hi]: throws c10::ValueError naming the variable, its value and the range.
int64_t get_int_in(const char* name, int64_t lo, int64_t hi);
// A size (parse_size) of at least lo bytes: throws c10::ValueError naming the variable, its
// value and the accepted range.
uint64_t get_size(const char* name, uint64_t lo = 0);
bool get_bool(const char* name);
// Parses "8GB", "512MiB", "1073741824" (bytes). Throws c10::ValueError on malformed input and
// on sizes of 2^64 bytes or more.
uint64_t parse_size(const std::string& text);

}  // namespace torch_tpu::config
