#include "runtime/data/Tokenize.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "runtime/data/ByteTokenizer.h"
#include "runtime/data/Corpus.h"

namespace precast::data {

TokenDocuments tokenize_text(const std::string& text, const std::string& separator) {
  TokenDocuments out;
  out.bos = kByteBos;
  out.eos = kByteEos;
  out.pad = kBytePad;
  for (const std::string& document : split_documents(text, separator)) {
    out.add_document(tokenize_bytes(document));
  }
  return out;
}

void unigram_entropy(const TokenDocuments& documents, double& bits, double& nats) {
  std::map<uint32_t, int64_t> counts;
  int64_t total = 0;
  for (size_t d = 0; d < documents.document_count(); ++d) {
    for (uint64_t i = documents.starts[d] + 1; i < documents.starts[d + 1]; ++i) {
      ++counts[documents.tokens[i]];
      ++total;
    }
  }
  nats = 0;
  for (const auto& [token, count] : counts) {
    double p = static_cast<double>(count) / static_cast<double>(total);
    nats -= p * std::log(p);
  }
  bits = nats / std::log(2.0);
}

Expected<TokenizeReport> tokenize_files(const std::vector<std::string>& inputs,
                                        const std::string& output, const std::string& separator) {
  if (inputs.empty()) return usage_error("no input: give text files, directories or globs");
  std::string joined;
  for (const std::string& input : inputs) joined += (joined.empty() ? "" : ",") + input;
  PRECAST_ASSIGN_OR_RETURN(std::vector<std::string> files, dataset_files(joined, false));
  TokenDocuments all;
  all.bos = kByteBos;
  all.eos = kByteEos;
  all.pad = kBytePad;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return usage_error(fmt::format("{}: cannot open it: {}", file, std::strerror(errno)));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TokenDocuments docs = tokenize_text(text, separator);
    for (size_t d = 0; d < docs.document_count(); ++d) all.add_document(docs.document(d));
  }
  PRECAST_RETURN_IF_ERROR(write_token_file(output, all));
  TokenizeReport report;
  report.files = static_cast<int64_t>(files.size());
  report.documents = static_cast<int64_t>(all.document_count());
  report.tokens = static_cast<int64_t>(all.tokens.size());
  unigram_entropy(all, report.entropy_bits, report.entropy_nats);
  return report;
}

}  // namespace precast::data
