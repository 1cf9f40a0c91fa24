// tdyn: transformers as dynamical systems. Entry point: builds the subcommands, parses, runs, maps errors.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_util.h"
#include "command.h"
#include <cblas.h>
#include <omp.h>

#include "analysis/pass/source.h"
#include "core/error.h"
#include "core/ranks.h"
#include "kernels/packed_matrix.h"
#include "linalg/gemm.h"
#include "report/progress.h"

namespace tdyn::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}

static std::vector<std::string> g_invocation;
const std::vector<std::string>& invocation() { return g_invocation; }

}  // namespace tdyn::cli

namespace {

// Set once this process has failed on its own: the SIGTERM that mpirun then sends every rank is not an interrupt.
volatile sig_atomic_t g_failing = 0;

// Reports an error and ends the run; under MPI an error on one rank ends them all (the others would wait for its
// share forever).
int fail_run(const std::string& message, int code) {
  g_failing = 1;
  std::cerr << message + "\n";  // one write: the ranks' lines do not interleave
  tdyn::abort_ranks(code);
  return code;
}

}  // namespace

// The commands whose samples go through the shared sample pass: they split it across MPI ranks and resume it.
static bool runs_the_sample_pass(const std::string& command) {
  return command == "jacobian" || command == "topology" || command == "analyze";
}

// Ctrl-C (SIGINT) or SIGTERM: one line saying what to do next, then the conventional 128 + signal. The commands
// that run the sample pass keep its file for --resume; the others have nothing to continue.
static bool g_resumable = false;  // set before the handler is installed
static void on_interrupt(int signal) {
  static const char resumable[] = "\ntdyn: interrupted; rerun the same command with --resume to continue\n";
  static const char plain[] = "\ntdyn: interrupted\n";
  const char* text = g_resumable ? resumable : plain;
  const size_t length = g_resumable ? sizeof resumable - 1 : sizeof plain - 1;
  if (tdyn::ranks().root() && !g_failing) (void)!::write(STDERR_FILENO, text, length);
  ::_exit(128 + signal);
}

static void report_interrupts(const std::string& command) {
  g_resumable = runs_the_sample_pass(command);
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// Only the commands built on the shared sample pass split their work across MPI ranks; any other would run N
// times over and write the same files from every rank, so under several ranks it stops every rank.
static bool refused_under_mpi(const std::string& command) {
  if (tdyn::ranks().size <= 1 || runs_the_sample_pass(command)) return false;
  if (tdyn::ranks().root())
    std::cerr << "tdyn: error: tdyn " << command << " runs in one process; under mpirun/srun only jacobian, topology and "
                                                    "analyze split their samples across ranks\n";
  tdyn::finalize_ranks();  // every rank stops here, so none waits for another
  return true;
}

// The CPUs this process may run on: those of every OpenMP place where binding (OMP_PROC_BIND, OMP_PLACES) made
// places (libgomp took them from the mask the process started with, then bound this thread to the first one), else
// this thread's mask.
static cpu_set_t process_cpus() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (const int places = omp_get_num_places(); places > 0) {
    for (int place = 0; place < places; ++place) {
      std::vector<int> ids(omp_get_place_num_procs(place));
      omp_get_place_proc_ids(place, ids.data());
      for (const int id : ids) CPU_SET(id, &cpus);
    }
  } else if (::sched_getaffinity(0, sizeof cpus, &cpus) != 0) {
    CPU_ZERO(&cpus);
  }
  return cpus;
}

// Settings that libgomp and glibc read only as the process starts; unless the user chose them, the process starts
// again once with them set.
//
// OpenMP threads that spin long while they wait take the cores from each other and from OpenBLAS's threads where
// cores are few, shared or virtual: a two-thread prefill of a d = 768 model measured 180-200 tok/s with libgomp's
// default spin against 670-870 with a short one. Sleeping at once (OMP_WAIT_POLICY=passive) prefills as fast but
// woke too slowly for decoding's short parallel loops: 118-126 tok/s against 159-172 with a spin of 1000 (bf16,
// two threads; a decoding step now keeps a team of threads of its own, kernels/team.h). Hence GOMP_SPINCOUNT=1000.
//
// Large buffers (a layer's float64 weights, d x d sums and products) are mapped afresh as they are allocated, and
// faulting them in 4 KiB pages can cost more than writing them (the sample pass at the Llama 3.1 8B shape ran 2.2
// times as fast on huge pages: docs/scale.md). Where the kernel gives transparent huge pages to the regions that
// ask for them (its madvise mode), glibc.malloc.hugetlb=1 makes malloc ask.
//
// With OMP_PROC_BIND set, libgomp has also bound this thread to the first OpenMP place as it loaded; the new
// process would inherit that one place's CPUs and run every thread on them (a two-thread decoding step then ran at
// 5 tok/s instead of 200). It gets back the CPUs of all places first.
static void restart_with_runtime_settings(char** argv) {
  bool restart = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    ::setenv("GOMP_SPINCOUNT", "1000", 1);
    restart = true;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!tunables || !std::strstr(tunables, "glibc.malloc.hugetlb")) {
    const std::string with_huge_pages =
        (tunables && *tunables ? std::string(tunables) + ":" : std::string()) + "glibc.malloc.hugetlb=1";
    ::setenv("GLIBC_TUNABLES", with_huge_pages.c_str(), 1);
    restart = true;
  }
  if (!restart) return;
  if (omp_get_num_places() > 0) {
    const cpu_set_t cpus = process_cpus();
    ::sched_setaffinity(0, sizeof cpus, &cpus);
  }
  ::execv("/proc/self/exe", argv);  // returns only if it failed: run on with the defaults
}

