#include "report/results.h"

#include <ctime>
#include <optional>

#include <sys/stat.h>

#include "core/error.h"
#include "core/ranks.h"

namespace tdyn {

namespace {

std::optional<FileIdentity> identity_of(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileIdentity{static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

}  // namespace

ResultsDir::ResultsDir(fs::path dir, std::string command, std::vector<std::string> argv)
    : dir_(std::move(dir)), start_(std::chrono::steady_clock::now()) {
  std::error_code ec;
  created_ = fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) fail("cannot create output directory '{}': {}", dir_.string(), ec.message());
  if (fs::is_regular_file(file("results.json"))) {
    try {
      const nlohmann::json earlier = nlohmann::json::parse(read_file(file("results.json")));
      for (const auto& [name, what] : earlier.at("files").items()) {
        const fs::path relative(name);
        if (relative.is_absolute() || relative.lexically_normal().string().starts_with("..")) continue;  // not ours
        if (auto identity = identity_of(file(name))) earlier_files_.emplace_back(name, *identity);
      }
    } catch (const std::exception&) {  // not a results.json of ours: nothing of it is removed
      earlier_files_.clear();
    }
  }
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::tm utc{};
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));  // analyses may start side by side
  json_ = {{"schema_version", kResultsSchemaVersion},
           {"tool", "tdyn"},
           {"tool_version", TDYN_VERSION},
           {"command", command},
           {"argv", argv},
           {"started_utc", stamp},
           {"model", nlohmann::json::object()},
           {"options", nlohmann::json::object()},
           {"timings", nlohmann::json::object()},
           {"files", nlohmann::json::object()},
           {"results", nlohmann::json::object()}};
}

ResultsDir::~ResultsDir() {
  // Only rank 0 writes: a worker rank leaving early must not take the directory from under it.
  std::error_code ec;
  if (created_ && !written_ && ranks().root() && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

void ResultsDir::csv(const std::string& name, const std::vector<std::string>& header,
                     const std::vector<std::vector<double>>& rows, const std::string& what) {
  std::string out;
  for (size_t i = 0; i < header.size(); ++i) out += (i ? "," : "") + header[i];
  out += '\n';
  for (const auto& row : rows) {
    TDYN_CHECK(row.size() == header.size());
    for (size_t i = 0; i < row.size(); ++i) out += fmt::format("{}{:.17g}", i ? "," : "", row[i]);
    out += '\n';
  }
  write_file_atomic(file(name), out);
  record_file(name, what);
}

std::string ResultsDir::figure(const Figure& fig, const std::string& what) {
  if (!figures_) return "";
  const FigureFiles files = write_figure(dir_, fig);
  for (const auto& f : files.written) record_file(f, what);
  return files.note;
}

void ResultsDir::without_figures(const std::string& why) {
  figures_ = false;
  json_["figures"] = "not drawn: " + why;
}

void ResultsDir::record_file(const std::string& name, const std::string& what) { json_["files"][name] = what; }

void ResultsDir::add_timing(const std::string& phase, double seconds) {
  auto& t = json_["timings"];
  t[phase] = t.value(phase, 0.0) + seconds;
}

void ResultsDir::write() {
  nlohmann::json j = json_;
  j["timings"]["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  write_file_atomic(file("results.json"), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  written_ = true;
  remove_stale_files();
}

// An earlier run's file is stale unless this run recorded it or has rewritten it (a file can be written before it
// is recorded).
void ResultsDir::remove_stale_files() {
  std::vector<std::pair<std::string, FileIdentity>> undecided;
  for (auto& [name, identity] : earlier_files_) {
    if (json_["files"].contains(name) || name == "results.json") continue;
    const std::optional<FileIdentity> now = identity_of(file(name));
    if (!now) continue;                                  // already gone
    if (*now != identity) continue;                      // rewritten by this run
    std::error_code ec;
    if (!fs::remove(file(name), ec)) undecided.emplace_back(name, identity);
  }
  earlier_files_ = std::move(undecided);
}

}  // namespace tdyn
