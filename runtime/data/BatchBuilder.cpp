#include "runtime/data/BatchBuilder.h"

#include <fmt/format.h>

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
      batch.arrays[kInputs][at] = static_cast<int32_t>(documents_->tokens[begin + k]);
      batch.arrays[kInputsPosition][at] = static_cast<int32_t>(i);
      batch.arrays[kInputsSegmentation][at] = segment;
      batch.arrays[kTargetsPosition][at] = static_cast<int32_t>(i);
      if (k + 1 < size) {
        batch.arrays[kTargets][at] = static_cast<int32_t>(documents_->tokens[begin + k + 1]);
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
  return fmt::format(
      "{{\"dataset_type\": \"{}\", \"documents\": {}, \"tokens\": {}, \"data_shuffle_seed\": {}, "
      "\"epoch\": {}, \"document\": {}, \"offset\": {}, \"next_step\": {}}}",
      dataset_type, documents.document_count(), documents.tokens.size(), shuffle_seed,
      position.epoch, position.document, position.offset, next_step);
}

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
    if (saved_tokens != static_cast<int64_t>(documents.tokens.size())) {
      differences.push_back(
          fmt::format("{} tokens (this run: {})", saved_tokens, documents.tokens.size()));
    }
    if (saved_seed != static_cast<int64_t>(shuffle_seed)) {
      differences.push_back(
          fmt::format("data_shuffle_seed {} (this run: {})", saved_seed, shuffle_seed));
    }
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
