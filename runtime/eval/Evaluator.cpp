#include "runtime/eval/Evaluator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "runtime/data/Corpus.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorElements.h"
#include "runtime/train/TensorShard.h"

namespace precast::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// MaxText's EPS in the eval average (metric_logger.py).
constexpr double kEps = 1e-8;

Expected<int64_t> whole_number(const std::map<std::string, std::string>& config,
                               const std::string& key, int64_t fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0') {
    return usage_error(fmt::format("{}={}: expected a whole number", key, it->second));
  }
  return static_cast<int64_t>(v);
}

std::string unquoted(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

}  // namespace

Expected<std::vector<void*>> shared_parameters(const artifact::Signature& entry,
                                               const artifact::Artifact& artifact,
                                               const StepExecutable& train,
                                               std::string_view entry_name) {
  std::vector<void*> bound(entry.inputs.size(), nullptr);
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const artifact::TensorSignature& t = entry.inputs[i];
    if (t.role != "parameter") continue;
    for (size_t j = 0; j < artifact.signature.inputs.size() && bound[i] == nullptr; ++j) {
      const artifact::TensorSignature& u = artifact.signature.inputs[j];
      if (u.role != "parameter" || u.name != t.name) continue;
      if (u.shape != t.shape || u.dtype != t.dtype) {
        return Error(ExitCode::kIncompatible,
                     fmt::format("{}'s parameter '{}' is {}[{}] but train_step's is {}[{}]; "
                                 "recompile with this build's precast compile",
                                 entry_name, t.name, t.dtype, fmt::join(t.shape, ","), u.dtype,
                                 fmt::join(u.shape, ",")));
      }
      bound[i] = train.input(j);
    }
    if (bound[i] == nullptr) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("{}'s parameter '{}' is not a parameter of train_step; recompile "
                               "with this build's precast compile",
                               entry_name, t.name));
    }
  }
  return bound;
}

Expected<EvalSettings> eval_settings(const std::map<std::string, std::string>& config) {
  EvalSettings s;
  PRECAST_ASSIGN_OR_RETURN(s.interval, whole_number(config, "eval_interval", -1));
  PRECAST_ASSIGN_OR_RETURN(s.steps, whole_number(config, "eval_steps", -1));
  PRECAST_ASSIGN_OR_RETURN(s.start_step, whole_number(config, "eval_start_step", 0));
  if (s.start_step < 0) {
    return usage_error(fmt::format("eval_start_step={}: must be a step >= 0", s.start_step));
  }
  PRECAST_ASSIGN_OR_RETURN(s.sample_tokens, whole_number(config, "sample_tokens", 0));
  if (s.sample_tokens < 0) {
    return usage_error(
        fmt::format("sample_tokens={}: must be >= 0 (0: no sample)", s.sample_tokens));
  }
  PRECAST_ASSIGN_OR_RETURN(s.decode, decode_settings(config));
  auto prompt = config.find("sample_prompt");
  if (prompt != config.end()) s.sample_prompt = unquoted(prompt->second);
  auto path = config.find("eval_dataset_path");
  if (path != config.end()) s.dataset_path = unquoted(path->second);
  auto target = config.find("target_eval_loss");
  if (target != config.end()) {
    char* end = nullptr;
    s.target_loss = std::strtod(target->second.c_str(), &end);
    if (target->second.empty() || *end != '\0') {
      return usage_error(
          fmt::format("target_eval_loss={}: expected a number (0: never stop)", target->second));
    }
  }
  return s;
}

