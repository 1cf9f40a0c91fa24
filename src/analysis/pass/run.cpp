#include "analysis/pass/run.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/power/spectra.h"
#include "core/error.h"
#include "core/ranks.h"
#include "linalg/gemm.h"
#include "model/hooks.h"

namespace tdyn {
namespace {

using topology::CorrelationAccumulator;

// Numbers the temporary pass files of this process.
std::atomic<int64_t> g_temporary_passes{0};

// Indices of this rank's chunks, in order.
std::vector<int64_t> chunks_of_this_rank(int64_t n_samples, int64_t chunk) {
  std::vector<int64_t> chunks;
  for (int64_t c = ranks().rank; c * chunk < n_samples; c += ranks().size) chunks.push_back(c);
  return chunks;
}

// ---- One layer over this rank's samples -------------------------------------------------------------------

// What the pass visits at one layer: the boundaries whose activation it makes (resid_pre and resid_mid of the
// layer; after the last layer also the final resid_post) and the probes measured there.
struct LayerPlan {
  std::vector<int64_t> boundaries;  // indices into PassSpec::boundaries
  std::vector<int64_t> probes;      // indices into PassSpec::probes
  std::vector<int64_t> probe_slot;  // per probe of the layer: its boundary's slot in `boundaries`
};

LayerPlan plan_layer(const PassSpec& spec, int64_t layer, int64_t n_layers) {
  LayerPlan plan;
  for (size_t b = 0; b < spec.boundaries.size(); ++b) {
    const ResidualBoundary& x = spec.boundaries[b];
    if ((x.sublayer >= 0 && x.layer == layer) || (x.sublayer < 0 && layer == n_layers - 1)) plan.boundaries.push_back(b);
  }
  for (size_t p = 0; p < spec.probes.size(); ++p)
    for (size_t slot = 0; slot < plan.boundaries.size(); ++slot)
      if (spec.boundaries[plan.boundaries[slot]].hook == spec.probes[p].hook) {
        plan.probes.push_back(p);
        plan.probe_slot.push_back(slot);
      }
  return plan;
}

const Tensor& boundary_activation(const SequenceState& state, const ResidualBoundary& b, int64_t layer) {
  if (b.sublayer < 0) return state.resid_post.at(layer);
  return b.sublayer % 2 == 0 ? state.resid_pre.at(layer) : state.resid_mid.at(layer);
}

// The sums of one layer's boundaries (in LayerPlan order).
struct LayerSums {
  std::vector<CorrelationAccumulator> correlations;  // per boundary, when PassSpec::correlations
  std::vector<linalg::Matrix> jacobian_sums;         // per boundary, [0 × 0] for the final one or without Jacobians
  // Per probe of the layer: each sample's values by sample index. Under MPI a rank's samples are every N-th chunk, so
  // only the index puts the ranks' values back in sample order.
  std::vector<std::map<int64_t, std::vector<double>>> probes;

