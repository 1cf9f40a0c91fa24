#include "model/hooks.h"

#include <algorithm>
#include <memory>
#include <regex>

#include <fnmatch.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/text.h"

namespace tdyn {

namespace {

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// The patterns that match none of `names`, quoted.
std::vector<std::string> unmatched(const std::vector<std::string>& patterns, const std::set<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& p : patterns) {
    bool matched = false;
    for (const auto& name : names) matched = matched || ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
    if (!matched) out.push_back("'" + p + "'");
  }
  return out;
}

}  // namespace

bool matches_glob(const std::string& patterns, const std::string& name) { return matches_any(split_list(patterns), name); }

ActivationCache::ActivationCache(const std::string& patterns) {
  for (std::string& p : split_list(patterns))
    if (!p.empty()) patterns_.push_back(std::move(p));
  if (patterns_.empty()) fail("empty hook pattern (use '*' for every hook)");
}

ActivationCache ActivationCache::keeping_nothing() { return ActivationCache(KeepingNothing{}); }

bool ActivationCache::wants(const std::string& name) const {
  offered_.insert(name);
  return matches_any(patterns_, name);
}

void ActivationCache::capture(const std::string& name, const float* data, Shape shape) {
  if (!wants(name)) return;
  Tensor t(std::move(shape));
  std::copy(data, data + t.size(), t.ptr());
  tensors_[name] = std::move(t);
}

void ActivationCache::add_edit(const std::string& patterns, Edit edit) {
  std::vector<std::string> list;
  for (std::string& p : split_list(patterns))
    if (!p.empty()) list.push_back(std::move(p));
  if (list.empty()) fail("empty edit pattern: name the hooks to edit (e.g. blocks.3.hook_resid_post)");
  if (!edit) fail("edit of '{}' has no function", patterns);
  edits_.emplace_back(std::move(list), std::move(edit));
}

ActivationCache ActivationCache::edits_only() const {
  ActivationCache out = keeping_nothing();
  out.edits_ = edits_;
  out.checked_edits_ = checked_edits_;
  return out;
}

void ActivationCache::edit_and_capture(const std::string& name, int64_t start, float* data, Shape shape) {
  offered_writable_.insert(name);
  for (const auto& [patterns, edit] : edits_)
    if (matches_any(patterns, name)) edit(name, start, data, shape);
  capture(name, data, std::move(shape));
}

void ActivationCache::check_edits(const std::set<std::string>& writable) {
  std::vector<std::string> bad;
  for (const auto& [patterns, edit] : edits_)
    for (std::string& p : unmatched(patterns, writable)) bad.push_back(std::move(p));
  if (!bad.empty())
    fail("edit pattern{} {} match{} no writable hook of this model; its writable hooks are {}", bad.size() > 1 ? "s" : "",
         fmt::join(bad, ", "), bad.size() > 1 ? "" : "es", fmt::join(hook_name_templates(writable), ", "));
  checked_edits_ = edits_.size();
}

void ActivationCache::require_every_pattern_matches(const std::set<std::string>& hook_names) const {
  const std::vector<std::string> bad = unmatched(patterns_, hook_names);
  if (!bad.empty())
    fail("hook pattern{} {} match{} no hook of this model; its hooks are {}", bad.size() > 1 ? "s" : "",
         fmt::join(bad, ", "), bad.size() > 1 ? "" : "es", fmt::join(hook_name_templates(hook_names), ", "));
}

ActivationCache::Edit zero_ablation() {
  return [](const std::string&, int64_t, float* data, const Shape& shape) { std::fill_n(data, numel(shape), 0.0f); };
}

namespace {

// The activation of `name` in `cache` as rows of `row` values, or an Error saying what is wrong.
const Tensor& rows_of(const std::map<std::string, Tensor>& cache, const std::string& name, int64_t row, const char* what) {
  auto it = cache.find(name);
  if (it == cache.end()) fail("{}: the {} pass did not capture this hook", name, what);
  const Tensor& t = it->second;
  if (t.shape.empty() || t.dim(0) == 0 || t.size() / t.dim(0) != row)
    fail("{}: the {} pass's activation has shape {}, not rows of {} values", name, what, shape_str(t.shape), row);
  return t;
}

}  // namespace

ActivationCache::Edit mean_ablation(const ActivationCache& clean) {
  auto tensors = std::make_shared<const std::map<std::string, Tensor>>(clean.tensors());
  return [tensors](const std::string& name, int64_t, float* data, const Shape& shape) {
    const int64_t n = shape[0], row = numel(shape) / n;
    const Tensor& t = rows_of(*tensors, name, row, "clean");
    std::vector<double> mean(row, 0.0);
    for (int64_t p = 0; p < t.dim(0); ++p)
      for (int64_t j = 0; j < row; ++j) mean[j] += t.data[p * row + j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < row; ++j) data[i * row + j] = static_cast<float>(mean[j] / static_cast<double>(t.dim(0)));
  };
}

ActivationCache::Edit patching(const ActivationCache& source) {
  auto tensors = std::make_shared<const std::map<std::string, Tensor>>(source.tensors());
  return [tensors](const std::string& name, int64_t start, float* data, const Shape& shape) {
    const int64_t n = shape[0], row = numel(shape) / n;
    const Tensor& t = rows_of(*tensors, name, row, "source");
    for (int64_t i = 0; i < n && start + i < t.dim(0); ++i)
      std::copy_n(t.data.data() + (start + i) * row, row, data + i * row);
  };
}

std::vector<std::string> hook_name_templates(const std::set<std::string>& hook_names) {
  static const std::regex layer(R"(^blocks\.\d+\.)");
  std::vector<std::string> out;
  for (const auto& name : hook_names) {
    std::string t = std::regex_replace(name, layer, "blocks.{l}.");
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

const Tensor& ActivationCache::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("hook '{}' was not captured", name);
  return it->second;
}

}  // namespace tdyn
