#include "runtime/eval/Sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "runtime/collectives/Communicator.h"
#include "runtime/data/ByteTokenizer.h"
#include "runtime/eval/Evaluator.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorElements.h"

namespace precast::runtime {
namespace {

// Position p of the row: the token there (padding past the end), its target (the next token),
// their positions and segment ids (1 inside the sequence, 0 for padding).
void write_row(StepExecutable& step, const artifact::Signature& s,
               const std::vector<size_t>& batch, const std::vector<uint32_t>& sequence,
               int64_t length) {
  const auto n = static_cast<int64_t>(sequence.size());
  for (int64_t t = 0; t < length; ++t) {
    bool inside = t < n;
    double token = inside ? sequence[static_cast<size_t>(t)] : data::kBytePad;
    double target = t + 1 < n ? sequence[static_cast<size_t>(t + 1)] : data::kBytePad;
    double values[] = {token, static_cast<double>(t), inside ? 1.0 : 0.0,
                       target, static_cast<double>(t), t + 1 < n ? 1.0 : 0.0};
    for (size_t k = 0; k < batch.size(); ++k) {
      store(step.input(batch[k]), t, s.inputs[batch[k]].dtype, values[k]);
    }
  }
}

}  // namespace

Expected<SampleResult> greedy_sample(const artifact::Artifact& artifact,
                                     const StepExecutable& train, const std::string& prompt,
                                     int64_t max_tokens, const RuntimeContext& context) {
  PRECAST_ASSIGN_OR_RETURN(artifact::Artifact view,
                           artifact::entry_point_artifact(artifact, artifact::kSampleStepEntry));
  const artifact::Signature& s = view.signature;
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<SingleProcessCommunicator> comm,
                           SingleProcessCommunicator::create(1));
  PRECAST_ASSIGN_OR_RETURN(StepExecutable step, StepExecutable::load(view, *comm));
  PRECAST_ASSIGN_OR_RETURN(std::vector<void*> bound,
                           shared_parameters(s, artifact, train, artifact::kSampleStepEntry));
  PRECAST_RETURN_IF_ERROR(step.allocate_buffers(bound));

  std::vector<size_t> batch(kBatchNames.size(), s.inputs.size());
  for (size_t k = 0; k < kBatchNames.size(); ++k) {
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].role == "batch" && s.inputs[i].name == kBatchNames[k]) batch[k] = i;
    }
  }
  size_t logits = s.outputs.size();
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    if (s.outputs[i].name == "logits") logits = i;
  }
  if (logits == s.outputs.size() || s.outputs[logits].shape.size() != 3 ||
      std::find(batch.begin(), batch.end(), s.inputs.size()) != batch.end()) {
    return Error(ExitCode::kIncompatible,
                 "the artifact's sample_step lacks a batch input or its logits [1, T, V]; "
                 "recompile with this build's precast compile");
  }
  const int64_t length = s.outputs[logits].shape[1];
  const int64_t vocab = s.outputs[logits].shape[2];
  if (vocab < data::kByteVocabSize) {
    return usage_error(fmt::format(
        "sample_prompt: sampling uses the byte-level tokenizer (ids up to {}), but the model has "
        "vocab_size={}; recompile with vocab_size >= {} or set sample_tokens=0",
        data::kBytePad, vocab, data::kByteVocabSize));
  }
  SampleResult result;
  result.prompt_tokens = data::tokenize_bytes(prompt, true, false);
  if (static_cast<int64_t>(result.prompt_tokens.size()) >= length) {
    return usage_error(fmt::format(
        "sample_prompt is {} tokens with its BOS, which fills the model's row of "
        "max_target_length={}; give a shorter prompt",
        result.prompt_tokens.size(), length));
  }
  std::vector<uint32_t> sequence = result.prompt_tokens;
  const std::string& dtype = s.outputs[logits].dtype;
  const int64_t element = dtype_bytes(dtype);
  while (static_cast<int64_t>(result.tokens.size()) < max_tokens &&
         static_cast<int64_t>(sequence.size()) < length) {
    write_row(step, s, batch, sequence, length);
    PRECAST_RETURN_IF_ERROR(step.run(context));
    const auto* row = static_cast<const char*>(step.output(logits)) +
                      (static_cast<int64_t>(sequence.size()) - 1) * vocab * element;
    uint32_t best = 0;
    double best_value = load(row, dtype);
    for (int64_t v = 1; v < vocab; ++v) {
      double value = load(row + v * element, dtype);
      if (value > best_value) {
        best_value = value;
        best = static_cast<uint32_t>(v);
      }
    }
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
