// Writes a particle run (analysis/particles/run.h) into a results directory: the matrices and trajectories as
// .npy, the diagnostics over time as diagnostics.csv, the paper's figures, and results.json.
#pragma once

#include "analysis/particles/run.h"
#include "report/results.h"

namespace tdyn::particles {

// x0, Q, K, V (the value map W = O V used), t, x, z, P and P_times (.npy), diagnostics.csv, the figures, and
// results.json with its options (merged into any the caller set), model, results and timings sections.
void write_particles(ResultsDir& out, const ParticlesResult& result, const ParticlesOptions& options);

}  // namespace tdyn::particles
