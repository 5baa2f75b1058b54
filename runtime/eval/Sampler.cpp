#include "runtime/eval/Sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <memory>

#include "runtime/collectives/Communicator.h"
#include "runtime/data/ByteTokenizer.h"
#include "runtime/eval/Evaluator.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorElements.h"
#include "runtime/train/TensorShard.h"

namespace precast::runtime {
namespace {

// One batch input of sample_step and the piece of it this device holds.
struct RowInput {
  size_t index = 0;
  TensorShard shard;
};

// Every row of the global batch is the same sequence: position t holds its token (padding past
// the end), its target (the next token), their positions and segment ids (1 inside the sequence,
// 0 for padding). Each device writes its piece (rows, and positions when the sequence is split).
void write_rows(StepExecutable& step, const artifact::Signature& s,
                const std::vector<RowInput>& batch, const std::vector<uint32_t>& sequence,
                int64_t length) {
  const auto n = static_cast<int64_t>(sequence.size());
  for (size_t k = 0; k < batch.size(); ++k) {
    const TensorShard& shard = batch[k].shard;
    int64_t elements = 1;
    for (int64_t d : shard.local_dims) elements *= d;
    for (int64_t local = 0; local < elements; ++local) {
      const int64_t t = shard.global_index(local) % length;
      const bool inside = t < n;
      const double token = inside ? sequence[static_cast<size_t>(t)] : data::kBytePad;
      const double target = t + 1 < n ? sequence[static_cast<size_t>(t + 1)] : data::kBytePad;
      double values[] = {token,  static_cast<double>(t), inside ? 1.0 : 0.0,
                         target, static_cast<double>(t), t + 1 < n ? 1.0 : 0.0};
      store(step.input(batch[k].index), local, s.inputs[batch[k].index].dtype, values[k]);
    }
  }
}

// The largest logit this device holds at global position `position` of its first row, as
// {value, token id}; {-inf, vocab} when the position is another device's.
std::array<double, 2> local_best(const void* logits, const std::string& dtype,
                                 const TensorShard& shard, int64_t position) {
  const int64_t first = shard.offsets[1];
  const int64_t positions = shard.local_dims[1];
  const int64_t vocab = shard.local_dims[2];
  if (position < first || position >= first + positions) {
    return {-std::numeric_limits<double>::infinity(), static_cast<double>(shard.global_dims[2])};
  }
  const int64_t element = dtype_bytes(dtype);
  const auto* row = static_cast<const char*>(logits) + (position - first) * vocab * element;
  int64_t best = 0;
  double best_value = load(row, dtype);
  for (int64_t v = 1; v < vocab; ++v) {
    double value = load(row + v * element, dtype);
    if (value > best_value) {
      best_value = value;
      best = v;
    }
  }
  return {best_value, static_cast<double>(shard.offsets[2] + best)};
}

// Every device's candidate, gathered over all devices: the largest value, the lowest id among
// equal values. Every rank picks the same token from the same gathered figures.
Expected<uint32_t> agreed_token(Communicator& all, const std::array<double, 2>& mine) {
  std::vector<double> gathered(static_cast<size_t>(2 * all.size()));
  PRECAST_RETURN_IF_ERROR(all.all_gather(mine.data(), gathered.data(), 2, ElementType::kF64));
  double best_value = gathered[0], best = gathered[1];
  for (size_t r = 1; r < static_cast<size_t>(all.size()); ++r) {
    double value = gathered[2 * r], id = gathered[2 * r + 1];
    if (value > best_value || (value == best_value && id < best)) {
      best_value = value;
      best = id;
    }
  }
  return static_cast<uint32_t>(best);
}

}  // namespace

Expected<SampleResult> greedy_sample(const artifact::Artifact& artifact,
                                     const StepExecutable& train, const std::string& prompt,
                                     int64_t max_tokens, const RuntimeContext& context,
                                     const CommunicatorResolver& communicator,
                                     const std::vector<int64_t>& mesh_coordinates) {
  PRECAST_ASSIGN_OR_RETURN(artifact::Artifact view,
                           artifact::entry_point_artifact(artifact, artifact::kSampleStepEntry));
  const artifact::Signature& s = view.signature;
  PRECAST_ASSIGN_OR_RETURN(StepExecutable step, StepExecutable::load(view, communicator));
  PRECAST_ASSIGN_OR_RETURN(std::vector<void*> bound,
                           shared_parameters(s, artifact, train, artifact::kSampleStepEntry));
  PRECAST_RETURN_IF_ERROR(step.allocate_buffers(bound));

  std::vector<RowInput> batch(kBatchNames.size(), RowInput{s.inputs.size(), {}});
  for (size_t k = 0; k < kBatchNames.size(); ++k) {
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].role == "batch" && s.inputs[i].name == kBatchNames[k]) batch[k].index = i;
    }
  }
  size_t logits = s.outputs.size();
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    if (s.outputs[i].name == "logits") logits = i;
  }
  const bool lacks_batch = std::any_of(
      batch.begin(), batch.end(), [&](const RowInput& b) { return b.index == s.inputs.size(); });
  if (logits == s.outputs.size() || s.outputs[logits].shape.size() != 3 || lacks_batch) {
    return Error(ExitCode::kIncompatible,
                 "the artifact's sample_step lacks a batch input or its logits [rows, T, V]; "
                 "recompile with this build's precast compile");
  }
  for (RowInput& b : batch) {
    PRECAST_ASSIGN_OR_RETURN(b.shard,
                             tensor_shard(s.inputs[b.index], artifact.key.mesh, mesh_coordinates));
  }
  PRECAST_ASSIGN_OR_RETURN(TensorShard logits_shard,
                           tensor_shard(s.outputs[logits], artifact.key.mesh, mesh_coordinates));
  // All devices, for agreeing on each token (a group of one on one device).
  artifact::Collective everyone;
  everyone.kind = artifact::CollectiveKind::kAllGather;
  for (const artifact::MeshAxis& axis : artifact.key.mesh) everyone.mesh_axes.push_back(axis.name);
  everyone.dtype = "f64";
  PRECAST_ASSIGN_OR_RETURN(Communicator * all, communicator(everyone));

  const int64_t length = logits_shard.global_dims[1];
  const int64_t vocab = logits_shard.global_dims[2];
  if (vocab < data::kByteVocabSize) {
    return usage_error(fmt::format(
        "sample_prompt: sampling uses the byte-level tokenizer (ids up to {}), but the model has "
        "vocab_size={}; recompile with vocab_size >= {} or set sample_tokens=0",
        data::kBytePad, vocab, data::kByteVocabSize));
  }
  SampleResult result;
  result.prompt_tokens = data::tokenize_bytes(prompt, true, false);
  if (static_cast<int64_t>(result.prompt_tokens.size()) >= length) {
    return usage_error(
        fmt::format("sample_prompt is {} tokens with its BOS, which fills the model's row of "
                    "max_target_length={}; give a shorter prompt",
                    result.prompt_tokens.size(), length));
  }
  std::vector<uint32_t> sequence = result.prompt_tokens;
  while (static_cast<int64_t>(result.tokens.size()) < max_tokens &&
         static_cast<int64_t>(sequence.size()) < length) {
    write_rows(step, s, batch, sequence, length);
    PRECAST_RETURN_IF_ERROR(step.run(context));
    std::array<double, 2> mine =
        local_best(step.output(logits), s.outputs[logits].dtype, logits_shard,
                   static_cast<int64_t>(sequence.size()) - 1);
    PRECAST_ASSIGN_OR_RETURN(uint32_t best, agreed_token(*all, mine));
    result.tokens.push_back(best);
    sequence.push_back(best);
    if (best == data::kByteEos) {
      result.stopped_at_eos = true;
      break;
    }
    if (best < 256) result.text.push_back(static_cast<char>(best));
  }
  return result;
}

std::string sample_line(const std::string& prompt, const SampleResult& result) {
  auto escaped = [](const std::string& text) {
    std::string out;
    for (unsigned char c : text) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c >= 0x7f) {
        out += fmt::format("\\x{:02x}", c);
      } else {
        out += static_cast<char>(c);
      }
    }
    return out;
  };
  return fmt::format("Sample ({} tokens{}): \"{}\" -> \"{}\"", result.tokens.size(),
                     result.stopped_at_eos ? ", stopped at EOS" : "", escaped(prompt),
                     escaped(result.text));
}

}  // namespace precast::runtime