  // A flat float64 buffer for the reduction across ranks (add() reads it into sums of the same shapes).
  std::vector<double> to_buffer() const {
    std::vector<double> out;
    for (const auto& c : correlations) {
      const std::vector<double> b = c.to_buffer();
      out.push_back(static_cast<double>(b.size()));
      out.insert(out.end(), b.begin(), b.end());
    }
    for (const auto& m : jacobian_sums) out.insert(out.end(), m.data(), m.data() + m.size());
    for (const auto& p : probes) {
      out.push_back(static_cast<double>(p.size()));
      for (const auto& [sample, values] : p) {
        out.push_back(static_cast<double>(sample));
        out.push_back(static_cast<double>(values.size()));
        out.insert(out.end(), values.begin(), values.end());
      }
    }
    return out;
  }
  // Adds another rank's share, read from its buffer.
  void add(const std::vector<double>& buffer) {
    size_t at = 0;
    auto next = [&] {
      TDYN_CHECK(at < buffer.size());
      return static_cast<size_t>(buffer[at++]);
    };
    auto count = [&] {  // of the values that follow
      const size_t n = next();
      TDYN_CHECK(n <= buffer.size() - at);
      return n;
    };
    for (auto& c : correlations) {
      const size_t n = count();
      c.merge(CorrelationAccumulator::from_buffer({buffer.data() + at, n}));
      at += n;
    }
    for (auto& m : jacobian_sums) {
      TDYN_CHECK(static_cast<size_t>(m.size()) <= buffer.size() - at);
      m += Eigen::Map<const linalg::Matrix>(buffer.data() + at, m.rows(), m.cols());
      at += m.size();
    }
    for (auto& p : probes)
      for (size_t entries = count(); entries > 0; --entries) {
        const auto sample = static_cast<int64_t>(next());
        const size_t n = count();
        TDYN_CHECK(p.emplace(sample, std::vector<double>(buffer.begin() + at, buffer.begin() + at + n)).second);
        at += n;
      }
    TDYN_CHECK(at == buffer.size());
  }
};

// Where each of this rank's samples keeps its rows in the working buffers.
struct SampleRows {
  std::vector<int64_t> samples;  // indices into the samples, this rank's, in order
  std::vector<int64_t> offset;   // first token row of each, and the total at the end
};

class LayerRunner {
 public:
  LayerRunner(const Transformer& t, const JacobianModel* jacobians, const std::vector<Sample>& samples, const PassSpec& spec,
              const SampleRows& rows, float* states, float* kv, const std::map<int64_t, int64_t>& kv_slot, int64_t kv_stride)
      : t_(t), jacobians_(jacobians), samples_(samples), spec_(spec), rows_(rows), states_(states), kv_(kv), kv_slot_(kv_slot),
        kv_stride_(kv_stride) {}

  LayerSums run(int64_t layer, const std::function<void(int64_t)>& progress) const {
    const ModelConfig& c = t_.config();
    const LayerPlan plan = plan_layer(spec_, layer, c.n_layers);
    const int64_t n_mine = static_cast<int64_t>(rows_.samples.size()), n_slots = static_cast<int64_t>(plan.boundaries.size());
    struct ThreadSums {
      std::vector<CorrelationAccumulator> correlations;
      std::vector<StructuredMean> means;
    };
    const int n_threads = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(n_mine)));
    std::vector<ThreadSums> threads(n_threads);
    for (auto& t : threads) {
      if (spec_.correlations) t.correlations.assign(n_slots, CorrelationAccumulator(c.d_model));
      t.means.resize(n_slots);
    }
    std::vector<std::vector<std::vector<double>>> probes(n_mine, std::vector<std::vector<double>>(plan.probes.size()));

    if (spec_.jacobians) jacobians_->prepare_layer(layer);
    // The layer's projections widened to float32 once, not again by every sample's products.
    const Transformer layer_model(with_float32_layer(t_.shared_model(), layer));
    // Sample i's probes, correlations and Jacobian structures (the structures' input projections from `projected`,
    // its entries from `pair` on), into the calling thread's sums.
    auto measure = [&](int64_t i, const SequenceState& state, const Projected& projected, int64_t pair) {
      ThreadSums& mine = threads[omp_get_thread_num()];
      for (size_t q = 0; q < plan.probes.size(); ++q) {
        const TokenProbe& probe = spec_.probes[plan.probes[q]];
        const Tensor& x = boundary_activation(state, spec_.boundaries[plan.boundaries[plan.probe_slot[q]]], layer);
        if (probe.covariance_layer >= 0) {
          const linalg::Matrix tokens =
              Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(x.ptr(), x.dim(0), x.dim(1))
                  .cast<double>();
          probes[i][q] = token_covariance_alignments(tokens, probe.basis.cols(),
                                                     token_covariance_seed(probe.covariance_layer, rows_.samples[i]));
          continue;
        }
        for (int64_t r = 0; r < x.dim(0); ++r) {
          const linalg::Vector row = Eigen::Map<const Eigen::VectorXf>(x.row(r), x.dim(1)).cast<double>();
          probes[i][q].push_back(probe.basis.size() == 0 ? row.norm() : alignment(row, probe.basis));
        }
      }
      if (spec_.correlations)
        for (int64_t s = 0; s < n_slots; ++s) {
          const Tensor& x = boundary_activation(state, spec_.boundaries[plan.boundaries[s]], layer);
          mine.correlations[s].add_rows(std::span<const float>(x.ptr(), x.data.size()));
        }
      if (spec_.jacobians) {
        for (int64_t pos : spec_.positions.resolve(state.n_pos)) {
          for (int64_t s = 0; s < n_slots; ++s) {
            const ResidualBoundary& b = spec_.boundaries[plan.boundaries[s]];
            if (b.sublayer < 0) continue;
            const Sublayer which = sublayer_of(b);
            mine.means[s].add(jacobians_->structure(state, layer, which, pos, &projected.of[static_cast<int>(which)][pair]));
          }
          ++pair;
        }
      }
      if (progress) {
        std::exception_ptr stop;  // nothing may leave an OpenMP critical section by an exception
#pragma omp critical(tdyn_pass_progress)
        try {
          progress(1);
        } catch (...) {
          stop = std::current_exception();
        }
        if (stop) std::rethrow_exception(stop);
      }
    };

