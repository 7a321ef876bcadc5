#include "tools/weft/quantize_option.hpp"

#include "kernels/cpu/quant/format.hpp"

namespace weft::cli {

CLI::Option* add_quantize_option(CLI::App* cmd, std::string& format) {
  return cmd
      ->add_option("--quantize", format,
                   "quantize the weight matrices as the model loads, to one of: " +
                       quant::supported_quant_names() +
                       " (short: q8, q6, q5, q4, q3h, q3, q2); CPU only (docs/quantization.md)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            auto type = quant::parse_quant_type(value);
            return type ? std::string() : std::string(type.error().what());
          },
          "FORMAT"));
}

}  // namespace weft::cli
