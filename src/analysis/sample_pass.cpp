#include "analysis/sample_pass.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>

#include <fmt/format.h>

#include "analysis/power.h"
#include "core/error.h"
#include "core/ranks.h"
#include "model/hooks.h"

namespace tdyn {
namespace {

using topology::CorrelationAccumulator;

constexpr char kMagic[8] = {'T', 'D', 'Y', 'N', 'P', 'A', 'S', 'S'};
constexpr uint32_t kFileVersion = 1;
constexpr double kBufferVersion = 1;

uint64_t fnv1a(const void* data, size_t size, uint64_t hash = 1469598103934665603ull) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

const Tensor& boundary_activation(const SequenceState& state, const ResidualBoundary& b, int64_t n_layers) {
  if (b.sublayer < 0) return state.resid_post.at(n_layers - 1);
  return b.sublayer % 2 == 0 ? state.resid_pre.at(b.layer) : state.resid_mid.at(b.layer);
}

std::span<const float> rows_of(const Tensor& t) { return {t.ptr(), static_cast<size_t>(numel(t.shape))}; }

PassSums empty_sums(const PassSpec& spec, int64_t d) {
  PassSums s;
  s.probe_values.resize(spec.probes.size());
  if (spec.correlations) s.correlations.assign(spec.boundaries.size(), CorrelationAccumulator(d));
  if (spec.jacobians)
    for (const auto& b : spec.boundaries)
      s.jacobian_sums.push_back(b.sublayer < 0 ? linalg::Matrix() : linalg::Matrix::Zero(d, d));
  return s;
}

// The sums of samples [begin, end): samples spread over the threads statically, each thread's sums merged in
// thread order, so the result depends only on the samples and the thread count.
PassSums run_chunk(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                   int64_t begin, int64_t end, const PassSpec& spec) {
  const int64_t n_boundaries = static_cast<int64_t>(spec.boundaries.size());
  const int64_t d = transformer.config().d_model, n_layers = transformer.config().n_layers;
  struct ThreadSums {
    std::vector<CorrelationAccumulator> correlations;
    std::vector<StructuredMean> means;
    int64_t samples = 0, tokens = 0, pairs = 0;
  };
  // Probe values per sample of the chunk, appended in sample order below.
  std::vector<std::vector<std::vector<double>>> probes(end - begin, std::vector<std::vector<double>>(spec.probes.size()));
  std::vector<int64_t> probe_boundary;
  for (const TokenProbe& p : spec.probes) {
    const auto at = std::find_if(spec.boundaries.begin(), spec.boundaries.end(), [&](const auto& b) { return b.hook == p.hook; });
    TDYN_CHECK(at != spec.boundaries.end());
    probe_boundary.push_back(at - spec.boundaries.begin());
  }
  auto measure = [&](int64_t sample, const std::function<const Tensor&(int64_t)>& activation) {
    for (size_t p = 0; p < spec.probes.size(); ++p) {
      const Tensor& x = activation(probe_boundary[p]);
      std::vector<double>& out = probes[sample - begin][p];
      for (int64_t i = 0; i < x.dim(0); ++i) {
        const linalg::Vector row = Eigen::Map<const Eigen::VectorXf>(x.row(i), x.dim(1)).cast<double>();
        out.push_back(spec.probes[p].basis.size() == 0 ? row.norm() : alignment(row, spec.probes[p].basis));
      }
    }
  };
  const int n_threads = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(end - begin)));
  std::vector<ThreadSums> threads(n_threads);
  for (auto& t : threads) {
    if (spec.correlations) t.correlations.assign(n_boundaries, CorrelationAccumulator(d));
    t.means.resize(n_boundaries);
  }
  std::string patterns;  // exact hook names: the forward pass without Jacobians captures only the boundaries
  for (const auto& b : spec.boundaries) patterns += (patterns.empty() ? "" : ",") + b.hook;
  int64_t failed_sample = -1;
  std::exception_ptr error;

#pragma omp parallel num_threads(n_threads)
  {
    ThreadSums& mine = threads[omp_get_thread_num()];
#pragma omp for schedule(static, 1)
    for (int64_t i = begin; i < end; ++i) {
      try {
        const std::vector<int32_t>& ids = samples[i].ids;
        if (jacobians) {
          const SequenceState state = jacobians->run(ids);
          measure(i, [&](int64_t b) -> const Tensor& { return boundary_activation(state, spec.boundaries[b], n_layers); });
          if (spec.correlations)
            for (int64_t b = 0; b < n_boundaries; ++b)
              mine.correlations[b].add_rows(rows_of(boundary_activation(state, spec.boundaries[b], n_layers)));
          if (spec.jacobians) {
            const std::vector<int64_t> positions = spec.positions.resolve(state.n_pos);
            for (int64_t pos : positions)
              for (int64_t b = 0; b < n_boundaries; ++b) {
                const ResidualBoundary& boundary = spec.boundaries[b];
                if (boundary.sublayer < 0) continue;
                const Sublayer which = boundary.sublayer % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp;
                mine.means[b].add(jacobians->structure(state, boundary.layer, which, pos));
              }
            mine.pairs += static_cast<int64_t>(positions.size());
          }
        } else {
          ActivationCache cache(patterns);
          transformer.forward(ids, &cache);
          measure(i, [&](int64_t b) -> const Tensor& { return cache.at(spec.boundaries[b].hook); });
          if (spec.correlations)
            for (int64_t b = 0; b < n_boundaries; ++b) mine.correlations[b].add_rows(rows_of(cache.at(spec.boundaries[b].hook)));
        }
        mine.tokens += static_cast<int64_t>(ids.size());
        ++mine.samples;
      } catch (...) {
#pragma omp critical(tdyn_pass_error)
        if (failed_sample < 0 || i < failed_sample) failed_sample = i, error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);  // the first failing sample's error, whatever the timing

  PassSums part = empty_sums(spec, d);
  std::vector<StructuredMean> means(n_boundaries);
  for (const ThreadSums& t : threads) {
    part.n_samples += t.samples, part.n_tokens += t.tokens, part.n_pairs += t.pairs;
    for (size_t b = 0; b < part.correlations.size(); ++b) part.correlations[b].merge(t.correlations[b]);
    for (int64_t b = 0; b < n_boundaries; ++b) means[b].merge(t.means[b]);
  }
  if (spec.jacobians)
    for (int64_t b = 0; b < n_boundaries; ++b)
      if (means[b].count() > 0) part.jacobian_sums[b] = means[b].sum();
  for (const auto& sample : probes)
    for (size_t p = 0; p < sample.size(); ++p) part.probe_values[p].insert(part.probe_values[p].end(), sample[p].begin(), sample[p].end());
  return part;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// Indices of this rank's chunks, in order.
std::vector<int64_t> chunks_of_this_rank(int64_t n_samples, int64_t chunk) {
  std::vector<int64_t> chunks;
  for (int64_t c = ranks().rank; c * chunk < n_samples; c += ranks().size) chunks.push_back(c);
  return chunks;
}

}  // namespace

nlohmann::json PassSpec::to_json() const {
  std::vector<std::string> hooks;
  for (const auto& b : boundaries) hooks.push_back(b.hook);
  nlohmann::json probe_list = nlohmann::json::array();
  for (const TokenProbe& p : probes)
    probe_list.push_back({{"name", p.name}, {"hook", p.hook}, {"k", p.basis.cols()},
                          {"basis_fnv1a", hex64(fnv1a(p.basis.data(), p.basis.size() * sizeof(double)))}});
  return {{"boundaries", hooks}, {"correlations", correlations}, {"jacobians", jacobians},
          {"positions", positions.to_string()}, {"chunk", chunk}, {"probes", probe_list}};
}

void PassSums::add(const PassSums& other) {
  TDYN_CHECK(other.correlations.size() == correlations.size() && other.jacobian_sums.size() == jacobian_sums.size());
  n_samples += other.n_samples, n_tokens += other.n_tokens, n_pairs += other.n_pairs;
  for (size_t b = 0; b < correlations.size(); ++b) correlations[b].merge(other.correlations[b]);
  for (size_t b = 0; b < jacobian_sums.size(); ++b)
    if (jacobian_sums[b].size() > 0) jacobian_sums[b] += other.jacobian_sums[b];
  TDYN_CHECK(other.probe_values.size() == probe_values.size());
  for (size_t p = 0; p < probe_values.size(); ++p)
    probe_values[p].insert(probe_values[p].end(), other.probe_values[p].begin(), other.probe_values[p].end());
}

std::vector<linalg::Matrix> PassSums::mean_jacobians() const {
  if (n_pairs == 0) fail("no (sample, position) pair was summed, so there are no mean Jacobians");
  std::vector<linalg::Matrix> means;
  for (const auto& s : jacobian_sums) means.push_back(s.size() > 0 ? linalg::Matrix(s / static_cast<double>(n_pairs)) : linalg::Matrix());
  return means;
}

std::vector<double> PassSums::to_buffer() const {
  std::vector<double> out = {kBufferVersion, double(n_samples), double(n_tokens), double(n_pairs), double(correlations.size())};
  for (const auto& c : correlations) {
    const std::vector<double> b = c.to_buffer();
    out.push_back(static_cast<double>(b.size()));
    out.insert(out.end(), b.begin(), b.end());
  }
  out.push_back(static_cast<double>(jacobian_sums.size()));
  for (const auto& m : jacobian_sums) {
    out.push_back(static_cast<double>(m.rows()));
    out.push_back(static_cast<double>(m.cols()));
    out.insert(out.end(), m.data(), m.data() + m.size());
  }
  out.push_back(static_cast<double>(probe_values.size()));
  for (const auto& values : probe_values) {
    out.push_back(static_cast<double>(values.size()));
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

PassSums PassSums::from_buffer(const std::vector<double>& buffer) {
  size_t at = 0;
  // Reads a count and checks it against what is left, so a damaged buffer cannot drive an allocation.
  auto count = [&](const char* what, double limit) {
    if (at >= buffer.size()) fail("pass sums: the buffer ends before {}", what);
    const double v = buffer[at++];
    if (!(v >= 0 && v <= limit && v == std::floor(v))) fail("pass sums: {} is {} (expected a whole number up to {})", what, v, limit);
    return static_cast<int64_t>(v);
  };
  if (buffer.empty() || buffer[0] != kBufferVersion) fail("pass sums: unknown buffer version");
  at = 1;
  PassSums s;
  const double most = 9007199254740992.0;  // 2^53
  s.n_samples = count("the sample count", most);
  s.n_tokens = count("the token count", most);
  s.n_pairs = count("the pair count", most);
  const int64_t n_correlations = count("the number of correlation accumulators", double(buffer.size() - at));
  for (int64_t i = 0; i < n_correlations; ++i) {
    const int64_t n = count("a correlation accumulator's size", double(buffer.size() - at));
    s.correlations.push_back(CorrelationAccumulator::from_buffer({buffer.data() + at, static_cast<size_t>(n)}));
    at += n;
  }
  const int64_t n_jacobians = count("the number of Jacobian sums", double(buffer.size() - at));
  for (int64_t i = 0; i < n_jacobians; ++i) {
    const int64_t rows = count("a Jacobian sum's rows", double(buffer.size() - at));
    const int64_t cols = count("a Jacobian sum's columns", double(buffer.size() - at));
    if (rows * cols > static_cast<int64_t>(buffer.size() - at)) fail("pass sums: the buffer ends inside Jacobian sum {}", i);
    s.jacobian_sums.push_back(Eigen::Map<const linalg::Matrix>(buffer.data() + at, rows, cols));
    at += rows * cols;
  }
  const int64_t n_probes = count("the number of probes", double(buffer.size() - at));
  for (int64_t i = 0; i < n_probes; ++i) {
    const int64_t n = count("a probe's value count", double(buffer.size() - at));
    s.probe_values.emplace_back(buffer.begin() + at, buffer.begin() + at + n);
    at += n;
  }
  if (at != buffer.size()) fail("pass sums: {} values left over after the last sum", buffer.size() - at);
  return s;
}

nlohmann::json pass_identity(const nlohmann::json& model, const std::vector<Sample>& samples, const PassSpec& spec) {
  uint64_t hash = fnv1a(nullptr, 0);
  int64_t tokens = 0;
  for (const Sample& s : samples) {
    const int64_t n = static_cast<int64_t>(s.ids.size());
    hash = fnv1a(&n, sizeof n, hash);
    hash = fnv1a(s.ids.data(), s.ids.size() * sizeof(int32_t), hash);
    tokens += n;
  }
  return {{"model", model},
          {"samples", {{"count", samples.size()}, {"tokens", tokens}, {"ids_fnv1a", hex64(hash)}}},
          {"spec", spec.to_json()}};
}

int64_t samples_of_this_rank(int64_t n_samples, const PassSpec& spec) {
  const int64_t chunk = std::max<int64_t>(1, spec.chunk);
  int64_t count = 0;
  for (int64_t c : chunks_of_this_rank(n_samples, chunk)) count += std::min(chunk, n_samples - c * chunk);
  return count;
}

PassSums run_pass(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                  const PassSpec& spec, const nlohmann::json& identity, const PassControl& control) {
  TDYN_CHECK(!spec.jacobians || jacobians);
  TDYN_CHECK(!jacobians || &jacobians->transformer() == &transformer);
  const Ranks& me = ranks();
  const int64_t d = transformer.config().d_model;
  const int64_t n_samples = static_cast<int64_t>(samples.size()), chunk = std::max<int64_t>(1, spec.chunk);
  const std::vector<int64_t> my_chunks = chunks_of_this_rank(n_samples, chunk);
  const nlohmann::json header_base = {{"identity", identity}, {"rank", me.rank}, {"ranks", me.size}, {"chunks", my_chunks.size()}};
  auto say = [&](const std::string& text) {
    if (control.note) control.note(text);
  };

  PassSums total = empty_sums(spec, d);
  size_t done = 0;  // chunks of my_chunks already in `total`
  if (control.resume && !control.checkpoint.empty()) {
    if (fs::exists(control.checkpoint)) {
      PassFile file = load_pass(control.checkpoint);
      nlohmann::json found = file.header;
      const nlohmann::json chunks_done = found["chunks_done"];
      found.erase("chunks_done");
      if (found != header_base || !chunks_done.is_number_unsigned())
        fail("{}: the checkpoint is of a different run (its model, samples, options or rank count differ: {} vs now {}); "
             "remove it to start afresh", control.checkpoint.string(), found.dump(), header_base.dump());
      done = chunks_done.get<size_t>();
      if (done > my_chunks.size()) fail("{}: the checkpoint claims {} of {} chunks", control.checkpoint.string(), done, my_chunks.size());
      total = std::move(file.sums);
      say(fmt::format("resuming from {}: {} of {} samples done", control.checkpoint.string(), total.n_samples, n_samples));
      if (control.progress && done > 0) control.progress(total.n_samples);
    } else {
      say(fmt::format("no checkpoint at {}: starting from the first sample", control.checkpoint.string()));
    }
  }

  auto last_write = std::chrono::steady_clock::now();
  int64_t since_write = 0;
  for (; done < my_chunks.size(); ++done) {
    const int64_t begin = my_chunks[done] * chunk, end = std::min(n_samples, begin + chunk);
    total.add(run_chunk(transformer, jacobians, samples, begin, end, spec));
    since_write += end - begin;
    if (control.progress) control.progress(end - begin);
    if (control.checkpoint.empty() || done + 1 == my_chunks.size()) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write).count();
    if ((control.checkpoint_samples > 0 && since_write >= control.checkpoint_samples) ||
        (control.checkpoint_seconds > 0 && seconds >= control.checkpoint_seconds)) {
      nlohmann::json header = header_base;
      header["chunks_done"] = done + 1;
      save_pass(control.checkpoint, {header, total});
      last_write = std::chrono::steady_clock::now();
      since_write = 0;
    }
  }

  if (me.size > 1) {
    std::vector<std::vector<double>> shares = gather_to_root(total.to_buffer());
    if (!control.checkpoint.empty()) fs::remove(control.checkpoint);
    if (!me.root()) finish_worker();
    total = PassSums::from_buffer(shares[0]);
    for (size_t r = 1; r < shares.size(); ++r) total.add(PassSums::from_buffer(shares[r]));
  }
  if (spec.correlations && total.n_tokens < 2)
    fail("{} samples gave {} tokens; a correlation needs at least 2", n_samples, total.n_tokens);
  if (spec.jacobians && total.n_pairs == 0)
    fail("no (sample, position) pair for the mean Jacobians: {} samples, positions '{}'", n_samples, spec.positions.to_string());
  if (!control.checkpoint.empty()) fs::remove(control.checkpoint);
  return total;
}

void save_pass(const fs::path& path, const PassFile& file) {
  const std::string header = file.header.dump();
  const std::vector<double> values = file.sums.to_buffer();
  std::string bytes(kMagic, sizeof kMagic);
  auto put = [&bytes](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  const uint64_t header_size = header.size(), n_values = values.size();
  put(&kFileVersion, sizeof kFileVersion);
  put(&header_size, sizeof header_size);
  bytes += header;
  put(&n_values, sizeof n_values);
  put(values.data(), values.size() * sizeof(double));
  const uint64_t checksum = fnv1a(bytes.data(), bytes.size());
  put(&checksum, sizeof checksum);
  write_file_atomic(path, bytes);
}

PassFile load_pass(const fs::path& path) {
  const std::string bytes = read_file(path);
  const std::string name = path.string();
  size_t at = 0;
  auto take = [&](void* out, size_t n, const char* what) {
    if (bytes.size() - at < n) fail("{}: truncated pass file (it ends inside {})", name, what);
    std::memcpy(out, bytes.data() + at, n);
    at += n;
  };
  char magic[sizeof kMagic];
  take(magic, sizeof magic, "the magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) fail("{}: not a tdyn pass file", name);
  uint32_t version = 0;
  take(&version, sizeof version, "the version");
  if (version != kFileVersion) fail("{}: pass file version {} (this tdyn reads version {})", name, version, kFileVersion);
  uint64_t header_size = 0, n_values = 0, checksum = 0;
  take(&header_size, sizeof header_size, "the header size");
  if (header_size > bytes.size() - at) fail("{}: truncated pass file (header of {} bytes)", name, header_size);
  const std::string header = bytes.substr(at, header_size);
  at += header_size;
  take(&n_values, sizeof n_values, "the value count");
  if (n_values > (bytes.size() - at) / sizeof(double)) fail("{}: truncated pass file ({} values announced)", name, n_values);
  std::vector<double> values(n_values);
  take(values.data(), n_values * sizeof(double), "the sums");
  const size_t checked = at;
  take(&checksum, sizeof checksum, "the checksum");
  if (at != bytes.size()) fail("{}: {} unexpected bytes after the checksum", name, bytes.size() - at);
  if (checksum != fnv1a(bytes.data(), checked)) fail("{}: checksum mismatch: the pass file is damaged", name);
  PassFile file;
  try {
    file.header = nlohmann::json::parse(header);
    if (!file.header.is_object()) fail("the header is not a JSON object");
    file.sums = PassSums::from_buffer(values);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad header: {}", name, e.what());
  } catch (const Error& e) {
    fail("{}: {}", name, e.what());
  }
  return file;
}

}  // namespace tdyn
