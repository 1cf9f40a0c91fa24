#include "io/hub_cache.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/error.h"

namespace tdyn {
namespace {

bool is_existing_directory(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The revisions a cache can name: its refs (relative names such as main or pr/1), for error messages.
std::vector<std::string> ref_names(const fs::path& cache) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!is_existing_directory(cache / "refs")) return names;
  for (auto it = fs::recursive_directory_iterator(cache / "refs", ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) names.push_back(fs::relative(it->path(), cache / "refs").generic_string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> snapshot_names(const fs::path& cache) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(cache / "snapshots", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool is_hex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// The commit `revision` names in `cache`: a ref's content, or a snapshot named by the commit or a unique prefix
// of at least 7 hex digits (as git abbreviates).
std::string commit_of(const fs::path& cache, const std::string& revision) {
  const fs::path relative = fs::path(revision).lexically_normal();
  if (revision.empty() || relative.is_absolute() || *relative.begin() == "..")
    fail("'{}' is not a revision name (cache '{}')", revision, cache.string());
  std::error_code ec;
  if (fs::is_regular_file(cache / "refs" / relative, ec)) {
    std::string commit = read_file(cache / "refs" / relative);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (!is_hex(commit)) fail("'{}' should hold a commit hash but holds '{}'", (cache / "refs" / relative).string(), commit);
    return commit;
  }
  const std::vector<std::string> snapshots = snapshot_names(cache);
  if (is_hex(revision) && revision.size() >= 7) {
    std::vector<std::string> matches;
    for (const auto& s : snapshots)
      if (s.starts_with(revision)) matches.push_back(s);
    if (matches.size() == 1) return matches[0];
    if (matches.size() > 1) fail("revision '{}' is ambiguous in cache '{}': it begins {}", revision, cache.string(), joined(matches));
  }
  fail("no revision '{}' in cache '{}': its refs are {}; its snapshots {}", revision, cache.string(), joined(ref_names(cache)),
       joined(snapshots));
}

// A snapshot whose links all reach their blobs.
fs::path checked_snapshot(const fs::path& cache, const std::string& revision) {
  const std::string commit = commit_of(cache, revision);
  const fs::path snapshot = cache / "snapshots" / commit;
  if (!is_existing_directory(snapshot))
    fail("revision '{}' of cache '{}' is commit {}, but snapshots/{} is missing (the download did not finish?)", revision,
         cache.string(), commit, commit);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snapshot, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code link_ec;
    if (it->is_symlink(link_ec) && !fs::exists(it->path(), link_ec))
      fail("'{}' links to '{}', which does not exist (an interrupted download? fetch the revision again)", it->path().string(),
           fs::read_symlink(it->path(), link_ec).string());
  }
  if (ec) fail("cannot list snapshot '{}': {}", snapshot.string(), ec.message());
  return snapshot;
}

}  // namespace

bool is_hub_cache_dir(const fs::path& dir) {
  return is_existing_directory(dir / "snapshots") && (is_existing_directory(dir / "refs") || is_existing_directory(dir / "blobs"));
}

fs::path resolve_checkpoint(const std::string& spec) {
  std::error_code ec;
  if (fs::exists(spec, ec)) return is_hub_cache_dir(spec) ? checked_snapshot(spec, "main") : fs::path(spec);
  const size_t at = spec.rfind('@');
  if (at == std::string::npos || at == 0) return spec;
  const fs::path cache = spec.substr(0, at);
  if (!fs::exists(cache, ec)) return spec;  // neither exists: the caller says so, naming what was given
  if (!is_hub_cache_dir(cache))
    fail("'{}' is not a Hugging Face hub cache directory (no snapshots/ beside refs/ or blobs/), so '@{}' names no "
         "revision in it", cache.string(), spec.substr(at + 1));
  return checked_snapshot(cache, spec.substr(at + 1));
}

}  // namespace tdyn
