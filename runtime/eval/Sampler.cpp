#include "runtime/eval/Sampler.h"

#include <fmt/format.h>

#include <algorithm>
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

bool larger_first(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

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

// The `count` largest logits this device holds at global position `position` of its first row
// (the largest first, the lowest id first among equal ones), padded with {-inf, vocab} to
// `count`; all padding when the position is another device's.
std::vector<Candidate> local_candidates(const void* logits, const std::string& dtype,
                                        const TensorShard& shard, int64_t position, int64_t count) {
  const int64_t first = shard.offsets[1];
  const int64_t positions = shard.local_dims[1];
  const int64_t vocab = shard.local_dims[2];
  std::vector<Candidate> out;
  if (position >= first && position < first + positions) {
    const int64_t element = dtype_bytes(dtype);
    const auto* row = static_cast<const char*>(logits) + (position - first) * vocab * element;
    for (int64_t v = 0; v < vocab; ++v) {
      out.push_back({load(row + v * element, dtype), static_cast<uint32_t>(shard.offsets[2] + v)});
    }
    const auto keep = static_cast<size_t>(std::min(count, vocab));
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep), out.end(),
                      larger_first);
    out.resize(keep);
  }
  out.resize(static_cast<size_t>(count), {-std::numeric_limits<double>::infinity(),
                                          static_cast<uint32_t>(shard.global_dims[2])});
  return out;
}

// Every device's candidates, gathered over all devices: one per id, the largest first. Every rank
// gathers the same figures, so every rank chooses the same token.
Expected<std::vector<Candidate>> all_candidates(Communicator& all,
                                                const std::vector<Candidate>& mine, int64_t vocab) {
  std::vector<double> send;
  for (const Candidate& c : mine) {
    send.push_back(c.logit);
    send.push_back(c.id);
  }
  std::vector<double> gathered(send.size() * static_cast<size_t>(all.size()));
  PRECAST_RETURN_IF_ERROR(all.all_gather(send.data(), gathered.data(),
                                         static_cast<int64_t>(send.size()), ElementType::kF64));
  std::vector<Candidate> out;
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  for (size_t i = 0; i < gathered.size(); i += 2) {
    const auto id = static_cast<uint32_t>(gathered[i + 1]);
    if (id >= vocab || seen[id]) continue;  // padding, or another replica's copy
    seen[id] = true;
    out.push_back({gathered[i], id});
  }
  std::sort(out.begin(), out.end(), larger_first);
  if (out.empty()) {
    return internal_error("sampling: no device holds the logits of the last position");
  }
  return out;
}

}  // namespace

Expected<SampleResult> greedy_sample(const artifact::Artifact& artifact,
                                     const StepExecutable& train, const std::string& prompt,
                                     int64_t max_tokens, const RuntimeContext& context,
                                     const CommunicatorResolver& communicator,
                                     const std::vector<int64_t>& mesh_coordinates,
                                     const DecodeSettings& decode) {
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
  result.strategy = decode.strategy;
  uint64_t state = kDecodeSeed;
  while (static_cast<int64_t>(result.tokens.size()) < max_tokens &&
         static_cast<int64_t>(sequence.size()) < length) {
    write_rows(step, s, batch, sequence, length);
    PRECAST_RETURN_IF_ERROR(step.run(context));
    std::vector<Candidate> mine =
        local_candidates(step.output(logits), s.outputs[logits].dtype, logits_shard,
                         static_cast<int64_t>(sequence.size()) - 1, decode.candidates(vocab));
    PRECAST_ASSIGN_OR_RETURN(std::vector<Candidate> sorted, all_candidates(*all, mine, vocab));
    const uint32_t best = choose_token(sorted, decode, state);
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
  return fmt::format("Sample ({} tokens{}{}): \"{}\" -> \"{}\"", result.tokens.size(),
                     result.strategy == "greedy" ? "" : ", " + result.strategy,
                     result.stopped_at_eos ? ", stopped at EOS" : "", escaped(prompt),
                     escaped(result.text));
}

}  // namespace precast::runtime