Expected<std::unique_ptr<Evaluator>> Evaluator::create(
    const artifact::Artifact& artifact, const StepExecutable& train, const EvalSettings& settings,
    const data::DataSettings& data, int64_t vocab, const CommunicatorResolver& communicator,
    const std::vector<int64_t>& mesh_coordinates) {
  std::unique_ptr<Evaluator> e(new Evaluator());
  e->settings_ = settings;
  PRECAST_ASSIGN_OR_RETURN(artifact::Artifact view,
                           artifact::entry_point_artifact(artifact, artifact::kEvalStepEntry));
  e->view_ = std::make_unique<artifact::Artifact>(std::move(view));
  const artifact::Signature& eval = e->view_->signature;
  PRECAST_ASSIGN_OR_RETURN(StepExecutable step, StepExecutable::load(*e->view_, communicator));
  e->step_ = std::make_unique<StepExecutable>(std::move(step));

  PRECAST_ASSIGN_OR_RETURN(std::vector<void*> bound,
                           shared_parameters(eval, artifact, train, artifact::kEvalStepEntry));
  PRECAST_RETURN_IF_ERROR(e->step_->allocate_buffers(bound));

  // The six batch arrays and the three sums, by name.
  for (size_t k = 0; k < kBatchNames.size(); ++k) {
    for (size_t i = 0; i < eval.inputs.size(); ++i) {
      if (eval.inputs[i].role == "batch" && eval.inputs[i].name == kBatchNames[k]) {
        e->batch_[k] = BatchArray{&eval.inputs[i], e->step_->input(i)};
      }
    }
    if (e->batch_[k].tensor == nullptr) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("eval_step has no batch input '{}'; recompile with this build's "
                               "precast compile",
                               kBatchNames[k]));
    }
  }
  const char* sums[] = {"xent_sum", "z_loss_sum", "total_weights"};
  for (size_t k = 0; k < 3; ++k) {
    bool found = false;
    for (size_t i = 0; i < eval.outputs.size() && !found; ++i) {
      found = eval.outputs[i].name == sums[k];
      if (found) e->outputs_[k] = i;
    }
    if (!found) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("eval_step has no output '{}'; recompile with this build's "
                               "precast compile",
                               sums[k]));
    }
  }

  for (size_t i = 0; i < eval.outputs.size(); ++i) {
    if (eval.outputs[i].name == "moe_lb_loss") e->moe_lb_output_ = i;
  }
  for (const artifact::ConfigEntry& entry : artifact.config) {
    if (entry.key == "num_experts") {
      e->routed_experts_ = std::strtoll(entry.value.c_str(), nullptr, 10) > 1;
    }
  }

  // The eval set.
  PRECAST_ASSIGN_OR_RETURN(TensorShard shard,
                           tensor_shard(*e->batch_[0].tensor, artifact.key.mesh, mesh_coordinates));
  if (data.type == "synthetic" && settings.dataset_path.empty()) {
    e->data_ = std::make_unique<SyntheticBatch>(vocab, data.shuffle_seed, std::move(shard));
    e->description_ = "Eval data: the synthetic batch";
    return e;
  }
  data::DataSettings eval_data = data;
  eval_data.shuffle = false;  // the eval set in file order, once
  eval_data.num_epoch = 1;
  data::Corpus corpus;
  if (!settings.dataset_path.empty()) {
    if (eval_data.type == "synthetic") eval_data.type = "text";
    eval_data.path = settings.dataset_path;
    Expected<data::Corpus> read = data::load_eval_corpus(eval_data, vocab);
    if (!read.ok()) {
      // The reader names the entry as dataset_path's; this run read it as eval_dataset_path.
      std::string message = read.error().message();
      if (message.rfind("dataset_path: ", 0) == 0) message.erase(0, 14);
      if (message.rfind("eval_dataset_path=", 0) == 0) return read.error();
      return Error(read.error().code(),
                   fmt::format("eval_dataset_path={}: {}", settings.dataset_path, message));
    }
    corpus = std::move(*read);
  } else {
    PRECAST_ASSIGN_OR_RETURN(corpus, data::load_corpus(eval_data, vocab));
    if (corpus.held_out.document_count() == 0) {
      return usage_error(fmt::format(
          "dataset_path={}: no document is held out for evaluation (every {}th is, and the "
          "dataset has {}); give eval_dataset_path or more documents, or set eval_interval=-1",
          data.path, data::kEvalEvery, corpus.train.document_count()));
    }
  }
  e->description_ = fmt::format("Eval data: {} documents ({} tokens){}",
                                corpus.held_out.document_count(), corpus.held_out.tokens.size(),
                                settings.dataset_path.empty()
                                    ? fmt::format(", every {}th of dataset_path", data::kEvalEvery)
                                    : ", eval_dataset_path");
  // The batch builder reads Corpus::train: the eval documents take its place.
  corpus.train = std::move(corpus.held_out);
  corpus.held_out = {};
  auto dataset = std::make_unique<DatasetBatch>(std::move(corpus), eval_data, std::move(shard));
  e->dataset_ = dataset.get();
  e->data_ = std::move(dataset);
  return e;
}

