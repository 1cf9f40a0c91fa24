#include "analysis/power/steering.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "core/error.h"
#include "core/json_number.h"
#include "kernels/packed_matrix.h"

namespace tdyn {

RankOneSteering rank_one_steering(const Model& model, int64_t layer, const Vector& direction, const ZeroedParts& zeroed) {
  const int64_t d = model.config.d_model;
  if (direction.size() != d) fail("the steering direction has {} entries but d_model is {}", direction.size(), d);
  if (!(direction.norm() > 0) || !direction.allFinite()) fail("the steering direction must be finite and non-zero");
  const std::vector<bool>& heads = zeroed.layer(layer).heads;
  if (!heads.empty() && std::find(heads.begin(), heads.end(), false) == heads.end())
    fail("layer {}'s attention is ablated (every head's output set to 0): there is no O to steer; run without the "
         "steering sweep", layer);
  RankOneSteering s;
  s.layer = layer;
  s.u = direction.normalized();
  // V = U Σ Wᵀ (thin): V⁺ᵀ u = U Σ⁻¹ Wᵀ u and V⁺V u = W Wᵀ u over the singular values above round-off.
  const Matrix v = expanded_value_matrix(model, layer, zeroed);  // [n_heads * d_head, d_model]
  const linalg::SingularValueDecomposition svd = linalg::svd(v, true);
  const double cutoff = std::max(v.rows(), v.cols()) * std::numeric_limits<double>::epsilon() *
                        (svd.singular_values.size() ? svd.singular_values[0] : 0.0);
  s.w = Vector::Zero(v.rows());
  for (Index i = 0; i < svd.singular_values.size(); ++i) {
    if (svd.singular_values[i] <= cutoff) break;
    const double coefficient = svd.v.col(i).dot(s.u);
    s.w += svd.u.col(i) * (coefficient / svd.singular_values[i]);
    s.reachable += coefficient * coefficient;
  }
  if (s.reachable < 1e-12)
    fail("the steering direction is orthogonal to the row space of layer {}'s value projection: no rank-1 change of "
         "O can make it an eigenvector", layer);
  return s;
}

std::shared_ptr<const Model> steered_model(std::shared_ptr<const Model> base, const RankOneSteering& s, double c) {
  const std::shared_ptr<Model> variant = model_variant(base);
  Model& m = *variant;
  const Linear& o = base->weights.layers.at(s.layer).o;  // [d_model, n_heads * d_head]
  TDYN_CHECK(s.u.size() == o.out && s.w.size() == o.in);
  // O' = O + c u wᵀ as float32 in the base's layout ([out, in], or GPT-2 Conv1D [in, out]): for a float32 O the
  // same GEMM runs, so c = 0 reproduces the base model bit for bit.
  const Eigen::MatrixXf steered = (dense_matrix(o) + c * s.u * s.w.transpose()).cast<float>();  // column-major [out, in]
  // Column-major [out, in] is row-major [in, out]: the Conv1D layout as it is, the nn.Linear one once transposed.
  const Eigen::MatrixXf stored = o.in_out ? steered : Eigen::MatrixXf(steered.transpose());
  auto storage = std::make_shared<std::vector<float>>(stored.data(), stored.data() + stored.size());
  m.weights.owners.push_back(storage);
  StoredMatrix& steered_o = m.weights.layers[s.layer].o.w;
  steered_o = o.in_out ? StoredMatrix::of_floats(storage->data(), o.in, o.out, o.out)
                       : StoredMatrix::of_floats(storage->data(), o.out, o.in, o.in);
  if (o.w.packed) {  // products of the same kind as the base's, so that c = 0 still reproduces it bit for bit
    const std::shared_ptr<const PackedMatrix> packed = PackedMatrix::of(steered_o, o.in_out);
    m.weights.owners.push_back(packed);
    steered_o.packed = packed.get();
  }
  return variant;
}

Vector random_direction(Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gaussian;
  Vector u(d);
  for (Index i = 0; i < d; ++i) u[i] = gaussian(rng);
  return u.normalized();
}

Vector token_direction(const Model& model, int32_t token) {
  const ModelConfig& c = model.config;
  if (token < 0 || token >= c.d_vocab) fail("token {} is outside the vocabulary [0, {})", token, c.d_vocab);
  const int64_t e = c.embed_dim();
  std::vector<float> row(e);
  model.weights.embed.row_floats(token, 0, e, row.data());
  if (model.weights.embed_map) {  // ALBERT: embedding_size -> d_model
    std::vector<float> mapped(c.d_model);
    model.weights.embed_map.apply(row.data(), 1, mapped.data());
    row = std::move(mapped);
  }
  Vector u = Eigen::Map<const Eigen::VectorXf>(row.data(), static_cast<Index>(row.size())).cast<double>();
  if (!(u.norm() > 0)) fail("token {}'s embedding is zero: it defines no direction", token);
  return u.normalized();
}

nlohmann::json SteeringPoint::to_json() const {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& t : top_tokens) top.push_back({{"token", t.token}, {"probability", t.probability}});
  return {{"scale", scale},
          {"c", c},
          {"spectrum", spectrum.to_json()},
          {"eigenvector_alignment_with_u", eigenvector_alignment},
          {"final_layer_mean_alignment", mean_alignment},
          {"final_layer_min_alignment", min_alignment},
          {"mean_kl_unsteered_to_steered", mean_kl},
          {"max_kl_unsteered_to_steered", max_kl},
          {"mean_probability_of_token_closest_to_u", probability_of_argmax_u},
          {"top_tokens", top}};
}

