#include "runtime/data/Corpus.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/data/ByteTokenizer.h"

namespace precast::data {
namespace {

namespace fs = std::filesystem;

bool has_glob_characters(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    std::string piece =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!piece.empty()) out.push_back(piece);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Expected<std::vector<std::string>> glob_matches(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(g.gl_pathv[i], ec)) out.push_back(g.gl_pathv[i]);
    }
  }
  globfree(&g);
  if (out.empty()) {
    return usage_error(fmt::format(
        "dataset_path: the glob '{}' matches no file; check the pattern (quote it so the shell "
        "does not expand it) or name the files",
        pattern));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return usage_error(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return usage_error(fmt::format("{}: cannot read it", path));
  return bytes;
}

// The next document of the run's file order: held out, trained on, or skipped when empty.
void add_document(Corpus& corpus, int64_t& counted, const std::vector<uint32_t>& tokens,
                  size_t begin, size_t end, bool empty, bool all_held_out = false) {
  if (empty) {
    ++corpus.skipped_empty;
    return;
  }
  if (all_held_out || counted++ % kEvalEvery == kEvalEvery - 1) {
    ++corpus.held_out_documents;
    corpus.held_out.tokens.insert(corpus.held_out.tokens.end(),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(end));
    corpus.held_out.starts.push_back(corpus.held_out.tokens.size());
    return;
  }
  corpus.train.tokens.insert(corpus.train.tokens.end(),
                             tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                             tokens.begin() + static_cast<std::ptrdiff_t>(end));
  corpus.train.starts.push_back(corpus.train.tokens.size());
}

// The file's documents served from its mapping: training documents point into it (no copy),
// held-out ones (5%) are copied for runtime/eval.
Status add_token_file(Corpus& corpus, int64_t& counted, const std::string& file,
                      int64_t vocab_size, bool all_held_out) {
  PRECAST_ASSIGN_OR_RETURN(std::shared_ptr<const MappedTokenFile> docs,
                           MappedTokenFile::open(file));
  const std::vector<uint64_t>& starts = docs->starts();
  for (size_t d = 0; d < docs->document_count(); ++d) {
    // Every id checked against vocab_size; a document of BOS/EOS alone has no text: nothing to
    // learn.
    size_t content = 0;
    for (uint64_t i = starts[d]; i < starts[d + 1]; ++i) {
      uint32_t id = docs->token(i);
      if (id >= vocab_size) {
        return usage_error(fmt::format(
            "{}: offset {}: token id {} (document {}, token {}) is not below vocab_size={}: the "
            "file was made for a larger vocabulary; train an artifact compiled with vocab_size > "
            "{} or re-tokenize the data",
            file, docs->token_offset(i), id, d, i - starts[d], vocab_size, id));
      }
      if (id != docs->bos() && id != docs->eos()) ++content;
    }
    if (content == 0) {
      ++corpus.skipped_empty;
      continue;
    }
    if (all_held_out || counted++ % kEvalEvery == kEvalEvery - 1) {
      ++corpus.held_out_documents;
      for (uint64_t i = starts[d]; i < starts[d + 1]; ++i) {
        corpus.held_out.tokens.push_back(docs->token(i));
      }
      corpus.held_out.starts.push_back(corpus.held_out.tokens.size());
      continue;
    }
    corpus.train.add_mapped_document(*docs, starts[d], starts[d + 1]);
  }
  docs->expect_random_access();
  corpus.train.mappings.push_back(docs);
  corpus.train.sources.push_back(docs->fingerprint());
  if (corpus.files.empty() && docs->pad() != kNoSpecialToken && docs->pad() < vocab_size) {
    corpus.pad = docs->pad();
  }
  if (corpus.files.empty()) {
    corpus.train.bos = corpus.held_out.bos = docs->bos();
    corpus.train.eos = corpus.held_out.eos = docs->eos();
  }
  return Status::success();
}

}  // namespace

