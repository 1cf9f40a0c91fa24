// Small text helpers shared by the option and spec parsers.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace tdyn {

// The items of a separated list, empty ones included: "a,,b" -> {"a", "", "b"}, "" -> {""}. Callers validate
// the items (and decide whether an empty one is an error).
inline std::vector<std::string> split_list(std::string_view text, char separator = ',') {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t end = std::min(text.find(separator, start), text.size());
    items.emplace_back(text.substr(start, end - start));
    if (end == text.size()) return items;
    start = end + 1;
  }
}

}  // namespace tdyn
