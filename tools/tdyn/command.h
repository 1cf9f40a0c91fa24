// Subcommand registry for the tdyn CLI. Each cmd_*.cpp defines one subcommand and registers it with
// TDYN_REGISTER_COMMAND; main.cpp only builds the app, parses, and maps errors to exit codes. The CLI parses
// flags and calls the library; no analysis lives here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tdyn::cli {

// Exit codes: 0 ok, 1 bad input (file, shape, config), 2 bad usage (flags), 3 internal error.
inline constexpr int kExitInputError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

struct Command {
  std::string name;
  // Adds the subcommand to `app`; returns the function to run when it is selected (returns the exit code).
  std::function<std::function<int()>(CLI::App& app)> setup;
  int order;  // position in --help
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { command_registry().push_back(std::move(c)); }
};

// The command line as given, for results.json.
const std::vector<std::string>& invocation();

}  // namespace tdyn::cli

#define TDYN_REGISTER_COMMAND(name, order, setup_fn) \
  static ::tdyn::cli::CommandRegistrar tdyn_command_registrar_##setup_fn({name, setup_fn, order})
