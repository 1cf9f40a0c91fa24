#include "analysis/pass/run.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "analysis/jacobian/jacobian_sums.h"
#include "analysis/pass/accumulator.h"
#include "analysis/power/pass.h"
#include "analysis/topology/correlation_sums.h"
#include "core/error.h"
#include "core/ranks.h"
#include "kernels/serial_blas.h"
#include "model/hooks.h"
#include "model/sequence_state.h"

namespace tdyn {
namespace {

// Numbers the temporary pass files of this process.
std::atomic<int64_t> g_temporary_passes{0};

// Indices of this rank's chunks, in order.
std::vector<int64_t> chunks_of_this_rank(int64_t n_samples, int64_t chunk) {
  std::vector<int64_t> chunks;
  for (int64_t c = ranks().rank; c * chunk < n_samples; c += ranks().size) chunks.push_back(c);
  return chunks;
}

// ---- One layer over this rank's samples -------------------------------------------------------------------

// Where each of this rank's samples keeps its rows in the working buffers.
struct SampleRows {
  std::vector<int64_t> samples;  // indices into the samples, this rank's, in order
  std::vector<int64_t> offset;   // first token row of each, and the total at the end
};

class LayerRunner {
 public:
  LayerRunner(const Transformer& t, const std::vector<Sample>& samples, const PassSpec& spec, const SampleRows& rows, float* states,
              float* kv, const std::map<int64_t, int64_t>& kv_slot, int64_t kv_stride)
      : t_(t), samples_(samples), spec_(spec), rows_(rows), states_(states), kv_(kv), kv_slot_(kv_slot), kv_stride_(kv_stride) {}

  // The layer over this rank's samples, each measurement's sums with their threads' parts merged.
  std::vector<std::unique_ptr<LayerAccumulator>> run(int64_t layer, const std::vector<std::unique_ptr<PassMeasurement>>& measurements,
                                                     const std::function<void(int64_t)>& progress) const {
    const ModelConfig& c = t_.config();
    const int64_t n_mine = static_cast<int64_t>(rows_.samples.size());
    const int n_threads = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(n_mine)));
    std::vector<std::unique_ptr<LayerAccumulator>> sums;
    for (const auto& m : measurements) sums.push_back(m->begin_layer(layer, c.n_layers, n_threads));
    // The layer's projections widened to float32 once, not again by every sample's products.
    const Transformer layer_model(with_float32_layer(t_.shared_model(), layer));

    for (const auto& group : groups()) {
      const int64_t begin = group.first, end = group.second;  // plain variables: the lambdas below capture them
      // Each sample's entry one per thread, the layer on the group's rows stacked (one product per projection over
      // all threads, the attention mix one sample per thread), then the measurements one sample per thread, slice by
      // slice after each measurement's work for the whole slice (the Jacobian positions' input projections).
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
      std::vector<PassSample> left;
      for (int64_t j = 0; j < end - begin; ++j) left.push_back({rows_.samples[begin + j], layer, &states[j]});
      for (const auto& slice : slices(begin, end, states)) {
        const int64_t first = slice.first, last = slice.second;
        for (const auto& s : sums) s->before_slice(std::span<const PassSample>(left).subspan(first - begin, last - first));
        on_samples(first, last, n_threads, [&](int64_t i) {
          leave(layer, i, xs[i - begin], kvs[i - begin]);
          for (const auto& s : sums) s->add(left[i - begin], omp_get_thread_num());
          report(progress);
        });
      }
    }
    for (const auto& s : sums) s->merge_threads();
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

  // One sample of the layer done, told from whichever thread finished it.
  static void report(const std::function<void(int64_t)>& progress) {
    if (!progress) return;
    std::exception_ptr stop;  // nothing may leave an OpenMP critical section by an exception
#pragma omp critical(tdyn_pass_progress)
    try {
      progress(1);
    } catch (...) {
      stop = std::current_exception();
    }
    if (stop) std::rethrow_exception(stop);
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

// The pass's measurements, as its spec asks for them.
std::vector<std::unique_ptr<PassMeasurement>> measurements_of(const PassSpec& spec, const Transformer& transformer,
                                                             const JacobianModel* jacobians) {
  std::vector<std::unique_ptr<PassMeasurement>> out;
  if (spec.correlations) out.push_back(correlation_measurement(spec.boundaries, transformer.config().d_model));
  if (spec.jacobians) out.push_back(jacobian_measurement(*jacobians, transformer, spec));
  if (!spec.probes.empty()) out.push_back(probe_measurement(spec.probes, spec.boundaries));
  return out;
}

// Rank 0 adds every other rank's sums of the layer to its own, in rank order.
void add_other_ranks(const std::vector<std::unique_ptr<LayerAccumulator>>& sums) {
  std::vector<double> mine;
  for (const auto& s : sums) append_piece(mine, s->serialise());
  const std::vector<std::vector<double>> shares = gather_to_root(mine);
  for (size_t r = 1; r < shares.size(); ++r) {
    const std::vector<std::span<const double>> of_rank = pieces(shares[r]);
    TDYN_CHECK(of_rank.size() == sums.size());
    for (size_t m = 0; m < sums.size(); ++m) sums[m]->merge(of_rank[m]);
  }
}

}  // namespace

PassFile run_pass(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                  const PassSpec& spec, const nlohmann::json& identity, const PassControl& control) {
  TDYN_CHECK(!spec.jacobians || jacobians);
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
    const LayerRunner runner(transformer, samples, spec, rows, states.data(), kv.data(), kv_slot, kv_stride);

    const std::vector<std::unique_ptr<PassMeasurement>> measurements = measurements_of(spec, transformer, jacobians);
    for (int64_t layer = first_layer; layer < c.n_layers; ++layer) {
      const std::vector<std::unique_ptr<LayerAccumulator>> sums = runner.run(layer, measurements, control.progress);
      for (const auto& m : measurements) m->end_layer(layer, layer + 1 < c.n_layers);
      if (me.size > 1) add_other_ranks(sums);
      if (!me.root()) continue;
      for (const auto& s : sums) s->write(*writer);
      writer->section(kLayerDone, layer, {});
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
