// Activation capture with TransformerLens hook names (hook_embed, blocks.{l}.hook_resid_pre, ...). Capture
// is opt-in: the forward pass takes an optional ActivationCache and does nothing when it is null, so hooks
// cost nothing when off. A cache keeps the hooks whose names match its glob patterns.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tdyn {

class ActivationCache {
 public:
  // `patterns`: comma-separated shell globs (fnmatch(3)), e.g. "*", "blocks.*.hook_resid_*,hook_embed": '*' matches
  // any run of characters, dots included, '?' one character, [...] one of a set.
  explicit ActivationCache(const std::string& patterns = "*");
  // A cache that keeps nothing and only lists the hooks offered to it (offered()).
  static ActivationCache listing_only();

  // Whether the hook `name` is kept; every name asked about is recorded in offered().
  bool wants(const std::string& name) const;
  // Copies rows*cols floats (or the whole tensor of `shape`) under `name` if wanted.
  void capture(const std::string& name, const float* data, Shape shape);

  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor& at(const std::string& name) const;  // throws Error naming the hook if absent
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }

  // Every hook name a forward pass offered to this cache, kept or not.
  const std::set<std::string>& offered() const { return offered_; }
  // Throws Error naming each pattern that matches none of `hook_names` (a misspelt hook), and the hooks there are.
  void require_every_pattern_matches(const std::set<std::string>& hook_names) const;

 private:
  struct ListingOnly {};
  explicit ActivationCache(ListingOnly) {}

  std::vector<std::string> patterns_;
  std::map<std::string, Tensor> tensors_;
  mutable std::set<std::string> offered_;
};

// The hook names with each layer's written once as {l} ("blocks.{l}.hook_resid_pre"), in name order.
std::vector<std::string> hook_name_templates(const std::set<std::string>& hook_names);

}  // namespace tdyn
