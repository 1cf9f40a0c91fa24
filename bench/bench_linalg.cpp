// Dense eigen/SVD decompositions at Jacobian sizes: the LAPACKE wrappers of src/linalg (dgeev, dgesdd, and the
// dgees-based complex Schur form) against Eigen's own solvers (EigenSolver, BDCSVD), the named baseline,
// measured in the same run. After the Google Benchmark table, one line per (operation, d) prints
// "ratio = Eigen time / wrapper time" (> 1: the wrapper is faster).
//
//   bench_linalg                 d = 256, 512, 1024
//   bench_linalg --large         also d = 2048 (Eigen's EigenSolver takes minutes there)
// Timing caveat: OPENBLAS_CORETYPE, when set, can halve GEMM speed; it is printed with the results.
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <Eigen/Dense>

#include "bench_common.h"
#include "linalg/dense.h"

namespace {

using tdyn::bench::random_matrix;
using tdyn::linalg::Matrix;

void lapack_eigenvalues(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::eigen_general(a, false).eigenvalues.data());
}

void eigen_eigenvalues(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) {
    Eigen::EigenSolver<Matrix> solver(a, false);
    benchmark::DoNotOptimize(solver.eigenvalues().data());
  }
}

void lapack_singular_values(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::singular_values(a).data());
}

void eigen_singular_values(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) {
    Eigen::BDCSVD<Matrix> solver(a);
    benchmark::DoNotOptimize(solver.singularValues().data());
  }
}

void lapack_svd_with_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::svd(a, true).u.data());
}

void eigen_svd_with_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) {
    Eigen::BDCSVD<Matrix> solver(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
    benchmark::DoNotOptimize(solver.matrixU().data());
  }
}

void lapack_complex_schur(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::complex_schur(a).t.data());
}

// Collects each run's mean real time so the ratios come from this run's own measurements.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs)
      if (run.run_type == Run::RT_Iteration)
        seconds_[run.run_name.function_name + "/" + run.run_name.args] = {
            run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit),
            run.GetAdjustedCPUTime() / benchmark::GetTimeUnitMultiplier(run.time_unit)};
  }
  void print_ratios(const std::vector<long>& sizes) const {
    fmt::print("\nOPENBLAS_CORETYPE = {}, OPENBLAS_NUM_THREADS = {}, OMP_NUM_THREADS = {}\n",
               tdyn::bench::env_or_unset("OPENBLAS_CORETYPE"), tdyn::bench::env_or_unset("OPENBLAS_NUM_THREADS"),
               tdyn::bench::env_or_unset("OMP_NUM_THREADS"));
    // Wall-clock ratio first; the CPU-time ratio (main thread only) is steadier on a loaded machine.
    fmt::print("{:<28} {:>6} {:>12} {:>12} {:>8} {:>10}\n", "operation", "d", "wrapper s", "Eigen s", "ratio",
               "cpu ratio");
    const std::pair<const char*, const char*> pairs[] = {{"lapack_eigenvalues", "eigen_eigenvalues"},
                                                         {"lapack_singular_values", "eigen_singular_values"},
                                                         {"lapack_svd_with_vectors", "eigen_svd_with_vectors"}};
    for (const auto& [ours, baseline] : pairs)
      for (long d : sizes) {
        const auto a = seconds_.find(fmt::format("{}/{}", ours, d));
        const auto b = seconds_.find(fmt::format("{}/{}", baseline, d));
        if (a == seconds_.end() || b == seconds_.end()) continue;
        fmt::print("{:<28} {:>6} {:>12.4f} {:>12.4f} {:>7.1f}x {:>9.1f}x\n", ours, d, a->second.wall, b->second.wall,
                   b->second.wall / a->second.wall, b->second.cpu / a->second.cpu);
      }
    for (long d : sizes) {
      const auto s = seconds_.find(fmt::format("lapack_complex_schur/{}", d));
      if (s != seconds_.end())
        fmt::print("{:<28} {:>6} {:>12.4f} {:>12} {:>8} {:>10}\n", "lapack_complex_schur", d, s->second.wall, "-", "-", "-");
    }
  }

 private:
  struct Seconds {
    double wall, cpu;
  };
  std::map<std::string, Seconds> seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes = {256, 512, 1024};
  std::vector<char*> remaining;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--large") == 0) sizes.push_back(2048);
    else remaining.push_back(argv[i]);
  }
  const std::pair<const char*, void (*)(benchmark::State&)> benchmarks[] = {
      {"lapack_eigenvalues", lapack_eigenvalues},         {"eigen_eigenvalues", eigen_eigenvalues},
      {"lapack_singular_values", lapack_singular_values}, {"eigen_singular_values", eigen_singular_values},
      {"lapack_svd_with_vectors", lapack_svd_with_vectors}, {"eigen_svd_with_vectors", eigen_svd_with_vectors},
      {"lapack_complex_schur", lapack_complex_schur}};
  for (const auto& [name, function] : benchmarks)
    for (long d : sizes)
      benchmark::RegisterBenchmark(name, function)->Arg(d)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(
          d >= 1024 ? 0.01 : 0.3);

  int remaining_argc = static_cast<int>(remaining.size());
  benchmark::Initialize(&remaining_argc, remaining.data());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios(sizes);
  benchmark::Shutdown();
  return 0;
}
