#include "tools/precast/TokenizeCommand.h"

#include <fmt/format.h>

#include <iostream>

#include "runtime/data/ByteTokenizer.h"
#include "runtime/data/Tokenize.h"

namespace precast {
namespace {

void print_tokenize_help() {
  std::cout << fmt::format(
      "Usage: precast tokenize IN... -o OUT.tokens [--separator=STRING]\n\n"
      "Converts text files (files, directories or globs) into one token file for\n"
      "dataset_type=tokens, with the byte-level tokenizer: token b < 256 is byte b, BOS {},\n"
      "EOS {}, PAD {} (train with vocab_size >= {}). Each document is BOS, its bytes, EOS.\n"
      "--separator=STRING splits each file into documents at every line holding exactly\n"
      "STRING (fortune files: --separator=%); without it each file is one document.\n"
      "OUT is written to a temporary name, synced and renamed: it is whole or absent.\n"
      "Prints the documents, the tokens and the unigram entropy of the predicted tokens\n"
      "(every token but each document's BOS) in bits and nats per token.\n"
      "The format is documented in runtime/data/README.md.\n"
      "Exit codes: 0 written, 1 write failure, 2 usage error or an input that does not exist.\n",
      data::kByteBos, data::kByteEos, data::kBytePad, data::kByteVocabSize);
}

int tokenize_failure(const std::string& message) {
  std::cerr << "precast: error: " << message << "\nRun `precast tokenize --help` for usage.\n";
  return static_cast<int>(ExitCode::kUsage);
}

}  // namespace

int run_tokenize_command(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string output, separator;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      print_tokenize_help();
      return 0;
    }
    if (a == "-o" || a == "--output") {
      if (i + 1 == args.size()) return tokenize_failure("-o needs a file name");
      output = args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (a.rfind("--separator=", 0) == 0) {
      separator = a.substr(12);
    } else if (a.rfind("-", 0) == 0 && a.size() > 1) {
      return tokenize_failure(fmt::format("unknown option '{}'", a));
    } else {
      inputs.push_back(a);
    }
  }
  if (output.empty()) return tokenize_failure("no output: give -o OUT.tokens");
  if (inputs.empty()) return tokenize_failure("no input: give text files, directories or globs");
  Expected<data::TokenizeReport> report = data::tokenize_files(inputs, output, separator);
  if (!report.ok()) {
    std::cerr << "precast: error: " << report.error().message() << "\n";
    return report.error().exit_code();
  }
  std::cout << fmt::format(
      "Wrote {}: {} files, {} documents, {} tokens (byte-level, vocab_size >= {})\n"
      "Unigram entropy of the predicted tokens: {:.4f} bits = {:.4f} nats per token\n",
      output, report->files, report->documents, report->tokens, data::kByteVocabSize,
      report->entropy_bits, report->entropy_nats);
  return 0;
}

}  // namespace precast
