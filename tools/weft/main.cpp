// The `weft` command: subcommands for running, serving, inspecting and benchmarking models.

#include <exception>
#include <iostream>

#include "tools/weft/commands.hpp"
#include "weft/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "weft: a C++ inference runtime for large language models.\n"
      "Loads Hugging Face model folders and runs them on NVIDIA GPUs or the CPU."};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer("Run `weft <command> --help` for a command's options.");

  int exit_code = 0;
  weft::cli::add_version_command(app, exit_code);
  weft::cli::add_tokenize_command(app, exit_code);
  weft::cli::add_detokenize_command(app, exit_code);
  weft::cli::add_chat_template_command(app, exit_code);
  weft::cli::add_generate_command(app, exit_code);
  weft::cli::add_perplexity_command(app, exit_code);
  weft::cli::add_bench_command(app, exit_code);
  weft::cli::add_serve_command(app, exit_code);
  weft::cli::add_embed_command(app, exit_code);
  weft::cli::add_quantize_command(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const weft::Error& e) {
    std::cerr << "weft: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "weft: internal error: " << e.what() << '\n';
    return 1;
  }
  return exit_code;
}
