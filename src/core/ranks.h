// The processes of one run. Started by an MPI launcher (mpirun, srun) and built with MPI, tdyn runs as N ranks
// that split the samples of a pass (analysis/pass/run.h) and reduce their partial sums on rank 0, which
// alone writes results; otherwise it is one process and everything here is a no-op. MPI is initialised only
// under a launcher, so that a plain `tdyn ...` never pays for it or prints its warnings.
#pragma once

#include <vector>

namespace tdyn {

struct Ranks {
  int rank = 0;
  int size = 1;
  bool root() const { return rank == 0; }
};

// Called once by main(): initialises MPI when launched by mpirun/srun.
void init_ranks(int* argc, char*** argv);
// This process's place in the run (rank 0 of 1 without MPI).
const Ranks& ranks();
// Whether this build can run as several ranks.
bool built_with_mpi();

// Rank 0 receives every other rank's buffer, in rank order, and gets {own, rank 1's, ...}; the other ranks send
// theirs and get {}. Buffers may differ in length.
std::vector<std::vector<double>> gather_to_root(const std::vector<double>& mine);

// One buffer from this rank to `rank`, of any length; receive_from(this rank) there takes it. Buffers between two
// ranks arrive in the order they were sent. Only under several ranks.
void send_to(int rank, const std::vector<double>& data);
std::vector<double> receive_from(int rank);

// Every rank gets rank 0's value (the others' arguments are ignored).
double broadcast_from_root(double value);
// Every rank's `data` becomes rank 0's, of any length.
void broadcast_from_root(std::vector<double>& data);
// Ends the run on every rank after an error on one (no-op without MPI; returns only then).
void abort_ranks(int code);
// Finalises MPI before a normal exit (no-op without MPI).
void finalize_ranks();

}  // namespace tdyn