Expected<std::vector<std::string>> dataset_files(const std::string& dataset_path,
                                                 bool tokens_only) {
  std::vector<std::string> files;
  for (const std::string& entry : split_commas(dataset_path)) {
    std::error_code ec;
    if (has_glob_characters(entry) && !fs::exists(entry, ec)) {
      PRECAST_ASSIGN_OR_RETURN(std::vector<std::string> matches, glob_matches(entry));
      files.insert(files.end(), matches.begin(), matches.end());
    } else if (fs::is_directory(entry, ec)) {
      std::vector<std::string> found;
      for (const fs::directory_entry& e : fs::directory_iterator(entry, ec)) {
        if (!e.is_regular_file(ec)) continue;
        if (tokens_only && e.path().extension() != ".tokens") continue;
        found.push_back(e.path().string());
      }
      if (found.empty()) {
        return usage_error(fmt::format("dataset_path: the directory '{}' holds no {}file", entry,
                                       tokens_only ? ".tokens " : "regular "));
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(entry, ec)) {
      files.push_back(entry);
    } else {
      return usage_error(fmt::format(
          "dataset_path: '{}' does not exist (or is not a file or directory); give files, "
          "directories or globs separated by commas",
          entry));
    }
  }
  if (files.empty()) {
    return usage_error("dataset_path is empty: give files, directories or globs");
  }
  return files;
}

namespace {

// Every document of the files: trained on or held out (every kEvalEvery-th), or, with
// all_held_out (eval_dataset_path), all held out.
Expected<Corpus> read_documents(const DataSettings& settings, int64_t vocab_size,
                                bool all_held_out) {
  const bool tokens = settings.type == "tokens";
  if (!tokens && vocab_size < kByteVocabSize) {
    return usage_error(fmt::format(
        "dataset_type=text needs vocab_size >= {} (256 bytes, BOS {}, EOS {}, PAD {}), but the "
        "artifact has vocab_size={}; recompile with vocab_size={} or more",
        kByteVocabSize, kByteBos, kByteEos, kBytePad, vocab_size, kByteVocabSize));
  }
  PRECAST_ASSIGN_OR_RETURN(std::vector<std::string> files, dataset_files(settings.path, tokens));
  Corpus corpus;
  int64_t counted = 0;
  std::vector<std::string> contents;  // what each file held, for the empty-dataset message
  for (const std::string& file : files) {
    int64_t counted_before = counted;
    if (tokens) {
      PRECAST_RETURN_IF_ERROR(add_token_file(corpus, counted, file, vocab_size, all_held_out));
      contents.push_back(
          fmt::format("{}: offset 24: {} document(s) with tokens", file, counted - counted_before));
    } else {
      PRECAST_ASSIGN_OR_RETURN(std::string text, read_text(file));
      corpus.train.sources.push_back(fingerprint_of(file, text.data(), text.size()));
      std::vector<uint32_t> document = tokenize_bytes(text, settings.add_bos, settings.add_eos);
      add_document(corpus, counted, document, 0, document.size(), text.empty(), all_held_out);
      corpus.pad = kBytePad;
      corpus.train.bos = corpus.held_out.bos = kByteBos;
      corpus.train.eos = corpus.held_out.eos = kByteEos;
      contents.push_back(fmt::format("{}: offset 0: {} bytes of text", file, text.size()));
    }
    corpus.files.push_back(file);
  }
  if (all_held_out && corpus.held_out.document_count() == 0) {
    return usage_error(fmt::format(
        "eval_dataset_path={}: the evaluation dataset is empty: {} file(s) hold no document with "
        "tokens ({} empty); give files with documents to evaluate on",
        settings.path, files.size(), corpus.skipped_empty));
  }
  if (!all_held_out && corpus.train.document_count() == 0) {
    return usage_error(fmt::format(
        "dataset_path={}: the dataset is empty: {} file(s) hold {} document(s) with tokens "
        "({} held out for evaluation, {} empty) ({}); give files with documents to train on",
        settings.path, files.size(), counted, corpus.held_out_documents, corpus.skipped_empty,
        fmt::join(contents.begin(),
                  contents.begin() +
                      std::min<std::ptrdiff_t>(3, static_cast<std::ptrdiff_t>(contents.size())),
                  "; ")));
  }
  return corpus;
}

}  // namespace

Expected<Corpus> load_corpus(const DataSettings& settings, int64_t vocab_size) {
  return read_documents(settings, vocab_size, false);
}

Expected<Corpus> load_eval_corpus(const DataSettings& settings, int64_t vocab_size) {
  return read_documents(settings, vocab_size, true);
}

std::string describe(const Corpus& corpus) {
  return fmt::format(
      "Dataset: {} file(s), {} documents trained on ({} tokens), {} held out for evaluation "
      "(every {}th), {} empty skipped",
      corpus.files.size(), corpus.train.document_count(), corpus.train.token_count(),
      corpus.held_out_documents, kEvalEvery, corpus.skipped_empty);
}

}  // namespace precast::data
