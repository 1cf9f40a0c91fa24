// Cost of each operator metric (analysis/operator_metrics.h) on a random d × d matrix, and of the whole
// operator_metrics() call against the named baseline: the former path that formed every vector, a complex Schur
// form with Schur vectors (dgees 'V' + rotations) and a full SVD with vectors (dgesdd 'S').
//
//   bench_operator_metrics           d = 1024
//   bench_operator_metrics --large   also d = 4096 (Llama 3.1 8B width; one run of each, about 12 minutes on 2 cores)
//   bench_operator_metrics --size D  d = D alone
//   --peak GFLOPS                    the floors at this rate (bench/fma_peak's float64 FMA peak for all threads),
//                                    not at the dgemm rate measured in the run
//   --benchmark_repetitions=3        the table then shows the fastest repetition
//
// After the seconds, each row's GFLOP/s and its floor: its flop count (Golub & Van Loan's, flops() below) at the
// reference rate, and its time as a multiple of that floor.
//
// Rows, by the metrics they serve:
//   schur_form_no_vectors      eigenvalues, Henrici departure (both forms), expanding/complex fractions
//   eigenvalues_dgeev          the same eigenvalues without T (dgeev 'N'), for comparison: no Schur departure
//   singular_values            condition number, effective ranks (dgesdd 'N')
//   leading_svd_k100           every σ plus the top 100 singular vector pairs: self-alignment at k = 1, 10, 100
//   norms_and_symmetry         ‖J‖_F and the symmetry index, O(d²)
//   dgemm_rate                 a d × d product on BLAS's threads: the reference rate of the floors
//   operator_metrics           the whole call as it is now
//   operator_metrics_one_per_thread   the same, one matrix per OpenMP thread on single-threaded BLAS (per matrix):
//                              how the jacobian's metrics phase spreads depths over the cores
//   complex_schur_with_vectors, svd_with_vectors, baseline_all_vectors   the former path, part by part and whole
// Timing caveat: OPENBLAS_CORETYPE, when set, can halve GEMM speed; it is printed with the results.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>
#include <fmt/format.h>

#include "analysis/operator_metrics.h"
#include "bench_common.h"
#include "kernels/serial_blas.h"
#include "linalg/dense.h"
#include "linalg/gemm.h"

namespace {

using tdyn::bench::random_matrix;
using tdyn::linalg::Matrix;

void schur_form_no_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::real_schur_form(a).strictly_upper_norm());
}

void eigenvalues_dgeev(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::eigen_general(a, false).eigenvalues.data());
}

void singular_values(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::singular_values(a).data());
}

void leading_svd_k100(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::svd_leading(a, 100).u.data());
}

void norms_and_symmetry(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) {
    const double norm = a.norm();
    benchmark::DoNotOptimize((a - a.transpose()).norm() / norm);
  }
}

void operator_metrics(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::operator_metrics(a).departure.schur);
}

// Several matrices at once, one per OpenMP thread, each on single-threaded BLAS/LAPACK (kernels/serial_blas.h): the
// way the metrics phase spreads depths over the cores. Timed per matrix, so that it reads against
// operator_metrics above (one matrix at a time on OpenBLAS's threads).
void operator_metrics_one_per_thread(benchmark::State& state) {
  const int n = omp_get_max_threads();
  std::vector<Matrix> matrices;
  for (int i = 0; i < n; ++i) matrices.push_back(random_matrix(state.range(0), static_cast<uint64_t>(i) + 1));
  tdyn::SerialBlas serial(n > 1);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(tdyn::operator_metrics(matrices[static_cast<size_t>(i)]).departure.schur);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / n);
  }
}

void complex_schur_with_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::complex_schur(a).t.data());
}

void svd_with_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tdyn::linalg::svd(a, true).u.data());
}

