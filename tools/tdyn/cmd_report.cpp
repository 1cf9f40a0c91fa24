// tdyn report DIR: (re)builds DIR/index.html from the results.json files already in DIR — one analysis's results
// directory, or an `analyze` directory of them. Nothing is recomputed, so a report can be rebuilt after a newer
// tdyn learns to show more, or after copying a results directory to another machine.
#include <iostream>

#include "command.h"
#include "report/html_report.h"

namespace tdyn::cli {
namespace {

std::function<int()> setup_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Build DIR/index.html from an existing results directory (or an analyze directory "
                                           "of them): claims vs this model, every figure with its caption, the command lines");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("DIR", *dir, "Results directory")->required()->check(CLI::ExistingDirectory);
  return [dir] {
    const fs::path index = write_html_report(*dir);
    std::cerr << "tdyn report: wrote " << index.string() << "\n";
    return 0;
  };
}

TDYN_REGISTER_COMMAND("report", 90, setup_report);

}  // namespace
}  // namespace tdyn::cli
