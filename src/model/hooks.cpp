#include "model/hooks.h"

#include <fnmatch.h>

#include "core/error.h"
#include "core/text.h"

namespace tdyn {

ActivationCache::ActivationCache(const std::string& patterns) {
  for (std::string& p : split_list(patterns))
    if (!p.empty()) patterns_.push_back(std::move(p));
  if (patterns_.empty()) fail("empty hook pattern (use '*' for every hook)");
}

bool ActivationCache::wants(const std::string& name) const {
  for (const auto& p : patterns_) {
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
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
