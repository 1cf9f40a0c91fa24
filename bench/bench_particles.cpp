// Steps per second of the self-attention particle dynamics (Euler with P frozen, the authors' scheme) and of
// one RK4 step, at n tokens in d dimensions. bench/particles_vs_numpy.sh compares them with a numpy baseline.
#include <benchmark/benchmark.h>

#include "analysis/particles/dynamics.h"
#include "analysis/particles/presets.h"

namespace tdyn::particles {
namespace {

// Random inputs shaped like tests/particles_reference.py's benchmark: x ~ U[-1, 1], Q, K ~ N(0, 1/d), V ≈ I.
ParticleSystem random_system(int64_t d) {
  ParticleSystem s;
  s.head.query = make_matrix("gaussian", d, d, 0, 1, "bench");
  s.head.key = make_matrix("gaussian", d, d, 0, 2, "bench");
  s.head.value = Matrix::Identity(d, d) + make_matrix("gaussian:0.1", d, d, 0, 3, "bench");
  return s;
}

// Steps per simulate() call: the paper's T = 5 at Δt = 0.1, so the per-call setup weighs as in real runs.
constexpr int kSteps = 50;

void run(benchmark::State& state, Integrator integrator) {
  const int64_t n = state.range(0), d = state.range(1);
  ParticleSystem system = random_system(d);
  Matrix x = Matrix::Random(n, d);
  SimulationOptions options;
  options.integrator = integrator;
  options.dt = 1e-3;
  options.t_end = kSteps * options.dt;
  options.save_every = kSteps;
  for (auto _ : state) {
    Trajectory tr = simulate(system, x, options);
    benchmark::DoNotOptimize(tr.x.back().data());
  }
  state.counters["steps_per_second"] = benchmark::Counter(double(kSteps) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_ParticlesEuler(benchmark::State& state) { run(state, Integrator::euler_frozen); }
void BM_ParticlesRk4(benchmark::State& state) { run(state, Integrator::rk4); }

BENCHMARK(BM_ParticlesEuler)
    ->Args({128, 128})
    ->Args({64, 128})
    ->Args({256, 128})
    ->Args({512, 128})
    ->Args({1024, 128})
    ->Args({2048, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ParticlesRk4)->Args({128, 128})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tdyn::particles

BENCHMARK_MAIN();