// The float64 product rate of this machine with BLAS's threads, the reference the floors below are taken at.
void dgemm_rate(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0), 1), b = random_matrix(state.range(0), 2);
  Matrix c;
  for (auto _ : state) {
    tdyn::linalg::multiply(a, b, c);
    benchmark::DoNotOptimize(c.data());
  }
}

// Flops of each row at size d, by the operation counts of Golub & Van Loan, Matrix Computations (4th ed.), §7.5.6
// (real Schur form: T alone 10d³, with Q 25d³) and §8.6.3 (Golub–Kahan SVD of a square matrix: Σ alone 8d³/3,
// with U and V 17d³); a leading SVD adds the back-transformation of k vector pairs, 8d²k. Zero: no count given.
double flops(const std::string& name, double d) {
  const double d3 = d * d * d;
  if (name == "schur_form_no_vectors" || name == "eigenvalues_dgeev") return 10 * d3;
  if (name == "singular_values") return 8 * d3 / 3;
  if (name == "leading_svd_k100") return 8 * d3 / 3 + 8 * d * d * 100;
  if (name == "operator_metrics" || name == "operator_metrics_one_per_thread") return 10 * d3 + 8 * d3 / 3 + 8 * d * d * 100;
  if (name == "complex_schur_with_vectors") return 25 * d3;
  if (name == "svd_with_vectors") return 17 * d3;
  if (name == "baseline_all_vectors") return 42 * d3;
  if (name == "dgemm_rate") return 2 * d3;
  return 0;
}

// The decompositions operator_metrics() computed before it went values-only. The O(d²) arithmetic after them
// (norms, fractions, ranks) is left out: it is the same in both paths and negligible next to O(d³).
void baseline_all_vectors(benchmark::State& state) {
  const Matrix a = random_matrix(state.range(0));
  for (auto _ : state) {
    const tdyn::linalg::ComplexSchur schur = tdyn::linalg::complex_schur(a);
    const tdyn::linalg::SingularValueDecomposition svd = tdyn::linalg::svd(a, true);
    benchmark::DoNotOptimize(schur.strictly_upper().norm());
    benchmark::DoNotOptimize(svd.u.data());
  }
}

