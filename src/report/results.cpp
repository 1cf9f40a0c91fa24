#include "report/results.h"

#include <ctime>

#include "core/error.h"

namespace tdyn {

ResultsDir::ResultsDir(fs::path dir, std::string command, std::vector<std::string> argv)
    : dir_(std::move(dir)), start_(std::chrono::steady_clock::now()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) fail("cannot create output directory '{}': {}", dir_.string(), ec.message());
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
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
  const FigureFiles files = write_figure(dir_, fig);
  for (const auto& f : files.written) record_file(f, what);
  return files.note;
}

void ResultsDir::record_file(const std::string& name, const std::string& what) { json_["files"][name] = what; }

void ResultsDir::add_timing(const std::string& phase, double seconds) {
  auto& t = json_["timings"];
  t[phase] = t.value(phase, 0.0) + seconds;
}

void ResultsDir::write() const {
  nlohmann::json j = json_;
  j["timings"]["total"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  write_file_atomic(file("results.json"), j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace tdyn
