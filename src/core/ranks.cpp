#include "core/ranks.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"

#ifdef TDYN_HAVE_MPI
// The C API only: the deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tdyn {
namespace {

Ranks g_ranks;
bool g_mpi = false;

// Environment variables that MPI launchers set for the processes they start (Open MPI, PMI/PMIx, Slurm's srun).
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace

bool built_with_mpi() {
#ifdef TDYN_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void init_ranks(int* argc, char*** argv) {
#ifdef TDYN_HAVE_MPI
  if (!launched_by_mpi()) return;
  // Threads within a rank are OpenMP's; MPI is only ever called from the main thread.
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_ranks.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks.size);
#else
  (void)argc, (void)argv;
#endif
}

const Ranks& ranks() { return g_ranks; }

#ifdef TDYN_HAVE_MPI
namespace {
// Lengths go first; the data in blocks of at most 2^30 doubles (MPI counts are int). Messages between two ranks
// arrive in the order they were sent, so the tags only keep these apart from other traffic.
constexpr int64_t kBlock = int64_t{1} << 30;
constexpr int kLengthTag = 0, kDataTag = 1;
}  // namespace
#endif

void send_to(int rank, const std::vector<double>& data) {
#ifdef TDYN_HAVE_MPI
  TDYN_CHECK(g_mpi && rank != g_ranks.rank);
  const int64_t n = static_cast<int64_t>(data.size());
  MPI_Send(&n, 1, MPI_INT64_T, rank, kLengthTag, MPI_COMM_WORLD);
  for (int64_t at = 0; at < n; at += kBlock)
    MPI_Send(data.data() + at, static_cast<int>(std::min(kBlock, n - at)), MPI_DOUBLE, rank, kDataTag, MPI_COMM_WORLD);
#else
  (void)rank, (void)data;
  TDYN_CHECK(false);
#endif
}

std::vector<double> receive_from(int rank) {
#ifdef TDYN_HAVE_MPI
  TDYN_CHECK(g_mpi && rank != g_ranks.rank);
  int64_t n = 0;
  MPI_Recv(&n, 1, MPI_INT64_T, rank, kLengthTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  std::vector<double> data(static_cast<size_t>(n));
  for (int64_t at = 0; at < n; at += kBlock)
    MPI_Recv(data.data() + at, static_cast<int>(std::min(kBlock, n - at)), MPI_DOUBLE, rank, kDataTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return data;
#else
  (void)rank;
  TDYN_CHECK(false);
  return {};
#endif
}

std::vector<std::vector<double>> gather_to_root(const std::vector<double>& mine) {
  if (g_ranks.size == 1) return {mine};
  // Point to point in rank order: rank 0 decides the order of the reduction, whatever order messages arrive in.
  if (!g_ranks.root()) {
    send_to(0, mine);
    return {};
  }
  std::vector<std::vector<double>> all{mine};
  for (int r = 1; r < g_ranks.size; ++r) all.push_back(receive_from(r));
  return all;
}

double broadcast_from_root(double value) {
#ifdef TDYN_HAVE_MPI
  if (g_ranks.size > 1) MPI_Bcast(&value, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#endif
  return value;
}

void broadcast_from_root(std::vector<double>& data) {
#ifdef TDYN_HAVE_MPI
  if (g_ranks.size == 1) return;
  int64_t n = static_cast<int64_t>(data.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  data.resize(static_cast<size_t>(n));
  for (int64_t at = 0; at < n; at += kBlock)
    MPI_Bcast(data.data() + at, static_cast<int>(std::min(kBlock, n - at)), MPI_DOUBLE, 0, MPI_COMM_WORLD);
#else
  (void)data;
#endif
}

void abort_ranks(int code) {
#ifdef TDYN_HAVE_MPI
  if (g_mpi && g_ranks.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

void finalize_ranks() {
#ifdef TDYN_HAVE_MPI
  if (g_mpi) {
    g_mpi = false;
    MPI_Finalize();
  }
#endif
}

}  // namespace tdyn