// Collects each run's mean wall time and prints seconds per metric per matrix, and the speed-up of the current
// path over the baseline measured in the same run.
class SecondsReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs)
      if (run.run_type == Run::RT_Iteration) {
        // The fastest of --benchmark_repetitions: on a shared 2-core machine the slow runs are interference.
        const double seconds = run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
        const auto [entry, inserted] = seconds_.try_emplace(run.run_name.function_name + "/" + run.run_name.args, seconds);
        if (!inserted) entry->second = std::min(entry->second, seconds);
      }
  }
  // Per row: GFLOP/s and the floor, the row's flops at the reference rate (`peak` GFLOP/s when given, else the
  // dgemm rate measured in this run), with the time against it.
  void print_floors(const std::vector<const char*>& names, const std::vector<long>& sizes, double peak) const {
    for (long d : sizes) {
      const auto gemm = seconds_.find(fmt::format("dgemm_rate/{}", d));
      const double rate = peak > 0 ? peak * 1e9 : gemm != seconds_.end() ? flops("dgemm_rate", d) / gemm->second : 0;
      if (rate <= 0) continue;
      fmt::print("\nd = {}: floors at {:.1f} GFLOP/s ({})\n{:<32} {:>10} {:>10} {:>10} {:>10}\n", d, rate / 1e9,
                 peak > 0 ? "--peak" : "the dgemm rate of this run, all threads", "metric", "GFLOP", "GFLOP/s", "floor s", "x floor");
      for (const char* name : names) {
        const auto s = seconds_.find(fmt::format("{}/{}", name, d));
        const double f = flops(name, static_cast<double>(d));
        if (s == seconds_.end() || f == 0) continue;
        fmt::print("{:<32} {:>10.1f} {:>10.1f} {:>10.3f} {:>10.2f}\n", name, f / 1e9, f / s->second / 1e9, f / rate, s->second / (f / rate));
      }
    }
  }
  void print_table(const std::vector<const char*>& names, const std::vector<long>& sizes) const {
    fmt::print("\nOPENBLAS_CORETYPE = {}, OPENBLAS_NUM_THREADS = {}, OMP_NUM_THREADS = {}\n",
               tdyn::bench::env_or_unset("OPENBLAS_CORETYPE"), tdyn::bench::env_or_unset("OPENBLAS_NUM_THREADS"),
               tdyn::bench::env_or_unset("OMP_NUM_THREADS"));
    fmt::print("seconds per matrix (fastest repetition)\n{:<32}", "metric");
    for (long d : sizes) fmt::print(" {:>12}", fmt::format("d = {}", d));
    fmt::print("\n");
    for (const char* name : names) {
      fmt::print("{:<32}", name);
      for (long d : sizes) {
        const auto s = seconds_.find(fmt::format("{}/{}", name, d));
        fmt::print(" {:>12}", s == seconds_.end() ? "-" : fmt::format("{:.4f}", s->second));
      }
      fmt::print("\n");
    }
    for (long d : sizes) {
      const auto now = seconds_.find(fmt::format("operator_metrics/{}", d));
      const auto before = seconds_.find(fmt::format("baseline_all_vectors/{}", d));
      if (now != seconds_.end() && before != seconds_.end())
        fmt::print("d = {}: baseline_all_vectors / operator_metrics = {:.2f}x ({:.3f} s -> {:.3f} s)\n", d,
                   before->second / now->second, before->second, now->second);
      const auto spread = seconds_.find(fmt::format("operator_metrics_one_per_thread/{}", d));
      if (now != seconds_.end() && spread != seconds_.end())
        fmt::print("d = {}: operator_metrics (threaded BLAS) / operator_metrics_one_per_thread = {:.2f}x per matrix\n", d,
                   now->second / spread->second);
    }
  }

 private:
  std::map<std::string, double> seconds_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes = {1024};
  double peak = 0;
  std::vector<char*> remaining;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--large") == 0) sizes.push_back(4096);
    else if (std::strcmp(argv[i], "--size") == 0 && i + 1 < argc) sizes = {std::atol(argv[++i])};
    else if (std::strcmp(argv[i], "--peak") == 0 && i + 1 < argc) peak = std::atof(argv[++i]);
    else remaining.push_back(argv[i]);
  }
  const std::pair<const char*, void (*)(benchmark::State&)> benchmarks[] = {
      {"schur_form_no_vectors", schur_form_no_vectors},
      {"eigenvalues_dgeev", eigenvalues_dgeev},
      {"singular_values", singular_values},
      {"leading_svd_k100", leading_svd_k100},
      {"norms_and_symmetry", norms_and_symmetry},
      {"dgemm_rate", dgemm_rate},
      {"operator_metrics", operator_metrics},
      {"operator_metrics_one_per_thread", operator_metrics_one_per_thread},
      {"complex_schur_with_vectors", complex_schur_with_vectors},
      {"svd_with_vectors", svd_with_vectors},
      {"baseline_all_vectors", baseline_all_vectors}};
  std::vector<const char*> names;
  for (const auto& [name, function] : benchmarks) {
    names.push_back(name);
    for (long d : sizes) {
      auto* b = benchmark::RegisterBenchmark(name, function)->Arg(d)->Unit(benchmark::kMillisecond);
      if (function == operator_metrics_one_per_thread) b->UseManualTime();
      else b->UseRealTime();
      if (d > 1024) b->Iterations(1);  // minutes per run at 4096: one is enough
      else b->MinTime(0.5);
    }
  }

  int remaining_argc = static_cast<int>(remaining.size());
  benchmark::Initialize(&remaining_argc, remaining.data());
  SecondsReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_table(names, sizes);
  reporter.print_floors(names, sizes, peak);
  benchmark::Shutdown();
  return 0;
}