std::string running_eval_line(int64_t index, double seconds, double total_loss,
                              double total_weights) {
  const double loss = total_loss / (total_weights + kEps);
  return fmt::format(
      "Completed eval step: {}, seconds: {:.3f}, running loss={:.3f}, running perplexity={:.3f}, "
      "running total_weights={}",
      index, seconds, loss, std::exp(loss), python_float_text(total_weights));
}

Expected<EvalMetrics> Evaluator::evaluate(int64_t step, const RuntimeContext& context,
                                          std::vector<EvalBatch>* batches, std::ostream* log) {
  if (log != nullptr) *log << fmt::format("Starting eval after train step {}\n", step);
  if (dataset_ != nullptr) dataset_->rewind();
  // Synthetic data never runs out: eval_steps <= 0 evaluates its one batch.
  const int64_t limit = settings_.steps > 0 ? settings_.steps : dataset_ == nullptr ? 1 : -1;
  EvalMetrics m;
  m.step = step;
  double z_loss_sum_of_means = 0, moe_lb_loss_sum = 0, seconds = 0;
  for (int64_t b = 0; limit < 0 || b < limit; ++b) {
    if (dataset_ != nullptr && dataset_->exhausted()) break;
    auto start = Clock::now();
    PRECAST_RETURN_IF_ERROR(data_->next_batch(b, batch_));
    PRECAST_RETURN_IF_ERROR(step_->run(context));
    const artifact::Signature& s = view_->signature;
    EvalBatch e;
    e.xent_sum = load(step_->output(outputs_[0]), s.outputs[outputs_[0]].dtype);
    e.z_loss_sum = load(step_->output(outputs_[1]), s.outputs[outputs_[1]].dtype);
    e.total_weights = load(step_->output(outputs_[2]), s.outputs[outputs_[2]].dtype);
    if (moe_lb_output_) {
      e.moe_lb_loss = load(step_->output(*moe_lb_output_), s.outputs[*moe_lb_output_].dtype);
    }
    e.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    m.total_loss += e.xent_sum;
    m.total_weights += e.total_weights;
    z_loss_sum_of_means += e.z_loss_sum / (e.total_weights + kEps);
    moe_lb_loss_sum += e.moe_lb_loss;
    seconds += e.seconds;
    if (log != nullptr) {
      *log << running_eval_line(m.batches, e.seconds, m.total_loss, m.total_weights) << "\n";
    }
    ++m.batches;
    if (batches != nullptr) batches->push_back(e);
  }
  m.avg_loss = m.total_loss / (m.total_weights + kEps);
  m.avg_perplexity = std::exp(m.avg_loss);
  m.avg_z_loss = m.batches > 0 ? z_loss_sum_of_means / static_cast<double>(m.batches) : 0;
  m.step_time_seconds = m.batches > 0 ? seconds / static_cast<double>(m.batches) : 0;
  // MaxText's eval/avg_moe_lb_loss: the sum of the eval steps' moe_lb_loss over their count.
  if (routed_experts_) {
    m.moe_lb_loss = moe_lb_loss_sum;
    m.avg_moe_lb_loss = m.batches > 0 ? moe_lb_loss_sum / static_cast<double>(m.batches) : 0;
  }
  return m;
}

}  // namespace precast::runtime