nlohmann::json SteeringControl::to_json() const {
  return {{"seed", seed},
          {"c", c},
          {"final_layer_mean_alignment", mean_alignment_with_u},
          {"final_layer_mean_alignment_with_own_direction", mean_alignment_with_own},
          {"mean_probability_of_token_closest_to_u", probability_of_argmax_u}};
}

SteeringPoint SteeringPoint::from_json(const nlohmann::json& j) {
  SteeringPoint p;
  p.scale = number_at(j, "scale"), p.c = number_at(j, "c"), p.spectrum = DominantSpectrum::from_json(object_at(j, "spectrum"));
  p.eigenvector_alignment = number_at(j, "eigenvector_alignment_with_u");
  p.mean_alignment = number_at(j, "final_layer_mean_alignment"), p.min_alignment = number_at(j, "final_layer_min_alignment");
  p.mean_kl = number_at(j, "mean_kl_unsteered_to_steered"), p.max_kl = number_at(j, "max_kl_unsteered_to_steered");
  p.probability_of_argmax_u = number_at(j, "mean_probability_of_token_closest_to_u");
  for (const nlohmann::json& t : list_at(j, "top_tokens"))
    p.top_tokens.push_back({static_cast<int32_t>(integer_at(t, "token")), number_at(t, "probability")});
  return p;
}

SteeringControl SteeringControl::from_json(const nlohmann::json& j) {
  SteeringControl k;
  k.seed = static_cast<uint64_t>(number_at(j, "seed")), k.c = number_at(j, "c");
  k.mean_alignment_with_u = number_at(j, "final_layer_mean_alignment");
  k.mean_alignment_with_own = number_at(j, "final_layer_mean_alignment_with_own_direction");
  k.probability_of_argmax_u = number_at(j, "mean_probability_of_token_closest_to_u");
  return k;
}

nlohmann::json SteeringResult::to_json() const {
  nlohmann::json out = {{"layer", steering.layer},
                        {"reachable_fraction", steering.reachable},
                        {"lambda1_modulus", lambda1_modulus},
                        {"token_closest_to_u", token_closest_to_u},
                        {"tokens", tokens},
                        {"points", nlohmann::json::array()}};
  nlohmann::json top = nlohmann::json::array();
  for (const auto& t : unsteered_top_tokens) top.push_back({{"token", t.token}, {"probability", t.probability}});
  out["unsteered_top_tokens"] = top;
  for (const auto& p : points) out["points"].push_back(p.to_json());
  out["controls"] = nlohmann::json::array();
  for (const auto& c : controls) out["controls"].push_back(c.to_json());
  if (!points.empty())
    out["control"] = fmt::format("{} rank-1 perturbations at scale {} along random directions orthogonal to u, each of the "
                                 "same Frobenius norm as c u w^T",
                                 controls.size(), points.back().scale);
  return out;
}

