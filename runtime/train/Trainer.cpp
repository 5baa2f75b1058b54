#include "runtime/train/Trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/CheckpointWriter.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/eval/Evaluator.h"
#include "runtime/eval/Sampler.h"
#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/metrics/PeakProbe.h"
#include "runtime/metrics/StartupLines.h"
#include "runtime/metrics/StepClock.h"
#include "runtime/train/DataSource.h"
#include "runtime/train/LoadState.h"
#include "runtime/train/StateInit.h"
#include "runtime/train/StepExecutable.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorShard.h"

namespace precast::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Expected<int64_t> vocab_size(const artifact::Artifact& a) {
  for (const artifact::ConfigEntry& e : a.config) {
    if (e.key == "vocab_size") {
      int64_t vocab = std::strtoll(e.value.c_str(), nullptr, 10);
      if (vocab > 0) return vocab;
    }
  }
  return Error(ExitCode::kIncompatible,
               "the artifact's config has no positive vocab_size; recompile with this build's "
               "precast compile");
}

StepMetrics read_metrics(const StepExecutable& step, const artifact::Signature& signature,
                         const StepBinding& binding) {
  auto metric = [&](size_t m) {
    size_t k = binding.metrics[m];
    return load(step.output(k), signature.outputs[k].dtype);
  };
  StepMetrics m;
  m.loss = metric(0);
  m.lm_loss = metric(1);
  m.perplexity = metric(2);
  m.z_loss = metric(3);
  m.total_weights = metric(4);
  m.grad_norm = metric(5);
  m.raw_grad_norm = metric(6);
  m.param_norm = metric(7);
  if (binding.moe_lb_loss) {
    size_t k = *binding.moe_lb_loss;
    m.moe_lb_loss = load(step.output(k), signature.outputs[k].dtype);
  }
  return m;
}

void log_memory(std::ostream& log, const TrainReport& report, int64_t device) {
  int64_t used =
      report.arena_bytes + report.argument_bytes + report.output_bytes - report.alias_bytes;
  log << memstats_lines(used, host_memory_bytes(), device);
}

// The training state a checkpoint holds: every input with role "parameter" or "optimizer_state"
// (the step writes them back in place), by signature name.
std::vector<checkpoint::TensorView> state_views(const artifact::Signature& signature,
                                                StepExecutable& step,
                                                std::vector<void*>& buffers) {
  std::vector<checkpoint::TensorView> views;
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = signature.inputs[i];
    if (t.role != "parameter" && t.role != "optimizer_state") continue;
    views.push_back({t.name, t.dtype, t.shape, step.input(i)});
    buffers.push_back(step.input(i));
  }
  return views;
}

bool checkpoint_due(const RunSettings& settings, int64_t s) {
  return settings.enable_checkpointing &&
         (s % settings.checkpoint_period == 0 ||
          (s == settings.steps - 1 && settings.save_checkpoint_on_completion));
}

// load_parameters_path / load_full_state_path; returns the first step to run.
Expected<int64_t> load_initial_state(const artifact::Artifact& a, const RunSettings& settings,
                                     StepExecutable& step, const TrainOptions& options) {
  if (settings.load_parameters_path.empty() && settings.load_full_state_path.empty()) return 0;
  const bool full = !settings.load_full_state_path.empty();
  std::vector<StateDestination> destinations;
  for (size_t i = 0; i < a.signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = a.signature.inputs[i];
    if (t.role == "parameter" || (full && t.role == "optimizer_state")) {
      destinations.push_back({&t, step.input(i)});
    }
  }
  if (!full) {
    PRECAST_RETURN_IF_ERROR(load_parameters(settings.load_parameters_path, destinations,
                                            a.key.mesh, options.mesh_coordinates, options.log));
    return 0;
  }
  PRECAST_ASSIGN_OR_RETURN(int64_t loaded,
                           load_full_state(settings.load_full_state_path, destinations,
                                           a.key.mesh, options.mesh_coordinates, options.log));
  return loaded + 1;
}

// `saved checkpoint at step N in S s` for each save finished since the last call: a synchronous
// one right after the step, an asynchronous one at the first step boundary after it finished.
void log_completed_saves(checkpoint::CheckpointWriter& writer, std::ostream* log) {
  for (const checkpoint::CompletedSave& done : writer.take_completed()) {
    if (log != nullptr) {
      *log << fmt::format("saved checkpoint at step {} in {:.3f} s ({:.1f} MB/s)\n", done.step,
                          done.seconds,
                          done.seconds > 0 ? static_cast<double>(done.bytes) / 1e6 / done.seconds
                                           : 0.0)
           << std::flush;
      if (done.copied_on_writer) {
        *log << fmt::format("copied the state of step {} on the writer thread in {:.3f} s; the "
                            "next step waited {:.3f} s for it\n",
                            done.step, done.copy_seconds, done.state_wait_seconds);
      }
    }
  }
}

