// Activation capture with TransformerLens hook names (hook_embed, blocks.{l}.hook_resid_pre, ...). Capture
// is opt-in: the forward pass takes an optional ActivationCache and does nothing when it is null, so hooks
// cost nothing when off. A cache keeps the hooks whose names match its glob patterns.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tdyn {

class ActivationCache {
 public:
  // `patterns`: comma-separated shell globs (fnmatch(3)), e.g. "*", "blocks.*.hook_resid_*,hook_embed": '*' matches
  // any run of characters, dots included, '?' one character, [...] one of a set.
  explicit ActivationCache(const std::string& patterns = "*");

  bool wants(const std::string& name) const;
  // Copies rows*cols floats (or the whole tensor of `shape`) under `name` if wanted.
  void capture(const std::string& name, const float* data, Shape shape);

  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor& at(const std::string& name) const;  // throws Error naming the hook if absent
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }

 private:
  std::vector<std::string> patterns_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace tdyn
