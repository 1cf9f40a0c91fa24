// Topology core throughput (SPEC §3 "Topology", §6 "Scale"):
//   - correlation accumulation, rows (tokens) per second at d = 512 and 2048: CorrelationAccumulator (one dsyrk
//     per batch) against the named baseline, a plain per-row rank-1 update of the same shifted sums, measured in
//     the same run; after the Google Benchmark table, "ratio = accumulator rows/s / rank-1 rows/s" per d;
//   - the top-k graph and signed Leiden CPM on it at d = 2048 nodes (activations from 32 signed latent factors,
//     k = 10, γ = 0.05), with the graph's size and the community count as counters.
//
//   bench_topology                       all of the above
//   bench_topology --write-graph FILE    also writes the d = 2048 top-k graph as edge-list CSV (to time other
//                                        Leiden implementations on the same graph)
// Timing caveat: OPENBLAS_CORETYPE, when set, can halve GEMM speed; it is printed with the results.
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "analysis/topology/topology.h"
#include "bench_common.h"

namespace {

using namespace tdyn::topology;

constexpr int64_t kRowsPerBatch = 1024;
constexpr int64_t kLeidenNodes = 2048;

// Rows of activations (n_rows × d) with offsets and a few shared factors of random sign, like a residual stream.
std::vector<double> factor_activations(int64_t n_rows, int64_t d, int64_t n_factors, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal;
  std::vector<double> loading(d), offset(d);
  std::vector<int64_t> factor_of(d);
  for (int64_t i = 0; i < d; ++i) {
    factor_of[i] = i % n_factors;
    loading[i] = (normal(generator) > 0 ? 1 : -1) * (0.5 + std::abs(normal(generator)));
    offset[i] = 10 * normal(generator);
  }
  std::vector<double> rows(n_rows * d), factors(n_factors);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (double& f : factors) f = normal(generator);
    for (int64_t i = 0; i < d; ++i) rows[r * d + i] = offset[i] + loading[i] * factors[factor_of[i]] + normal(generator);
  }
  return rows;
}

void accumulate_with_syrk(benchmark::State& state) {
  const int64_t d = state.range(0);
  const std::vector<double> batch = factor_activations(kRowsPerBatch, d, 16, 1);
  CorrelationAccumulator accumulator(d);
  for (auto _ : state) accumulator.add_rows(batch);
  benchmark::DoNotOptimize(accumulator.n_rows());
  state.SetItemsProcessed(state.iterations() * kRowsPerBatch);
}

// The baseline: the same shifted sums, one row at a time, S_ij += y_i y_j over the upper triangle.
void accumulate_row_by_row(benchmark::State& state) {
  const int64_t d = state.range(0);
  const int64_t rows_per_iteration = d >= 2048 ? 64 : 256;
  const std::vector<double> batch = factor_activations(rows_per_iteration, d, 16, 1);
  std::vector<double> shift(d, 0.0), sum(d, 0.0), cross(d * d, 0.0), centred(d);
  for (auto _ : state) {
    for (int64_t r = 0; r < rows_per_iteration; ++r) {
      for (int64_t i = 0; i < d; ++i) {
        centred[i] = batch[r * d + i] - shift[i];
        sum[i] += centred[i];
      }
      for (int64_t i = 0; i < d; ++i) {
        const double y_i = centred[i];
        double* cross_row = cross.data() + i * d;
        for (int64_t j = i; j < d; ++j) cross_row[j] += y_i * centred[j];
      }
    }
    benchmark::DoNotOptimize(cross.data());
  }
  state.SetItemsProcessed(state.iterations() * rows_per_iteration);
}

CorrelationMatrix bench_correlation() {
  CorrelationAccumulator accumulator(kLeidenNodes);
  accumulator.add_rows(factor_activations(4096, kLeidenNodes, 32, 2));
  return accumulator.correlation();
}

void correlation_matrix(benchmark::State& state) {
  CorrelationAccumulator accumulator(kLeidenNodes);
  accumulator.add_rows(factor_activations(4096, kLeidenNodes, 32, 2));
  for (auto _ : state) benchmark::DoNotOptimize(accumulator.correlation().values.data());
}

void top_k(benchmark::State& state) {
  const CorrelationMatrix correlation = bench_correlation();
  for (auto _ : state) benchmark::DoNotOptimize(top_k_graph(correlation, state.range(0)).edges.data());
}

void leiden(benchmark::State& state) {
  const SignedGraph graph = top_k_graph(bench_correlation(), state.range(0));
  Partition partition;
  for (auto _ : state) partition = signed_leiden(graph, {.resolution = 0.05, .seed = 1});
  state.counters["edges"] = static_cast<double>(graph.edges.size());
  state.counters["communities"] = static_cast<double>(partition.n_communities);
  state.counters["passes"] = static_cast<double>(partition.passes);
  state.counters["quality"] = partition.quality;
}

// Keeps each run's rows/s so the ratio comes from this run's own measurements.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const auto rate = run.counters.find("items_per_second");
      if (run.run_type == Run::RT_Iteration && rate != run.counters.end())
        rows_per_second_[run.run_name.function_name + "/" + run.run_name.args] = rate->second.value;
    }
  }
  void print_ratios(const std::vector<long>& sizes) const {
    fmt::print("\nOPENBLAS_CORETYPE = {}, OPENBLAS_NUM_THREADS = {}, OMP_NUM_THREADS = {}\n", tdyn::bench::env_or_unset("OPENBLAS_CORETYPE"),
               tdyn::bench::env_or_unset("OPENBLAS_NUM_THREADS"), tdyn::bench::env_or_unset("OMP_NUM_THREADS"));
    fmt::print("{:>6} {:>16} {:>16} {:>8}\n", "d", "dsyrk rows/s", "rank-1 rows/s", "ratio");
    for (long d : sizes) {
      const auto ours = rows_per_second_.find(fmt::format("accumulate_with_syrk/{}", d));
      const auto baseline = rows_per_second_.find(fmt::format("accumulate_row_by_row/{}", d));
      if (ours == rows_per_second_.end() || baseline == rows_per_second_.end()) continue;
      fmt::print("{:>6} {:>16.0f} {:>16.0f} {:>7.1f}x\n", d, ours->second, baseline->second,
                 ours->second / baseline->second);
    }
  }

 private:
  std::map<std::string, double> rows_per_second_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<long> sizes = {512, 2048};
  std::vector<char*> remaining;
  const char* graph_path = nullptr;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--write-graph") == 0 && i + 1 < argc) graph_path = argv[++i];
    else remaining.push_back(argv[i]);
  }
  if (graph_path) {
    write_edge_list_csv(graph_path, top_k_graph(bench_correlation(), 10));
    fmt::print("wrote the d = {} top-10 graph to {}\n", kLeidenNodes, graph_path);
  }
  for (long d : sizes) {
    benchmark::RegisterBenchmark("accumulate_with_syrk", accumulate_with_syrk)->Arg(d)->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("accumulate_row_by_row", accumulate_row_by_row)->Arg(d)->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("correlation_matrix", correlation_matrix)->Arg(kLeidenNodes)->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("top_k_graph", top_k)->Arg(10)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("signed_leiden", leiden)->Arg(10)->Unit(benchmark::kMillisecond)->UseRealTime();

  int remaining_argc = static_cast<int>(remaining.size());
  benchmark::Initialize(&remaining_argc, remaining.data());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios(sizes);
  benchmark::Shutdown();
  return 0;
}
