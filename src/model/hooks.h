// Activation capture and editing with TransformerLens hook names (hook_embed, blocks.{l}.hook_resid_pre, ...).
// Both are opt-in: the forward pass takes an optional ActivationCache and does nothing when it is null, so hooks
// cost nothing when off. A cache keeps the hooks whose names match its glob patterns, and runs its edits on the
// writable hooks whose names match theirs before keeping them: the forward pass goes on from the edited values
// (activation patching, ablation, steering).
#pragma once

#include <functional>
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
  // A cache that keeps nothing: it lists the hooks offered to it (offered()) and runs the edits it is given.
  static ActivationCache keeping_nothing();

  // Whether the hook `name` is kept; every name asked about is recorded in offered().
  bool wants(const std::string& name) const;
  // Copies rows*cols floats (or the whole tensor of `shape`) under `name` if wanted.
  void capture(const std::string& name, const float* data, Shape shape);

  // An edit receives a hook's name, the absolute position of the activation's first row (0 for a whole sequence;
  // the cache's length when generation runs a chunk against a KV cache) and the activation (row-major, of
  // `shape`, one row per position), which it may change in place.
  using Edit = std::function<void(const std::string& name, int64_t start, float* data, const Shape& shape)>;
  // Runs `edit` on every writable hook whose name matches `patterns` (globs as above); several edits of one hook
  // run in the order they were added. Transformer::forward checks the edits added since its last pass
  // (check_edits) before any work.
  void add_edit(const std::string& patterns, Edit edit);
  bool has_edits() const { return !edits_.empty(); }
  // A cache that keeps nothing and runs this one's edits: for passes whose activations are not wanted
  // (generation's steps after the prompt).
  ActivationCache edits_only() const;
  // A writable hook point: the matching edits, then capture(). Recorded in offered_writable().
  void edit_and_capture(const std::string& name, int64_t start, float* data, Shape shape);
  const std::set<std::string>& offered_writable() const { return offered_writable_; }
  // Throws Error naming each edit pattern that matches none of `writable` (the model's writable hooks), and
  // which hooks those are; otherwise every edit counts as checked.
  void check_edits(const std::set<std::string>& writable);
  bool has_unchecked_edits() const { return checked_edits_ < edits_.size(); }

  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor& at(const std::string& name) const;  // throws Error naming the hook if absent
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }

  // Every hook name a forward pass offered to this cache, kept or not.
  const std::set<std::string>& offered() const { return offered_; }
  // Throws Error naming each pattern that matches none of `hook_names` (a misspelt hook), and the hooks there are.
  void require_every_pattern_matches(const std::set<std::string>& hook_names) const;

 private:
  struct KeepingNothing {};
  explicit ActivationCache(KeepingNothing) {}

  std::vector<std::string> patterns_;
  std::map<std::string, Tensor> tensors_;
  mutable std::set<std::string> offered_;
  std::set<std::string> offered_writable_;
  std::vector<std::pair<std::vector<std::string>, Edit>> edits_;
  size_t checked_edits_ = 0;  // edits_[0, checked_edits_) matched writable hooks
};

// Ready-made edits. zero_ablation: every value 0. mean_ablation: every row (position) the mean row of the same
// hook in `clean` (a pass of the prompt without edits), so the hook carries no information about the position.
// patching: the rows at positions that `source` (a pass of another prompt) covers become its rows there; positions
// beyond it are left as they are. The latter two throw Error when their cache lacks the hook or its row size differs.
ActivationCache::Edit zero_ablation();
ActivationCache::Edit mean_ablation(const ActivationCache& clean);
ActivationCache::Edit patching(const ActivationCache& source);

// Whether `name` matches one of the comma-separated globs in `patterns` (as ActivationCache matches them).
bool matches_glob(const std::string& patterns, const std::string& name);

// The hook names with each layer's written once as {l} ("blocks.{l}.hook_resid_pre"), in name order.
std::vector<std::string> hook_name_templates(const std::set<std::string>& hook_names);

}  // namespace tdyn
