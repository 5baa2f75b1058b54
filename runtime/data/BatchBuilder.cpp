#include "runtime/data/BatchBuilder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "ir/Random.h"

namespace precast::data {
namespace {

constexpr uint32_t kShuffleStream = 0x5f1e;  // the random stream of document orders

enum Array {
  kInputs,
  kInputsPosition,
  kInputsSegmentation,
  kTargets,
  kTargetsPosition,
  kTargetsSegmentation
};

}  // namespace

BatchBuilder::BatchBuilder(const TokenDocuments* documents, BatchOptions options)
    : documents_(documents), options_(options) {}

const std::vector<uint32_t>& BatchBuilder::order(int64_t epoch) {
  if (epoch == order_epoch_) return order_;
  order_epoch_ = epoch;
  order_.resize(documents_->document_count());
  std::iota(order_.begin(), order_.end(), 0u);
  if (!options_.shuffle) return order_;
  // Fisher-Yates, each swap drawn from (seed, epoch, position): the same order on every run and
  // every rank.
  for (size_t i = order_.size(); i > 1; --i) {
    uint64_t counter = (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(i);
    uint64_t draw =
        (static_cast<uint64_t>(ir::random_bits(options_.shuffle_seed, kShuffleStream, 2 * counter))
         << 32) |
        ir::random_bits(options_.shuffle_seed, kShuffleStream, 2 * counter + 1);
    size_t j = static_cast<size_t>(draw % i);
    std::swap(order_[i - 1], order_[j]);
  }
  return order_;
}

void BatchBuilder::next_document() {
  position_.offset = 0;
  if (++position_.document >= static_cast<int64_t>(documents_->document_count())) {
    position_.document = 0;
    ++position_.epoch;
  }
}

void BatchBuilder::fill_row(GlobalBatch& batch, int64_t row) {
  const int64_t length = batch.length;
  const int64_t base = row * length;
  for (int64_t t = 0; t < length; ++t) {
    batch.arrays[kInputs][base + t] = static_cast<int32_t>(options_.pad);
    batch.arrays[kTargets][base + t] = static_cast<int32_t>(options_.pad);
    for (Array a : {kInputsPosition, kInputsSegmentation, kTargetsPosition, kTargetsSegmentation}) {
      batch.arrays[a][base + t] = 0;
    }
  }
  int64_t fill = 0;
  int32_t segment = 0;
  while (fill < length && !exhausted()) {
    if (!options_.packing && segment == 1) break;
    uint32_t d = order(position_.epoch)[static_cast<size_t>(position_.document)];
    const int64_t begin = static_cast<int64_t>(documents_->starts[d]);
    const int64_t size = static_cast<int64_t>(documents_->starts[d + 1]) - begin;
    if (size == 0) {  // nothing to place (load_corpus drops such documents)
      next_document();
      continue;
    }
    const int64_t remaining = size - position_.offset;
    const int64_t room = length - fill;
    // Packing: a document that does not fit starts the next row unless the row is empty.
    if (options_.packing && remaining > room && fill > 0) break;
    const int64_t take = std::min(remaining, room);
    ++segment;
    for (int64_t i = 0; i < take; ++i) {
      int64_t k = position_.offset + i;  // index in the document
      int64_t at = base + fill + i;
      batch.arrays[kInputs][at] = static_cast<int32_t>(documents_->token(d, static_cast<uint64_t>(k)));
      batch.arrays[kInputsPosition][at] = static_cast<int32_t>(i);
      batch.arrays[kInputsSegmentation][at] = segment;
      batch.arrays[kTargetsPosition][at] = static_cast<int32_t>(i);
      if (k + 1 < size) {
        batch.arrays[kTargets][at] =
            static_cast<int32_t>(documents_->token(d, static_cast<uint64_t>(k + 1)));
        batch.arrays[kTargetsSegmentation][at] = segment;
      }
    }
    fill += take;
    if (take == remaining || !options_.packing) {
      next_document();  // done, or truncated (packing=false)
    } else {
      position_.offset += take;  // the rest continues in the next row
    }
  }
}

void BatchBuilder::build(GlobalBatch& batch) {
  const size_t n = static_cast<size_t>(batch.rows * batch.length);
  for (std::vector<int32_t>& a : batch.arrays) a.assign(n, 0);
  for (int64_t r = 0; r < batch.rows; ++r) fill_row(batch, r);
}

Status BatchBuilder::set_position(const DataPosition& p) {
  const int64_t count = static_cast<int64_t>(documents_->document_count());
  bool valid =
      p.epoch >= 0 && p.document >= 0 && p.offset >= 0 &&
      (p.epoch >= options_.num_epoch ? p.document == 0 && p.offset == 0 : p.document < count);
  if (valid && p.epoch < options_.num_epoch) {
    uint32_t d = order(p.epoch)[static_cast<size_t>(p.document)];
    valid = p.offset < static_cast<int64_t>(documents_->starts[d + 1] - documents_->starts[d]);
  }
  if (!valid) {
    return Error(ExitCode::kIncompatible,
                 fmt::format("the checkpoint's data position (epoch {}, document {}, offset {}) "
                             "is outside this dataset ({} documents, num_epoch={}); resume with "
                             "the dataset and num_epoch the run started with",
                             p.epoch, p.document, p.offset, count, options_.num_epoch));
  }
  position_ = p;
  return Status::success();
}

std::string position_json(const std::string& dataset_type, const TokenDocuments& documents,
                          uint32_t shuffle_seed, const DataPosition& position, int64_t next_step) {
  std::string files;
  for (const FileFingerprint& f : documents.sources) {
    files += fmt::format("{}{{\"path\": {}, \"bytes\": {}, \"crc32c\": \"{:08x}\"}}",
                         files.empty() ? "" : ", ", checkpoint::json_quote(f.path), f.bytes,
                         f.crc32c);
  }
  // Documents built in memory (tests) have no source files: no "files" list.
  return fmt::format(
      "{{\"dataset_type\": \"{}\", \"documents\": {}, \"tokens\": {}, \"data_shuffle_seed\": {}, "
      "\"epoch\": {}, \"document\": {}, \"offset\": {}, \"next_step\": {}{}}}",
      dataset_type, documents.document_count(), documents.token_count(), shuffle_seed,
      position.epoch, position.document, position.offset, next_step,
      documents.sources.empty() ? std::string() : ", \"files\": [" + files + "]");
}

namespace {

// This run's files against the fingerprints a checkpoint recorded ("files"), one difference per
// file whose content differs (or that one side lacks). A checkpoint saved before fingerprints
// were recorded has no "files": nothing to compare.
std::vector<std::string> fingerprint_differences(const checkpoint::JsonValue& data,
                                                 const TokenDocuments& documents) {
  const checkpoint::JsonValue* files = data.find("files");
  std::vector<std::string> differences;
  if (files == nullptr || files->kind != checkpoint::JsonValue::Kind::kArray) return differences;
  size_t count = std::max(files->items.size(), documents.sources.size());
  for (size_t i = 0; i < count; ++i) {
    const checkpoint::JsonValue* saved = i < files->items.size() ? &files->items[i] : nullptr;
    const FileFingerprint* here = i < documents.sources.size() ? &documents.sources[i] : nullptr;
    int64_t saved_bytes = -1;
    uint32_t saved_crc = 0;
    std::string saved_path = "(none)";
    bool readable = saved != nullptr && saved->find("bytes") != nullptr &&
                    saved->find("bytes")->as_int(saved_bytes) && saved->find("crc32c") != nullptr;
    if (readable) {
      saved_crc = static_cast<uint32_t>(std::strtoul(saved->find("crc32c")->text.c_str(), nullptr, 16));
      if (const checkpoint::JsonValue* p = saved->find("path")) saved_path = p->text;
    }
    std::string saved_text = readable ? fingerprint_text(saved_crc, static_cast<uint64_t>(saved_bytes))
                                      : std::string("no file");
    if (here == nullptr) {
      differences.push_back(fmt::format("file {} of the checkpoint's dataset, {} ({}), is not in "
                                        "this run's dataset_path",
                                        i + 1, saved_path, saved_text));
      continue;
    }
    if (readable && static_cast<uint64_t>(saved_bytes) == here->bytes && saved_crc == here->crc32c) {
      continue;
    }
    differences.push_back(fmt::format("{} (file {} of dataset_path) has content fingerprint {}, "
                                      "but the checkpoint recorded {} for {}",
                                      here->path, i + 1, fingerprint_text(here->crc32c, here->bytes),
                                      saved_text, saved_path));
  }
  return differences;
}

}  // namespace

Expected<DataPosition> parse_position(const checkpoint::JsonValue& data,
                                      const std::string& dataset_type,
                                      const TokenDocuments& documents, uint32_t shuffle_seed) {
  auto field = [&](const char* key) -> Expected<int64_t> {
    const checkpoint::JsonValue* v = data.find(key);
    int64_t out = 0;
    if (v == nullptr || !v->as_int(out)) {
      return Error(
          ExitCode::kIncompatible,
          fmt::format("the checkpoint's data position has no integer \"{}\": it was "
                      "saved by a run on {} data; resume with that run's dataset_type",
                      key,
                      data.find("dataset_type") != nullptr ? data.find("dataset_type")->text
                                                           : std::string("unknown")));
    }
    return out;
  };
  const checkpoint::JsonValue* type = data.find("dataset_type");
  std::string saved_type = type != nullptr ? type->text : "";
  std::vector<std::string> differences;
  if (saved_type != dataset_type) {
    differences.push_back(fmt::format("dataset_type {} (this run: {})", saved_type, dataset_type));
  } else {
    PRECAST_ASSIGN_OR_RETURN(int64_t saved_documents, field("documents"));
    PRECAST_ASSIGN_OR_RETURN(int64_t saved_tokens, field("tokens"));
    PRECAST_ASSIGN_OR_RETURN(int64_t saved_seed, field("data_shuffle_seed"));
    if (saved_documents != static_cast<int64_t>(documents.document_count())) {
      differences.push_back(
          fmt::format("{} documents (this run: {})", saved_documents, documents.document_count()));
    }
    if (saved_tokens != static_cast<int64_t>(documents.token_count())) {
      differences.push_back(
          fmt::format("{} tokens (this run: {})", saved_tokens, documents.token_count()));
    }
    if (saved_seed != static_cast<int64_t>(shuffle_seed)) {
      differences.push_back(
          fmt::format("data_shuffle_seed {} (this run: {})", saved_seed, shuffle_seed));
    }
  }
  // The same counts but other content (another tokenization, an edited file): the files'
  // fingerprints tell them apart.
  if (differences.empty() && saved_type == dataset_type) {
    differences = fingerprint_differences(data, documents);
  }
  if (!differences.empty()) {
    std::string list;
    for (const std::string& d : differences) list += (list.empty() ? "" : ", ") + d;
    return Error(ExitCode::kIncompatible,
                 fmt::format("the checkpoint's data position belongs to another dataset: {}; "
                             "resume with the data the run started with, or start a new run "
                             "(another run_name or checkpoint_dir)",
                             list));
  }
  DataPosition p;
  PRECAST_ASSIGN_OR_RETURN(p.epoch, field("epoch"));
  PRECAST_ASSIGN_OR_RETURN(p.document, field("document"));
  PRECAST_ASSIGN_OR_RETURN(p.offset, field("offset"));
  return p;
}

}  // namespace precast::data