namespace {

// log softmax of one row of logits, in float64.
std::vector<double> log_softmax(const float* logits, int64_t n) {
  std::vector<double> out(logits, logits + n);
  const double top = *std::max_element(out.begin(), out.end());
  double sum = 0;
  for (double v : out) sum += std::exp(v - top);
  const double log_sum = top + std::log(sum);
  for (double& v : out) v -= log_sum;
  return out;
}

std::vector<TokenProbability> top_tokens(const std::vector<double>& probabilities, int64_t k) {
  std::vector<int32_t> order(probabilities.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return probabilities[a] > probabilities[b]; });
  std::vector<TokenProbability> out;
  for (int64_t i = 0; i < k; ++i) out.push_back({order[i], probabilities[order[i]]});
  return out;
}

// The sweep's models beside the base: one per scale, and the controls at the largest scale with their directions.
struct SweepModels {
  std::vector<Transformer> steered, controls;
  std::vector<Vector> control_directions;
};

// The controls, at the largest scale: random directions orthogonal to u, each perturbation as large as u's.
void add_controls(const std::shared_ptr<const Model>& model, const SteeringOptions& options, const ZeroedParts& zeroed,
                  SteeringResult& result, SweepModels& models) {
  const ModelConfig& c = model->config;
  const Vector& u = result.steering.u;
  if (options.scales.empty() || c.d_model <= 1) return;  // with d = 1 every direction is ±u
  for (uint64_t seed = options.control_seed; static_cast<int64_t>(result.controls.size()) < options.control_draws; ++seed) {
    Vector v = random_direction(c.d_model, seed);
    v -= v.dot(u) * u;
    if (v.norm() < 1e-6) continue;  // the draw is u (a seed of u's)
    v.normalize();
    const RankOneSteering other = rank_one_steering(*model, c.n_layers - 1, v, zeroed);
    const double c_max = options.scales.back() * result.lambda1_modulus;
    const double c_other = other.w.norm() > 0 ? c_max * result.steering.w.norm() / other.w.norm() : 0.0;
    result.controls.push_back({seed, c_other, 0, 0, 0});
    models.controls.emplace_back(steered_model(model, other, c_other));
    models.control_directions.push_back(other.u);
  }
}

// The steered models, one per scale, with the spectrum of their last layer and u's alignment with its dominant
// eigenvectors.
void add_points(const std::shared_ptr<const Model>& model, const SteeringOptions& options, const ZeroedParts& zeroed,
                SteeringResult& result, SweepModels& models) {
  const int64_t last = model->config.n_layers - 1;
  for (double scale : options.scales) {
    SteeringPoint p;
    p.scale = scale;
    p.c = scale * result.lambda1_modulus;
    auto m = steered_model(model, result.steering, p.c);
    const LayerSpectrum spectrum = layer_spectrum(layer_matrix(*m, last, zeroed));
    p.spectrum = spectrum.f;
    p.eigenvector_alignment = alignment(result.steering.u, dominant_basis(spectrum.f));
    p.min_alignment = 1;
    result.points.push_back(std::move(p));
    models.steered.emplace_back(m);
  }
}

// What the sweep sums over the samples' positions besides SteeringResult's own sums.
struct SweepSums {
  std::vector<std::vector<double>> mean_probability;  // [scale][token]
  std::vector<double> unsteered_probability;          // [token]
  int64_t positions = 0;
};