    for (const auto& group : groups()) {
      const int64_t begin = group.first, end = group.second;  // plain variables: the lambdas below capture them
      // Each sample's entry one per thread, the layer on the group's rows stacked (one product per projection over
      // all threads, the attention mix one sample per thread), then each sample's measurements one per thread, slice
      // by slice after the slice's Jacobian positions' input projections (again one product per projection).
      std::vector<Tensor> xs(end - begin), embeddings(end - begin);
      std::vector<KVCache> kvs(end - begin);
      std::vector<SequenceState> states(end - begin);
      on_samples(begin, end, n_threads,
                 [&](int64_t i) { enter(layer_model, layer, i, xs[i - begin], embeddings[i - begin], kvs[i - begin]); });
      std::vector<LayerEntry> entries;
      for (int64_t j = 0; j < end - begin; ++j)
        entries.push_back({samples_[rows_.samples[begin + j]].ids, &embeddings[j], &xs[j], &kvs[j], &states[j]});
      run_attention_half(layer_model, layer, entries, spec_.zeroed);
      run_mlp_half(layer_model, layer, entries, spec_.zeroed);
      for (const auto& slice : slices(begin, end, states)) {
        const int64_t first = slice.first, last = slice.second;
        const Projected projected = project(layer, plan, begin, first, last, states);
        on_samples(first, last, n_threads, [&](int64_t i) {
          leave(layer, i, xs[i - begin], kvs[i - begin]);
          measure(i, states[i - begin], projected, spec_.jacobians ? projected.first_pair[i - first] : 0);
        });
      }
    }

    LayerSums sums;
    if (spec_.correlations) sums.correlations.assign(n_slots, CorrelationAccumulator(c.d_model));
    std::vector<StructuredMean> means(n_slots);
    for (const ThreadSums& t : threads)
      for (int64_t s = 0; s < n_slots; ++s) {
        if (spec_.correlations) sums.correlations[s].merge(t.correlations[s]);
        means[s].merge(t.means[s]);
      }
    if (spec_.jacobians)
      for (int64_t s = 0; s < n_slots; ++s)
        sums.jacobian_sums.push_back(spec_.boundaries[plan.boundaries[s]].sublayer < 0 ? linalg::Matrix()
                                     : means[s].count() > 0 ? means[s].sum() : linalg::Matrix::Zero(c.d_model, c.d_model));
    sums.probes.resize(plan.probes.size());
    for (int64_t i = 0; i < n_mine; ++i)
      for (size_t q = 0; q < plan.probes.size(); ++q) sums.probes[q][rows_.samples[i]] = std::move(probes[i][q]);
    return sums;
  }

 private:
  // The rows a group stacks: enough for the products to run near the machine's peak (a d × 14336 projection
  // gains little beyond), few enough that the group's activations stay small beside the layer's weights.
  static constexpr int64_t kGroupRows = 2048;