// One process: the writer saves the checkpoint whole (asynchronously by default). Several ranks
// write their pieces, then rank 0 commits them after a barrier, and a second barrier holds every
// rank until the checkpoint is committed: synchronous, on the training thread, where the barriers
// run.
Status save_state(const RunSettings& settings, int64_t step,
                  const checkpoint::CheckpointIdentity& identity,
                  const std::vector<checkpoint::TensorView>& state, const TrainOptions& options,
                  checkpoint::CheckpointWriter& writer, const std::string& data_position) {
  if (identity.world_size <= 1) {
    return writer.save(settings.checkpoint_dir, step, identity, state,
                       settings.max_num_checkpoints_to_keep, data_position);
  }
  if (!options.barrier) return internal_error("several ranks checkpoint without a barrier");
  auto start = Clock::now();
  PRECAST_RETURN_IF_ERROR(
      checkpoint::save_checkpoint_piece(settings.checkpoint_dir, step, options.rank, state));
  PRECAST_RETURN_IF_ERROR(options.barrier());
  if (options.rank == 0) {
    PRECAST_RETURN_IF_ERROR(checkpoint::commit_checkpoint_pieces(
        settings.checkpoint_dir, step, identity, options.all_mesh_coordinates,
        settings.max_num_checkpoints_to_keep, data_position));
  }
  PRECAST_RETURN_IF_ERROR(options.barrier());
  if (options.log != nullptr) {
    double seconds = seconds_since(start);
    int64_t bytes = 0;
    for (const checkpoint::TensorView& t : state) bytes += checkpoint::tensor_view_bytes(t);
    *options.log << fmt::format("saved checkpoint at step {} in {:.3f} s ({:.1f} MB/s, this "
                                "rank's piece)\n",
                                step, seconds,
                                seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0)
                 << std::flush;
  }
  return Status::success();
}

bool diverged(const StepMetrics& m, const RunSettings& settings) {
  return (std::isnan(m.loss) && settings.abort_on_nan_loss) ||
         (std::isinf(m.loss) && settings.abort_on_inf_loss);
}

}  // namespace