// One sample through the base, every steered model and every control, its positions added to the sums. `run` runs a
// model on the sample with the final states kept (and the ablations' edits) and returns its logits and those states.
void measure_sample(const std::vector<int32_t>& ids, const Transformer& base, const SweepModels& models, int64_t vocab,
                    const std::function<std::pair<Tensor, Tensor>(const Transformer&)>& run, SteeringResult& result,
                    SweepSums& sums) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const Matrix u = result.steering.u;
  const Tensor base_logits = run(base).first;
  std::vector<std::vector<double>> base_log(n);
  for (int64_t i = 0; i < n; ++i) {
    base_log[i] = log_softmax(base_logits.row(i), vocab);
    for (int64_t v = 0; v < vocab; ++v) sums.unsteered_probability[v] += std::exp(base_log[i][v]);
  }
  for (size_t pi = 0; pi < models.steered.size(); ++pi) {
    SteeringPoint& p = result.points[pi];
    const auto [logits, final_states] = run(models.steered[pi]);
    for (int64_t i = 0; i < n; ++i) {
      const double a = alignment(token_state(final_states, i), u);
      p.mean_alignment += a;
      p.min_alignment = std::min(p.min_alignment, a);
      const std::vector<double> log_q = log_softmax(logits.row(i), vocab);
      double kl = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double pv = std::exp(base_log[i][v]);
        if (pv > 0) kl += pv * (base_log[i][v] - log_q[v]);
        sums.mean_probability[pi][v] += std::exp(log_q[v]);
      }
      p.mean_kl += kl;
      p.max_kl = std::max(p.max_kl, kl);
      p.probability_of_argmax_u += std::exp(log_q[result.token_closest_to_u]);
    }
  }
  for (size_t j = 0; j < models.controls.size(); ++j) {
    SteeringControl& k = result.controls[j];
    const auto [logits, final_states] = run(models.controls[j]);
    const Matrix own = models.control_directions[j];
    for (int64_t i = 0; i < n; ++i) {
      k.mean_alignment_with_u += alignment(token_state(final_states, i), u);
      k.mean_alignment_with_own += alignment(token_state(final_states, i), own);
      k.probability_of_argmax_u += std::exp(log_softmax(logits.row(i), vocab)[result.token_closest_to_u]);
    }
  }
  sums.positions += n;
}

// The sums over positions made means, and the top tokens of the mean distributions.
void finish_means(SweepSums& sums, int64_t top_k, SteeringResult& result) {
  result.tokens = sums.positions;
  if (sums.positions == 0) return;
  const auto positions = static_cast<double>(sums.positions);
  for (size_t pi = 0; pi < result.points.size(); ++pi) {
    SteeringPoint& p = result.points[pi];
    p.mean_alignment /= positions;
    p.mean_kl /= positions;
    p.probability_of_argmax_u /= positions;
    for (double& v : sums.mean_probability[pi]) v /= positions;
    p.top_tokens = top_tokens(sums.mean_probability[pi], top_k);
  }
  for (SteeringControl& k : result.controls) {
    k.mean_alignment_with_u /= positions, k.mean_alignment_with_own /= positions;
    k.probability_of_argmax_u /= positions;
  }
  for (double& v : sums.unsteered_probability) v /= positions;
  result.unsteered_top_tokens = top_tokens(sums.unsteered_probability, top_k);
}

}  // namespace

SteeringResult steering_sweep(std::shared_ptr<const Model> model, const Vector& direction,
                              const std::vector<Sample>& samples, const SteeringOptions& options,
                              ProgressSink& progress, const ZeroedParts& zeroed) {
  const ModelConfig& c = model->config;
  const int64_t last = c.n_layers - 1;
  SteeringResult result;
  result.steering = rank_one_steering(*model, last, direction, zeroed);
  result.lambda1_modulus = std::abs(layer_spectrum(layer_matrix(*model, last, zeroed)).f.lambda1);

  const Transformer base(model);
  {  // the token the unembedding maps u to (through the final norm / MLM head, as the stream would be)
    Tensor x({1, c.d_model});
    for (int64_t j = 0; j < c.d_model; ++j) x.data[j] = static_cast<float>(result.steering.u[j]);
    Tensor logits = base.unembed(x);
    result.token_closest_to_u = static_cast<int32_t>(std::max_element(logits.data.begin(), logits.data.end()) - logits.data.begin());
  }
  SweepModels models;
  add_controls(model, options, zeroed, result, models);
  add_points(model, options, zeroed, result, models);

  const std::string final_hook = fmt::format("blocks.{}.hook_resid_post", last);
  SweepSums sums{std::vector<std::vector<double>>(options.scales.size(), std::vector<double>(c.d_vocab, 0.0)),
                 std::vector<double>(c.d_vocab, 0.0)};
  ProgressLoop loop(progress, "steering", static_cast<int64_t>(samples.size()), "samples");
  for (const Sample& sample : samples) {
    // Every forward pass keeps the final states and runs the ablations' edits.
    auto run = [&](const Transformer& m) {
      ActivationCache cache(final_hook);
      zeroed.add_edits(cache);
      Tensor logits = m.forward(sample.ids, &cache);
      return std::pair{std::move(logits), cache.at(final_hook)};
    };
    measure_sample(sample.ids, base, models, c.d_vocab, run, result, sums);
    loop.advance();
  }
  finish_means(sums, options.top_k, result);
  return result;
}

}  // namespace tdyn
