// attnlab: the command line. Subcommands register themselves (command.hpp).
#include <cstdio>
#include <exception>
#include <fmt/format.h>

#include "attnlab/error.hpp"
#include "command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"attnlab: scaled dot-product attention, exact and fast, and a lab for the 1/sqrt(d_k) scale"};
  attnlab::cli::build_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
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