  // This rank's samples in groups [begin, end) of consecutive ones inside one chunk, so that a sample meets the same
  // neighbours in one process and under MPI (ranks take whole chunks), with at most kGroupRows rows unless alone.
  std::vector<std::pair<int64_t, int64_t>> groups() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    const auto n = static_cast<int64_t>(rows_.samples.size());
    for (int64_t begin = 0, end = 1; begin < n; begin = end++) {
      while (end < n && rows_.samples[end] / spec_.chunk == rows_.samples[begin] / spec_.chunk &&
             rows_.offset[end + 1] - rows_.offset[begin] <= kGroupRows)
        ++end;
      out.emplace_back(begin, end);
    }
    return out;
  }

  // The Jacobian positions whose input projections are made in one product (per projection and sublayer): enough to
  // pass over the float64 weights once for many positions, few enough that the products stay small (a d_mlp × 256
  // float64 matrix) when every position of a sample is asked for.
  static constexpr int64_t kProjectedPairs = 256;

  static Sublayer sublayer_of(const ResidualBoundary& b) { return b.sublayer % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp; }

  // The group [begin, end) (states[j] is sample begin + j's) in slices [first, last) of consecutive samples with at
  // most kProjectedPairs Jacobian positions, unless alone.
  std::vector<std::pair<int64_t, int64_t>> slices(int64_t begin, int64_t end, const std::vector<SequenceState>& states) const {
    std::vector<std::pair<int64_t, int64_t>> out;
    auto pairs = [&](int64_t i) {
      return spec_.jacobians ? static_cast<int64_t>(spec_.positions.resolve(states[i - begin].n_pos).size()) : 0;
    };
    for (int64_t first = begin, last = begin + 1; first < end; first = last++) {
      for (int64_t n = pairs(first); last < end && n + pairs(last) <= kProjectedPairs; ++last) n += pairs(last);
      out.emplace_back(first, last);
    }
    return out;
  }

  // The input projections of the slice's Jacobian positions, per sublayer kind the layer's boundaries ask for, in
  // the order samples then positions; first_pair[j]: sample first + j's first entry.
  struct Projected {
    std::array<std::vector<StepProjections>, 2> of;  // [Sublayer]
    std::vector<int64_t> first_pair;
  };
  Projected project(int64_t layer, const LayerPlan& plan, int64_t begin, int64_t first, int64_t last,
                    const std::vector<SequenceState>& states) const {
    Projected out;
    if (!spec_.jacobians) return out;
    std::vector<StatePosition> at;
    for (int64_t i = first; i < last; ++i) {
      out.first_pair.push_back(static_cast<int64_t>(at.size()));
      const SequenceState& state = states[i - begin];
      for (int64_t pos : spec_.positions.resolve(state.n_pos)) at.push_back({&state, pos});
    }
    for (int64_t slot : plan.boundaries) {
      const ResidualBoundary& b = spec_.boundaries[slot];
      if (b.sublayer < 0) continue;
      std::vector<StepProjections>& of = out.of[static_cast<int>(sublayer_of(b))];
      if (of.empty() && !at.empty()) of = jacobians_->project_inputs(at, layer, sublayer_of(b));
    }
    return out;
  }

  // Runs task(i) for the samples [begin, end), one per thread with serial BLAS (sample j of the group on thread
  // j mod n_threads, so each thread's sums take the same samples in every run). The first failing sample's error
  // is rethrown, whatever the timing.
  static void on_samples(int64_t begin, int64_t end, int n_threads, const std::function<void(int64_t)>& task) {
    n_threads = std::max<int>(1, std::min<int64_t>(n_threads, end - begin));
    int64_t failed = -1;
    std::exception_ptr error;
    SerialBlas serial_blas(n_threads > 1);
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
    for (int64_t i = begin; i < end; ++i) {
      try {
        task(i);
      } catch (...) {
#pragma omp critical(tdyn_pass_error)
        if (failed < 0 || i < failed) failed = i, error = std::current_exception();
      }
    }
    serial_blas.restore();
    if (error) std::rethrow_exception(error);
  }

  // Where this rank's i-th sample enters layer `layer` of `t` (the pass's model with that layer in float32): its
  // residual state from the working buffer (the embeddings at layer 0), the embeddings themselves where per-layer
  // inputs read them, and its KV storage for the layer's source (with the keys kept there when an earlier layer is
  // the source).
  void enter(const Transformer& t, int64_t layer, int64_t i, Tensor& x, Tensor& embeddings, KVCache& kv) const {
    const ModelConfig& c = t.config();
    const int64_t d = c.d_model, n = rows_.offset[i + 1] - rows_.offset[i], n_rows = rows_.offset.back();
    const std::vector<int32_t>& ids = samples_[rows_.samples[i]].ids;
    if (layer == 0) {
      x = t.embed(ids, 0);
    } else {
      x = Tensor({n, d});
      std::memcpy(x.ptr(), states_ + ((layer % 2) * n_rows + rows_.offset[i]) * d, x.data.size() * sizeof(float));
    }
    if (c.d_per_layer_input > 0) embeddings = layer == 0 ? x : t.embed(ids, 0);

    kv.k.assign(c.n_layers, Tensor());
    kv.v.assign(c.n_layers, Tensor());
    const int64_t src = t.layer_config(layer).kv_source;
    float* kept_k = kept_keys(i, src);
    if (!kept_k) return;
    const int64_t kv_dim = c.n_kv_heads * t.layer_config(src).d_head;
    kv.k[src] = Tensor({n, kv_dim});
    kv.v[src] = Tensor({n, kv_dim});
    if (src != layer) {
      std::memcpy(kv.k[src].ptr(), kept_k, n * kv_dim * sizeof(float));
      std::memcpy(kv.v[src].ptr(), kept_k + n_rows * kv_stride_, n * kv_dim * sizeof(float));
    }
  }

  // Where the i-th sample's keys of KV-source layer `src` are kept (its values n_rows · kv_stride floats on), or null
  // when no later layer reads them.
  float* kept_keys(int64_t i, int64_t src) const {
    const auto slot = kv_slot_.find(src);
    if (slot == kv_slot_.end()) return nullptr;
    const int64_t kv_dim = t_.config().n_kv_heads * t_.layer_config(src).d_head;
    return kv_ + 2 * slot->second * rows_.offset.back() * kv_stride_ + rows_.offset[i] * kv_dim;
  }

  // Stores the i-th sample's hook_resid_post, the next layer's input, in the other half of the working buffer, and
  // the keys and values of `layer` where later layers read them.
  void leave(int64_t layer, int64_t i, const Tensor& x, const KVCache& kv) const {
    const int64_t n_rows = rows_.offset.back();
    std::memcpy(states_ + (((layer + 1) % 2) * n_rows + rows_.offset[i]) * x.dim(1), x.ptr(), x.data.size() * sizeof(float));
    float* kept_k = t_.layer_config(layer).kv_source == layer ? kept_keys(i, layer) : nullptr;
    if (!kept_k) return;
    std::memcpy(kept_k, kv.k[layer].ptr(), kv.k[layer].size() * sizeof(float));
    std::memcpy(kept_k + n_rows * kv_stride_, kv.v[layer].ptr(), kv.v[layer].size() * sizeof(float));
  }

  const Transformer& t_;
  const JacobianModel* jacobians_;
  const std::vector<Sample>& samples_;
  const PassSpec& spec_;
  const SampleRows& rows_;
  float* states_;  // two halves of [rows, d]: layer l reads half l % 2, writes half (l + 1) % 2
  float* kv_;      // per KV-source layer (slot): keys, then values, each rows × kv_stride floats (rows of kv_dim)
  const std::map<int64_t, int64_t>& kv_slot_;
  int64_t kv_stride_;
};

}  // namespace

