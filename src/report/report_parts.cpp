#include "report/report_parts.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace tdyn {

using json = nlohmann::json;

namespace json_lookup {


const json* find(const json& root, std::string_view pointer) {
  try {
    const json::json_pointer path{std::string(pointer)};
    return root.contains(path) ? &root[path] : nullptr;
  } catch (const json::exception&) {  // not a JSON pointer
    return nullptr;
  }
}

std::optional<double> number(const json& root, std::string_view pointer) {
  const json* j = find(root, pointer);
  if (!j || !j->is_number()) return std::nullopt;
  const double v = j->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

const json& array_at(const json& root, std::string_view pointer) {
  static const json empty = json::array();
  const json* j = find(root, pointer);
  return j && j->is_array() ? *j : empty;
}

std::string text_at(const json& root, std::string_view pointer) {
  const json* j = find(root, pointer);
  if (!j || j->is_null()) return "";
  if (j->is_number_float()) return fmt::format("{:.4g}", j->get<double>());  // no 17-digit noise on the page
  return j->is_string() ? j->get<std::string>() : j->dump();
}

}  // namespace json_lookup

using namespace json_lookup;

json read_json(const fs::path& file, std::string* error) {
  try {
    return json::parse(read_file(file));
  } catch (const std::exception& e) {
    *error = fmt::format("cannot read {}: {}", file.string(), e.what());
    return nullptr;
  }
}

namespace {

// The init control's parts under DIR/`rel_dir` (see load_report_parts), each with `error` when the part failed.
void add_init_parts(std::vector<ReportPart>& parts, const fs::path& dir, const std::string& rel_dir, const std::string& error) {
  auto add = [&](const std::string& kind, int64_t seed, const std::string& rel) {
    ReportPart p{rel, rel, nullptr, ""};
    p.init_seed = seed, p.control_kind = kind;
    if (fs::exists(dir / rel / "results.json")) p.json = read_json(dir / rel / "results.json", &p.error);
    if (p.json.is_null() && p.error.empty()) p.error = error.empty() ? "no results.json" : error;
    parts.push_back(std::move(p));
  };
  if (fs::exists(dir / rel_dir / "results.json")) {  // the one-seed layout
    add("init", 0, rel_dir);
    if (fs::exists(dir / rel_dir / "topology" / "results.json")) add("init", 0, rel_dir + "/topology");
    return;
  }
  bool any = false;
  for (const std::string kind : {"init", "scaled"}) {
    const std::string prefix = kind == "init" ? "seed-" : "scaled-";
    std::vector<int64_t> seeds;
    if (fs::is_directory(dir / rel_dir))
      for (const auto& entry : fs::directory_iterator(dir / rel_dir)) {
        const std::string name = entry.path().filename().string();
        if (!entry.is_directory() || name.rfind(prefix, 0) != 0) continue;
        const std::string digits = name.substr(prefix.size());
        if (!digits.empty() && digits.size() < 10 && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
          seeds.push_back(std::stoll(digits));
      }
    std::sort(seeds.begin(), seeds.end());
    for (int64_t seed : seeds)
      for (const char* part : {"power", "power-l2", "jacobian", "topology"}) {
        const std::string rel = fmt::format("{}/{}{}/{}", rel_dir, prefix, seed, part);
        if (fs::is_directory(dir / rel)) add(kind, seed, rel), any = true;
      }
  }
  if (!any && !error.empty()) {  // the control failed before any seed wrote its directory
    ReportPart p{rel_dir, rel_dir, nullptr, error};
    p.init_seed = 0, p.control_kind = "init";
    parts.push_back(std::move(p));
  }
}

}  // namespace

std::vector<ReportPart> load_report_parts(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail("report: '{}' is not a directory", dir.string());
  std::vector<ReportPart> parts;
  std::string error;
  const fs::path top = dir / "results.json";
  json top_json = fs::exists(top) ? read_json(top, &error) : json(nullptr);
  if (!top_json.is_null() && text_at(top_json, "/command") != "analyze") {
    parts.push_back({text_at(top_json, "/command"), "", std::move(top_json), ""});
    parts.back().dir = dir;
    return parts;
  }
  if (!error.empty()) parts.push_back({"results.json", "", nullptr, error});

  // The analyze layout. Its results.json names the parts in the order they ran and says why one is missing.
  std::vector<std::string> names;
  const json& listed = array_at(top_json, "/results/order");
  for (const json& n : listed)
    if (n.is_string()) names.push_back(n.get<std::string>());
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && fs::exists(entry.path() / "results.json")) found.push_back(entry.path().filename().string());
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    static const std::vector<std::string> order = {"power", "power-l2", "jacobian", "topology", "particles"};
    auto rank = [](const std::string& s) { return std::find(order.begin(), order.end(), s) - order.begin(); };
    return std::pair(rank(a), a) < std::pair(rank(b), b);
  });
  for (const auto& f : found)
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
  for (const auto& name : names) {
    ReportPart p{name, name, nullptr, ""};
    const json* info = find(top_json, "/results/parts/" + name);
    const std::string status = info ? text_at(*info, "/status") : "";
    if (info) {
      const std::string sub = text_at(*info, "/dir");
      if (!sub.empty() && sub.find("..") == std::string::npos && sub[0] != '/') p.rel_dir = sub;
    }
    if (status == "skipped") p.error = "skipped (--skip)";
    else if (status == "failed") p.error = "failed: " + text_at(*info, "/error");
    if (name == "init" && !p.rel_dir.empty()) {
      add_init_parts(parts, dir, p.rel_dir, p.error);
      continue;
    }
    if (fs::exists(dir / p.rel_dir / "results.json")) p.json = read_json(dir / p.rel_dir / "results.json", &p.error);
    else if (p.error.empty()) p.error = "no results.json";
    parts.push_back(std::move(p));
  }
  // The sample subsets: DIR/subsets/subset-g/PART (the first may also have power and topology, on the controls'
  // samples), or in the earlier layout DIR/subsets/subset-g/results.json, a jacobian.
  for (int64_t g = 0; fs::is_directory(dir / "subsets" / fmt::format("subset-{}", g)); ++g) {
    const std::string subset = fmt::format("subsets/subset-{}", g);
    for (const std::string& rel : {subset + "/power", subset + "/power-l2", subset + "/jacobian", subset + "/topology", subset}) {
      if (!fs::exists(dir / rel / "results.json")) continue;
      ReportPart p{rel, rel, nullptr, ""};
      p.subset = g;
      p.json = read_json(dir / rel / "results.json", &p.error);
      parts.push_back(std::move(p));
    }
  }
  // The nested sample sets: the first ⌈S/4⌉ and ⌈S/2⌉ samples.
  for (const auto& [name, fraction] : {std::pair{"quarter", 4}, std::pair{"half", 2}})
    for (const char* part : {"jacobian"}) {
      const std::string rel = fmt::format("nested/{}/{}", name, part);
      if (!fs::exists(dir / rel / "results.json")) continue;
      ReportPart p{rel, rel, nullptr, ""};
      p.nested = fraction;
      p.json = read_json(dir / rel / "results.json", &p.error);
      parts.push_back(std::move(p));
    }
  // A comparison in the directory (analyze's side-by-side: the model beside its initialisation) is the overview, first;
  // then the model's own parts, and only then the controls', so that no control's section sits among the model's.
  std::stable_sort(parts.begin(), parts.end(), [](const ReportPart& a, const ReportPart& b) {
    const auto rank = [](const ReportPart& p) { return text_at(p.json, "/command") == "compare" ? 0 : p.is_model_part() ? 1 : 2; };
    return rank(a) < rank(b);
  });
  for (ReportPart& p : parts) p.dir = dir / p.rel_dir;
  if (parts.empty())
    fail("report: no results.json in '{}' or its subdirectories; give the --out directory of an analysis", dir.string());
  return parts;
}

}  // namespace tdyn
