// attnlab: the command line. Its subcommands are listed in app.cpp (command.hpp).
#include <cstdio>
#include <exception>
#include <fmt/format.h>

#include "attnlab/blas.hpp"
#include "attnlab/error.hpp"
#include "command.hpp"

int main(int argc, char** argv) {
  // OpenBLAS's thread count is process-wide, so the program sets it, once, for when a
  // subcommand first needs OpenBLAS (attnlab/blas.hpp; most never load it): one thread,
  // because the callers that use it bring their own threads (the training study calls it
  // from each of its OpenMP threads; `attnlab bench`'s openblas peer sets its own count).
  // Results do not depend on it, only speed.
  attnlab::blas::set_threads_when_loaded(1);
  CLI::App app{"attnlab: scaled dot-product attention, exact and fast, and a lab for the 1/sqrt(d_k) scale"};
  attnlab::cli::build_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string unknown = attnlab::cli::unknown_command_message(app, argc, argv); !unknown.empty()) {
      fmt::print(stderr, "attnlab: error: {}\n", unknown);
      return 2;
    }
    return app.exit(e);
  } catch (const attnlab::Error& e) {
    fmt::print(stderr, "attnlab: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnlab: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