// ---- The pass -----------------------------------------------------------------------------------------------

nlohmann::json PassSpec::to_json() const {
  std::vector<std::string> hooks;
  for (const auto& b : boundaries) hooks.push_back(b.hook);
  nlohmann::json probe_list = nlohmann::json::array();
  for (const TokenProbe& p : probes) {
    probe_list.push_back({{"name", p.name}, {"hook", p.hook}, {"k", p.basis.cols()},
                          {"basis_fnv1a", hex64(fnv1a(p.basis.data(), p.basis.size() * sizeof(double)))}});
    if (p.covariance_layer >= 0) probe_list.back()["covariance_layer"] = p.covariance_layer;
  }
  nlohmann::json spec = {{"boundaries", hooks}, {"correlations", correlations}, {"jacobians", jacobians},
                         {"positions", positions.to_string()}, {"chunk", chunk}, {"probes", probe_list}};
  if (!zeroed.empty()) spec["ablate"] = zeroed.to_json();  // absent without ablations, as before they existed
  return spec;
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

namespace {

// The first place where two pass headers differ, as "PATH: WAS vs now IS" (values cut short): what a resumed run
// changed, rather than both headers whole (tens of kB with the samples' identity).
std::string first_difference(const nlohmann::json& was, const nlohmann::json& now, const std::string& path = "") {
  if (was.is_object() && now.is_object()) {
    for (const auto& [key, value] : was.items()) {
      const std::string at = path.empty() ? key : path + "." + key;
      if (!now.contains(key)) return at + ": present in the file, absent now";
      if (value != now[key]) return first_difference(value, now[key], at);
    }
    for (const auto& [key, value] : now.items())
      if (!was.contains(key)) return (path.empty() ? key : path + "." + key) + ": absent in the file";
  }
  if (was.is_array() && now.is_array() && was.size() == now.size()) {
    for (size_t i = 0; i < was.size(); ++i)
      if (was[i] != now[i]) return first_difference(was[i], now[i], fmt::format("{}[{}]", path, i));
  }
  const auto brief = [](const nlohmann::json& v) {
    const std::string text = v.dump();
    return text.size() <= 80 ? text : text.substr(0, 77) + "...";
  };
  return fmt::format("{}: {} vs now {}", path.empty() ? "header" : path, brief(was), brief(now));
}

// Where rank 0's pass file starts: a new file, or an unfinished one of the same run continued after its last finished
// layer (control.resume), or a finished one (first_layer = n_layers, no writer).
struct PassStart {
  std::unique_ptr<PassWriter> writer;
  int64_t first_layer = 0;
};
PassStart start_or_resume(const fs::path& path, const nlohmann::json& header, const PassControl& control, int64_t n_layers) {
  auto say = [&](const std::string& text) {
    if (control.note) control.note(text);
  };
  PassStart start;
  if (!control.resume || !fs::exists(path)) {
    if (control.resume) say(fmt::format("no unfinished pass at {}: starting from the first layer", path.string()));
    start.writer = std::make_unique<PassWriter>(path, header);
    return start;
  }
  PassScan scan = scan_pass(path, true);
  if (scan.header != header)
    fail("{}: the pass file is of a different run ({}); rerun with the options it was made with, or remove it to "
         "start afresh", path.string(), first_difference(scan.header, header));
  if (scan.complete) {
    say(fmt::format("{}: the pass had finished; using it", path.string()));
    start.first_layer = n_layers;
  } else {
    start.first_layer = scan.layers_done;
    start.writer = std::make_unique<PassWriter>(path, scan.end_of_layers);
    say(fmt::format("resuming {}: {} of {} layers done", path.string(), start.first_layer, n_layers));
  }
  return start;
}

// The keys/values the pass keeps for KV-shared layers (Gemma 4): a slot per source layer (KV-source layer -> slot),
// and the floats per row of a slot: the widest source's (Gemma 4's full-attention heads are wider).
std::pair<std::map<int64_t, int64_t>, int64_t> kv_slots(const Transformer& t) {
  std::map<int64_t, int64_t> slot;
  int64_t stride = 0;
  for (int64_t l = 0; l < t.config().n_layers; ++l) {
    const int64_t src = t.layer_config(l).kv_source;
    if (src == l || slot.count(src)) continue;
    slot.emplace(src, static_cast<int64_t>(slot.size()));
    stride = std::max(stride, t.config().n_kv_heads * t.layer_config(src).d_head);
  }
  return {slot, stride};
}

// One finished layer's sums (all ranks' added) into the pass file, then its marker.
void write_layer(PassWriter& writer, const PassSpec& spec, int64_t layer, int64_t n_layers, const LayerSums& sums) {
  const LayerPlan plan = plan_layer(spec, layer, n_layers);
  for (size_t s = 0; s < plan.boundaries.size(); ++s) {
    if (spec.correlations) writer.section(kCorrelation, plan.boundaries[s], sums.correlations[s].to_buffer());
    if (spec.jacobians && sums.jacobian_sums[s].size() > 0) {
      const linalg::Matrix& m = sums.jacobian_sums[s];
      writer.section(kJacobianSum, plan.boundaries[s], {m.data(), static_cast<size_t>(m.size())});
    }
  }
  for (size_t q = 0; q < plan.probes.size(); ++q) {
    std::vector<double> values;  // samples in order
    for (const auto& [sample, of_sample] : sums.probes[q]) values.insert(values.end(), of_sample.begin(), of_sample.end());
    writer.section(kProbe, plan.probes[q], values);
  }
  writer.section(kLayerDone, layer, {});
}

}  // namespace

PassFile run_pass(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                  const PassSpec& spec, const nlohmann::json& identity, const PassControl& control) {
  TDYN_CHECK(!spec.jacobians || jacobians);
  TDYN_CHECK(!jacobians || &jacobians->transformer() == &transformer);
  TDYN_CHECK(!jacobians || jacobians->zeroed().to_json() == spec.zeroed.to_json());
  const Ranks& me = ranks();
  const ModelConfig& c = transformer.config();
  const int64_t n_samples = static_cast<int64_t>(samples.size()), chunk = std::max<int64_t>(1, spec.chunk);

  // The totals follow from the samples alone.
  int64_t n_tokens = 0, n_pairs = 0;
  for (const Sample& s : samples) {
    n_tokens += static_cast<int64_t>(s.ids.size());
    if (spec.jacobians && !s.ids.empty()) n_pairs += static_cast<int64_t>(spec.positions.resolve(static_cast<int64_t>(s.ids.size())).size());
  }
  if (spec.correlations && n_tokens < 2) fail("{} samples give {} tokens; a correlation needs at least 2", n_samples, n_tokens);
  if (spec.jacobians && n_pairs == 0)
    fail("no (sample, position) pair for the mean Jacobians: {} samples, positions '{}'", n_samples, spec.positions.to_string());

  SampleRows rows;
  rows.offset.push_back(0);
  for (int64_t ch : chunks_of_this_rank(n_samples, chunk))
    for (int64_t i = ch * chunk; i < std::min(n_samples, (ch + 1) * chunk); ++i) {
      rows.samples.push_back(i);
      rows.offset.push_back(rows.offset.back() + static_cast<int64_t>(samples[i].ids.size()));
    }

  const fs::path path = control.file.empty()
                            ? fs::temp_directory_path() / fmt::format("tdyn-pass-{}-{}.tdynpass", ::getpid(), g_temporary_passes++)
                            : control.file;
  const nlohmann::json header = {{"identity", identity}, {"spec", spec.to_json()}, {"ranks", me.size}};
  // Working buffers beside the file, one set per rank.
  const std::string stem = path.string() + (me.size > 1 ? fmt::format(".rank{}of{}", me.rank, me.size) : "");
  // A temporary pass that fails leaves nothing behind: no run could resume it.
  RemovedUnlessKept temporary;
  if (control.file.empty()) temporary.paths = {path, stem + ".states", stem + ".kv"};

  // Rank 0 owns the file: it starts it, or continues an unfinished one of the same run after its last layer.
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  PassStart start;
  if (me.root()) start = start_or_resume(path, header, control, c.n_layers);
  std::unique_ptr<PassWriter>& writer = start.writer;
  const int64_t first_layer = static_cast<int64_t>(broadcast_from_root(static_cast<double>(start.first_layer)));

  if (first_layer < c.n_layers) {
    // The working buffers: the residual states (two halves) and the kept keys/values.
    const auto [kv_slot, kv_stride] = kv_slots(transformer);
    const int64_t kv_floats = 2 * static_cast<int64_t>(kv_slot.size()) * rows.offset.back() * kv_stride;
    WorkBuffer states(stem + ".states", 2 * rows.offset.back() * c.d_model, first_layer > 0);
    WorkBuffer kv(stem + ".kv", kv_floats, first_layer > 0);
    const LayerRunner runner(transformer, jacobians, samples, spec, rows, states.data(), kv.data(), kv_slot, kv_stride);

    for (int64_t layer = first_layer; layer < c.n_layers; ++layer) {
      LayerSums sums = runner.run(layer, control.progress);
      if (jacobians) jacobians->release_layer(layer, layer + 1 < c.n_layers);
      if (me.size > 1) {
        const std::vector<std::vector<double>> shares = gather_to_root(sums.to_buffer());
        for (size_t r = 1; r < shares.size(); ++r) sums.add(shares[r]);
      }
      if (me.root()) write_layer(*writer, spec, layer, c.n_layers, sums);
    }
    states.remove();
    kv.remove();
  }
  if (me.root() && writer) {
    const std::vector<double> totals = {double(n_samples), double(n_tokens), double(n_pairs)};
    writer->section(kComplete, 0, totals);
    writer->sync();
  }
  temporary.kept = true;
  if (!me.root()) return PassFile::worker_share();
  PassFile file = PassFile::open(path);
  if (control.file.empty()) file.remove_when_done();
  return file;
}

}  // namespace tdyn