// --version: the version, the optional parts this build has, the CPUs this process may run on and the runtime
// settings it started with.
static std::string version_text() {
  const cpu_set_t cpus = process_cpus();
  std::string allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &cpus) || (cpu > 0 && CPU_ISSET(cpu - 1, &cpus))) continue;  // not the first of a run
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &cpus)) ++last;
    if (!allowed.empty()) allowed += ',';
    allowed += last == cpu ? fmt::format("{}", cpu) : fmt::format("{}-{}", cpu, last);
  }
  const char* mpi = tdyn::built_with_mpi() ? "yes" : "no";
  const auto setting = [](const char* name) {
    const char* value = std::getenv(name);
    return fmt::format("{}={}", name, value ? value : "(unset)");
  };
  const std::string packed = tdyn::packed_products_kernel();
  return fmt::format("tdyn {}\nprompt products: {}; small float64 products: {}; MPI: {}\nCPUs: {} ({} OpenMP threads by "
                     "default)\nruntime: {} {} {}",
                     TDYN_VERSION, packed.empty() ? "OpenBLAS sgemm" : packed + ", weights packed",
                     tdyn::linalg::small_product_kernels(), mpi, allowed.empty() ? "unknown" : allowed,
                     omp_get_max_threads(), setting("GOMP_SPINCOUNT"), setting("OMP_WAIT_POLICY"), setting("GLIBC_TUNABLES"));
}

int main(int argc, char** argv) {
  using namespace tdyn::cli;
  restart_with_runtime_settings(argv);
  tdyn::init_ranks(&argc, &argv);
  g_invocation.assign(argv, argv + argc);
  CLI::App app{"tdyn " TDYN_VERSION " - transformers as dynamical systems.\n"
               "Loads a checkpoint (Hugging Face directory, GGUF or llama2.c .bin), runs it with every residual-stream\n"
               "activation in reach, and measures how tokens move through depth.",
               "tdyn"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "No progress output on stderr (errors and warnings still appear)");
  int threads = 0;
  app.add_option("--threads", threads,
                 "Threads for BLAS and parallel loops (default: all cores). Use 1 on a machine busy with other work: "
                 "idle threads spin a little while they wait (GOMP_SPINCOUNT=1000 unless GOMP_SPINCOUNT or OMP_WAIT_POLICY "
                 "is set), which costs more than it gains when cores are shared")
      ->check(non_negative_number);
  app.fallthrough();  // --quiet and --threads may follow the subcommand
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) { return a.order < b.order; });
  std::function<int()> selected;
  for (auto& c : commands) {
    auto run = c.setup(app);
    app.get_subcommand(c.name)->final_callback([&selected, run] { selected = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  tdyn::set_progress_quiet(quiet || !tdyn::ranks().root());  // one progress display: rank 0's
  if (threads > 0) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  const std::string command = app.get_subcommands().empty() ? "" : app.get_subcommands().front()->get_name();
  if (refused_under_mpi(command)) return kExitUsage;
  report_interrupts(command);
  const std::string where = tdyn::ranks().size > 1 ? fmt::format(" (rank {} of {})", tdyn::ranks().rank, tdyn::ranks().size) : "";
  try {
    const int code = selected ? selected() : 0;
    tdyn::finalize_ranks();
    return code;
  } catch (const tdyn::WorkerShareDone&) {  // an MPI worker rank whose share of the pass is with rank 0
    tdyn::finalize_ranks();
    return 0;
  } catch (const tdyn::RefusedUnderRanks& e) {  // thrown on every rank alike, before any work
    if (tdyn::ranks().root()) std::cerr << "tdyn: error: " << e.what() << "\n";
    tdyn::finalize_ranks();
    return kExitUsage;
  } catch (const tdyn::Error& e) {
    return fail_run(fmt::format("tdyn: error{}: {}", where, e.what()), kExitInputError);
  } catch (const CLI::ParseError& e) {
    return fail_run(fmt::format("tdyn{}: {}", where, e.what()), kExitUsage);
  } catch (const std::bad_alloc&) {
    return fail_run(fmt::format("tdyn: error{}: out of memory", where), kExitInputError);
  } catch (const std::exception& e) {  // a file system or library error that no check above turned into an Error
    return fail_run(fmt::format("tdyn: error{}: {}", where, e.what()), kExitInputError);
  } catch (...) {
    return fail_run(fmt::format("tdyn: internal error{}: an unknown exception; please report the command line and "
                                "`tdyn --version`", where), kExitInternal);
  }
}
