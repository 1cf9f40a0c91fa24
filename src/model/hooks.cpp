#include "model/hooks.h"

#include "core/error.h"
#include "core/text.h"

namespace tdyn {

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative matcher with single-star backtracking: linear in practice, no recursion.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

ActivationCache::ActivationCache(const std::string& patterns) {
  for (std::string& p : split_list(patterns))
    if (!p.empty()) patterns_.push_back(std::move(p));
  if (patterns_.empty()) fail("empty hook pattern (use '*' for every hook)");
}

bool ActivationCache::wants(const std::string& name) const {
  for (const auto& p : patterns_) {
    if (glob_match(p, name)) return true;
  }
  return false;
}

void ActivationCache::capture(const std::string& name, const float* data, Shape shape) {
  if (!wants(name)) return;
  Tensor t(std::move(shape));
  std::copy(data, data + t.size(), t.ptr());
  tensors_[name] = std::move(t);
}

const Tensor& ActivationCache::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("hook '{}' was not captured", name);
  return it->second;
}

}  // namespace tdyn