Expected<TrainReport> train(const artifact::Artifact& a, const RunSettings& settings,
                            const TrainOptions& options) {
  const std::vector<artifact::TensorSignature>& inputs = a.signature.inputs;
  PRECAST_ASSIGN_OR_RETURN(StepBinding binding, bind_signature(a.signature));
  PRECAST_ASSIGN_OR_RETURN(int64_t vocab, vocab_size(a));
  TrainReport report;

  // One process: collective steps over a group of one; several: the caller's groups (MPI).
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<SingleProcessCommunicator> comm,
                           SingleProcessCommunicator::create(1));
  CommunicatorResolver single = [&comm](const artifact::Collective&) -> Expected<Communicator*> {
    return comm.get();
  };
  auto load_start = Clock::now();
  PRECAST_ASSIGN_OR_RETURN(
      StepExecutable step,
      StepExecutable::load(a, options.communicator ? options.communicator : single));
  report.load_seconds = seconds_since(load_start);

  // What every step function runs with: the GEMM implementation and the thread pool.
  ThreadPool pool(settings.num_threads);
  PRECAST_ASSIGN_OR_RETURN(GemmImpl impl, resolve_gemm_impl(settings.gemm, pool.num_threads()));
  const RuntimeContext context{impl, &pool, options.mesh_coordinates};
  pin_openblas_threads(context);

  // Exactly the plan's buffers, then the state's initial values.
  auto init_start = Clock::now();
  PRECAST_RETURN_IF_ERROR(step.allocate_buffers());
  report.arena_bytes = step.arena_bytes();
  report.argument_bytes = step.argument_bytes();
  report.output_bytes = step.output_bytes();
  report.alias_bytes = step.alias_bytes();
  for (size_t i : binding.parameters) {
    PRECAST_ASSIGN_OR_RETURN(TensorShard shard,
                             tensor_shard(inputs[i], a.key.mesh, options.mesh_coordinates));
    PRECAST_RETURN_IF_ERROR(
        initialise(step.input(i), inputs[i], i, settings.init_weights_seed, pool, &shard));
  }
  // Step 0's batch is part of the initial state (what a run of 0 steps reports).
  PRECAST_ASSIGN_OR_RETURN(
      TensorShard batch_shard,
      tensor_shard(inputs[binding.batch[0]], a.key.mesh, options.mesh_coordinates));
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                           make_data_source(settings.data, vocab, std::move(batch_shard)));
  if (options.log != nullptr && !data->describe().empty()) *options.log << data->describe() << "\n";
  BatchArrays batch;
  for (size_t k = 0; k < batch.size(); ++k) {
    batch[k] = BatchArray{&inputs[binding.batch[k]], step.input(binding.batch[k])};
  }
  PRECAST_RETURN_IF_ERROR(data->next_batch(0, batch));
  report.init_seconds = seconds_since(init_start);

  if (options.log != nullptr) log_memory(*options.log, report, options.device);
  // perf/mfu's denominator: the given peak, or this device's threads measured now.
  report.peak_tflops = run_peak_tflops(settings.outputs.cpu_peak_tflops, pool, options.log);
  const PerfFigures perf{a.model_tflops_per_device, a.tokens_per_device, report.peak_tflops};
  PRECAST_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<MetricsSink>> sinks,
                           open_step_sinks(a, settings, options.log, options.device, perf));

  // eval_step over the eval set every eval_interval steps (runtime/eval/Evaluator.h).
  std::unique_ptr<Evaluator> evaluator;
  if (settings.eval.interval > 0) {
    PRECAST_ASSIGN_OR_RETURN(
        evaluator, Evaluator::create(a, step, settings.eval, settings.data, vocab,
                                     options.communicator ? options.communicator : single,
                                     options.mesh_coordinates));
    if (options.log != nullptr) *options.log << evaluator->description() << "\n";
  }

  // The run-time scalars: the optimizer's are fixed for the run, the learning rate follows the
  // schedule.
  auto set_scalar = [&](size_t k, double value) {
    size_t i = binding.scalars[k];
    store(step.input(i), 0, inputs[i].dtype, value);
  };
  const double optimizer[] = {settings.adam_b1,          settings.adam_b2,
                              settings.adam_eps,         settings.adam_eps_root,
                              settings.adam_weight_decay, settings.gradient_clipping_threshold};
  for (size_t k = 0; k < std::size(optimizer); ++k) set_scalar(k + 1, optimizer[k]);

  // Resume from the latest committed checkpoint of the run (MaxText's behaviour).
  std::vector<void*> state_buffers;
  const std::vector<checkpoint::TensorView> state = state_views(a.signature, step, state_buffers);
  const checkpoint::CheckpointIdentity identity{a.key.ir_hash, a.key.num_devices};
  int64_t first_step = 0;
  if (settings.enable_checkpointing) {
    auto restore_start = Clock::now();
    std::error_code no_directory;
    if (options.progress && std::filesystem::exists(settings.checkpoint_dir, no_directory)) {
      options.progress("restoring the latest checkpoint in " + settings.checkpoint_dir, 0, 0);
    }
    checkpoint::JsonValue data_position;
    PRECAST_ASSIGN_OR_RETURN(std::optional<int64_t> restored,
                             checkpoint::restore_latest_checkpoint(settings.checkpoint_dir,
                                                                   identity, state,
                                                                   state_buffers, options.log,
                                                                   options.rank, &data_position));
    if (options.progress) options.progress({}, 0, 0);
    if (restored) first_step = *restored + 1;
    if (restored) PRECAST_RETURN_IF_ERROR(data->restore_position(data_position));
    if (restored && options.log != nullptr) {
      *options.log << fmt::format("Restored the checkpoint of step {} from {}{}; resuming at step {}\n",
                                  *restored, settings.checkpoint_dir, *restored, first_step);
      double seconds = seconds_since(restore_start);
      int64_t bytes = 0;
      for (const checkpoint::TensorView& t : state) bytes += checkpoint::tensor_view_bytes(t);
      *options.log << fmt::format("restored checkpoint in {:.3f} s ({:.1f} MB/s, read and verified)\n",
                                  seconds, seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0);
    }
  }
  // No checkpoint of its own: start from load_parameters_path or load_full_state_path (MaxText's
  // order), each device taking its piece.
  if (first_step == 0) {
    PRECAST_ASSIGN_OR_RETURN(first_step, load_initial_state(a, settings, step, options));
  }

  // Asynchronous saves for one process; several ranks save synchronously (save_state).
  checkpoint::CheckpointWriter writer(settings.async_checkpointing && a.key.num_devices <= 1);
  if (settings.enable_checkpointing && writer.asynchronous()) {
    double seconds = writer.prepare(state);  // before the steps' clock starts
    if (options.log != nullptr) {
      *options.log << fmt::format("Allocated the checkpoint snapshot buffer in {:.3f} s\n", seconds);
    }
    // The snapshot copy runs on the writer beside the next step's forward and backward passes;
    // the step waits for it, if at all, before its first kernel that writes the state.
    if (writer.copy_on_writer(true)) step.set_before_state_write([&writer] { writer.release_state(); });
  }
  // Each step's seconds run from the previous step's loss (the loop's start for the first) to
  // its own (StepClock.h): the metrics and log writes and the checkpoint after step s are
  // charged to step s + 1. Step s's metrics are written before its checkpoint starts.
  StepClock clock;
  clock.start();
  for (int64_t s = first_step; s < settings.steps; ++s) {
    if (s > 0 && data->exhausted()) {
      if (options.log != nullptr) {
        *options.log << fmt::format("The dataset's num_epoch={} epochs are done after step {}: "
                                    "ending the run (raise num_epoch to train longer).\n",
                                    settings.data.num_epoch, s - 1);
      }
      break;
    }
    if (s > 0) PRECAST_RETURN_IF_ERROR(data->next_batch(s, batch));
    double lr = learning_rate_at(settings.schedule, s);
    set_scalar(0, lr);
    if (options.step_started) options.step_started(s);

    StepObserver* entries = nullptr;
    for (StepObserver* o : options.observers) entries = o->step_begin(s) ? o : entries;
    StepMetrics m;
    {
      PhaseTimer compute(clock, StepPhase::kCompute);
      PRECAST_RETURN_IF_ERROR(step.run(context, entries));
      m = read_metrics(step, a.signature, binding);
    }
    StepTimes times = clock.finish_step();  // the loss is known
    for (StepObserver* o : options.observers) o->step_end(s);
    m.seconds = times.seconds;
    m.compute_seconds = times.compute_seconds;
    m.checkpoint_seconds = times.checkpoint_seconds;
    m.eval_seconds = times.eval_seconds;
    m.other_seconds = times.other_seconds;
    m.step = s;
    m.learning_rate = lr;
    report.steps.push_back(m);

    auto log_start = Clock::now();
    for (const std::unique_ptr<MetricsSink>& sink : sinks) PRECAST_RETURN_IF_ERROR(sink->write(m));
    report.logging_seconds += seconds_since(log_start);
    if (diverged(m, settings)) {
      if (options.log != nullptr) {
        *options.log << (std::isnan(m.loss) ? "Aborting training due to NaN loss.\n"
                                            : "Aborting training due to Inf loss.\n");
      }
      report.aborted = true;
      break;
    }
    // A step after which the data is used up is the run's last: saved as on completion.
    bool last = data->exhausted() && settings.enable_checkpointing &&
                settings.save_checkpoint_on_completion;
    if (checkpoint_due(settings, s) || last) {
      {
        // Synchronous saves count in the next step's seconds; an asynchronous save's copy and
        // writing run beside the steps (a wait for the copy falls in the next step's compute).
        PhaseTimer saving(clock, StepPhase::kCheckpoint);
        PRECAST_RETURN_IF_ERROR(save_state(settings, s, identity, state, options, writer,
                                           data->position_json(s + 1)));
      }
      if (options.log != nullptr && writer.asynchronous()) {
        *options.log << fmt::format("Started saving the checkpoint of step {} in the background.\n", s);
      }
    }
    log_completed_saves(writer, options.log);
    if (evaluator && settings.eval.due(s)) {
      PhaseTimer evaluating(clock, StepPhase::kEval);
      PRECAST_ASSIGN_OR_RETURN(EvalMetrics e,
                               evaluator->evaluate(s, context, nullptr, options.log));
      report.evals.push_back(e);
      for (const std::unique_ptr<MetricsSink>& sink : sinks) {
        PRECAST_RETURN_IF_ERROR(sink->write_eval(e));
      }
      if (settings.eval.target_loss > 0 && e.avg_loss <= settings.eval.target_loss) {
        if (options.log != nullptr) {
          *options.log << fmt::format("Target loss target_eval_loss={} is achieved after step {}: "
                                      "ending the run.\n",
                                      settings.eval.target_loss, s);
        }
        break;
      }
    }
  }
  PRECAST_RETURN_IF_ERROR(writer.finish(options.log));  // the last save's wait: its own line
  log_completed_saves(writer, options.log);
  if (settings.eval.sample_tokens > 0 && !report.aborted) {
    PRECAST_ASSIGN_OR_RETURN(
        report.sample, greedy_sample(a, step, settings.eval.sample_prompt,
                                     settings.eval.sample_tokens, context,
                                     options.communicator ? options.communicator : single,
                                     options.mesh_coordinates, settings.eval.decode));
    if (options.log != nullptr) {
      *options.log << sample_line(settings.eval.sample_prompt, *report.sample) << "\n";
    }
  }
  if (options.keep_final_state) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(step.input(i));
      report.final_state.emplace_back(p, p + tensor_bytes(inputs[i]));
    }
  }
  return report;
}

}  // namespace precast::runtime
