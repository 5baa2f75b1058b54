// The train step: AdamW / adam_pax / SGD updates against the optimizer formulas evaluated here
// in double from the gradient function's output, clipping and the metrics against their
// definitions, gradient accumulation against the single-batch step, and the train-step IR of
// every shipped model (verifies, round-trips, model FLOPs equal MaxText's formula).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/autodiff/Autodiff.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "ir/FloatFormats.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/MoeFlops.h"
#include "tests/support/Random.h"

namespace precast {
namespace {

using autodiff::OptimizerKind;
using autodiff::TrainStepLayout;
using autodiff::TrainStepSpec;
using ir::DType;
using ir::HostTensor;

ModelSpec tiny_spec(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {
      "model_name=" + model, "override_model_config=true", "base_emb_dim=16",
      "base_mlp_dim=24",     "base_num_decoder_layers=2",  "head_dim=4",
      "vocab_size=32",       "max_target_length=8",        "per_device_batch_size=2",
      "dtype=float32",       "base_num_query_heads=4",     "base_num_kv_heads=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  Config config = testing::load_derived(testing::base_yml(), o, 1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  return spec.ok() ? *spec : ModelSpec();
}

using testing::Random;

// Even rows: two segments and two padding tokens; odd rows: one segment.
std::vector<HostTensor> packed_batch(int64_t rows, int64_t length, int64_t vocab, uint64_t seed) {
  ir::TensorType type{DType::kS32, {rows, length}};
  std::vector<HostTensor> batch(6, HostTensor::filled(type, 0));
  Random random{seed};
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> segments = r % 2 == 0
                                        ? std::vector<int64_t>{length / 2, length - length / 2 - 2}
                                        : std::vector<int64_t>{length};
    int64_t t = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      for (int64_t j = 0; j < segments[s]; ++j, ++t) {
        size_t at = static_cast<size_t>(r * length + t);
        batch[0].values[at] = static_cast<double>(random.below(vocab));
        batch[3].values[at] = static_cast<double>(random.below(vocab));
        batch[1].values[at] = batch[4].values[at] = static_cast<double>(j);
        batch[2].values[at] = batch[5].values[at] = static_cast<double>(s + 1);
      }
    }
  }
  return batch;
}

// Weights drawn around MaxText's init scale, plus noise so norms and biases are not exactly 1/0.
std::vector<HostTensor> random_weights(const frontend::ForwardModel& model, DType dtype,
                                       uint64_t seed) {
  Random random{seed};
  std::vector<HostTensor> weights;
  for (const frontend::WeightInfo& w : model.weights) {
    HostTensor t = HostTensor::filled(ir::TensorType{dtype, w.dims}, 0);
    double base = w.init == frontend::InitKind::kOnes ? 1.0 : 0.0;
    double scale = (w.init == frontend::InitKind::kNormal || w.init == frontend::InitKind::kTruncatedNormal) ? w.stddev : 0.1;
    for (double& v : t.values) {
      v = base + scale * (2 * random.uniform() - 1) * 1.7;
      if (dtype == DType::kF32) v = static_cast<double>(static_cast<float>(v));
    }
    weights.push_back(std::move(t));
  }
  return weights;
}

TrainStepSpec optimizer(OptimizerKind kind) {
  TrainStepSpec s;
  s.optimizer = kind;
  return s;
}

TrainStepSpec accumulation(int64_t steps) {
  TrainStepSpec s;
  s.gradient_accumulation_steps = steps;
  return s;
}

// The run-time scalars are f32 inputs; the expected values use them as the step sees them.
struct Hyper {
  double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, eps_root = 0.0, wd = 0.1, clip = 0.0;
  static double f32(double v) { return static_cast<double>(static_cast<float>(v)); }
  std::vector<HostTensor> tensors() const {
    std::vector<HostTensor> out;
    for (double v : {lr, b1, b2, eps, eps_root, wd, clip}) out.push_back(HostTensor::scalar(v));
    return out;
  }
};

struct Built {
  frontend::ForwardModel forward;
  TrainStepLayout layout;
};

Built build(const ModelSpec& spec, int64_t rows, DType dtype, const TrainStepSpec& step,
            bool keep_state_dtypes = false) {
  frontend::ForwardOptions options;
  options.dtype_override = dtype;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(spec, rows, 8, options);
  EXPECT_TRUE(forward.ok()) << (forward.ok() ? "" : forward.error().message());
  Built built{std::move(*forward), {}};
  TrainStepSpec s = step;
  if (!keep_state_dtypes) s.mu_dtype = s.grad_dtype = dtype;
  Expected<TrainStepLayout> layout = autodiff::add_train_step(
      built.forward.module, built.forward.module.function(0), built.forward.weights.size(), s);
  EXPECT_TRUE(layout.ok()) << (layout.ok() ? "" : layout.error().message());
  built.layout = *layout;
  Status verified = ir::verify_module(built.forward.module);
  EXPECT_TRUE(verified.ok()) << (verified.ok() ? "" : verified.error().message());
  return built;
}

std::vector<HostTensor> zeros_like(const std::vector<HostTensor>& tensors) {
  std::vector<HostTensor> out;
  for (const HostTensor& t : tensors) out.push_back(HostTensor::filled(t.type, 0));
  return out;
}

// Runs one step: returns all results.
std::vector<HostTensor> step(const Built& built, const std::vector<HostTensor>& state,
                             const std::vector<HostTensor>& batch, const Hyper& hyper) {
  std::vector<HostTensor> args = state;
  args.insert(args.end(), batch.begin(), batch.end());
  std::vector<HostTensor> scalars = hyper.tensors();
  args.insert(args.end(), scalars.begin(), scalars.end());
  ir::InterpreterOptions options;
  Expected<std::vector<HostTensor>> out = ir::interpret(*built.layout.function, args, options);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message());
  return out.ok() ? *out : std::vector<HostTensor>();
}

std::vector<HostTensor> adam_state(const std::vector<HostTensor>& weights) {
  std::vector<HostTensor> state = weights;
  for (int moment = 0; moment < 2; ++moment) {
    for (const HostTensor& t : zeros_like(weights)) state.push_back(t);
  }
  state.push_back(HostTensor::scalar(0, DType::kS32));
  return state;
}

// Gradients of the MaxText loss, (loss, z_loss, total_weights, d loss / d weights...), from the
// plain forward (mean loss) through add_gradient_function: independent of the train step's
// loss scaling and optimizer.
std::vector<HostTensor> loss_gradients(const ModelSpec& spec, int64_t rows, DType dtype,
                                       const std::vector<HostTensor>& weights,
                                       const std::vector<HostTensor>& batch) {
  frontend::ForwardOptions options;
  options.dtype_override = dtype;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(spec, rows, 8, options);
  EXPECT_TRUE(forward.ok());
  std::vector<size_t> wrt(forward->weights.size());
  for (size_t i = 0; i < wrt.size(); ++i) wrt[i] = i;
  Expected<ir::Function*> grad =
      autodiff::add_gradient_function(forward->module, forward->module.function(0), 0, wrt, "grad");
  EXPECT_TRUE(grad.ok()) << (grad.ok() ? "" : grad.error().message());
  std::vector<HostTensor> args = weights;
  args.insert(args.end(), batch.begin(), batch.end());
  Expected<std::vector<HostTensor>> out = ir::interpret(**grad, args);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message());
  return *out;
}

double norm(const std::vector<HostTensor>& tensors, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) {
    for (double v : tensors[i].values) sum += v * v;
  }
  return std::sqrt(sum);
}

double max_relative_difference(const HostTensor& a, const HostTensor& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    scale = std::max(scale, std::abs(b.values[i]));
    diff = std::max(diff, std::abs(a.values[i] - b.values[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

TEST(TrainStep, AdamWFirstStepsMatchTheFormulaInF64) {
  ModelSpec spec = tiny_spec("llama2-7b");
  const int64_t rows = 2;
  Built built = build(spec, rows, DType::kF64, {});
  ASSERT_NE(built.layout.function, nullptr);
  size_t n = built.forward.weights.size();
  std::vector<HostTensor> weights = random_weights(built.forward, DType::kF64, 7);
  std::vector<HostTensor> batch = packed_batch(rows, 8, 32, 11);
  // Weights and optimizer state are donated: result k reuses parameter k.
  ASSERT_EQ(built.layout.num_state, 3 * n + 1);
  for (size_t k = 0; k < built.layout.num_state; ++k) {
    EXPECT_EQ(built.layout.function->result_alias(k), static_cast<int32_t>(k));
  }
  EXPECT_EQ(built.layout.function->result_alias(built.layout.num_state), -1);
  Hyper hyper;
  std::vector<HostTensor> state = adam_state(weights);
  // Two steps, each checked against the optimizer formulas applied to the gradient function's
  // gradients at the current weights.
  std::vector<double> m_ref, v_ref;
  for (int k = 1; k <= 2; ++k) {
    std::vector<HostTensor> expected_grads =
        loss_gradients(spec, rows, DType::kF64, weights, batch);
    std::vector<HostTensor> out = step(built, state, batch, hyper);
    ASSERT_EQ(out.size(), 3 * n + 1 + autodiff::kNumMetrics);
    size_t metrics = built.layout.first_metric_result;
    EXPECT_NEAR(out[metrics + 0].values[0], expected_grads[0].values[0], 1e-12);  // loss
    EXPECT_DOUBLE_EQ(out[metrics + 1].values[0], out[metrics + 0].values[0]);     // lm_loss
    EXPECT_NEAR(out[metrics + 2].values[0], std::exp(expected_grads[0].values[0]), 1e-10);
    EXPECT_EQ(out[metrics + 4].values[0], expected_grads[2].values[0]);  // total_weights
    EXPECT_EQ(out[metrics + 4].values[0], 2 * 8 - 2);                    // hand count
    double raw = norm(expected_grads, 3, 3 + n);
    EXPECT_NEAR(out[metrics + 6].values[0], raw, 1e-12 * raw);
    EXPECT_NEAR(out[metrics + 5].values[0], raw, 1e-12 * raw);  // no clipping
    EXPECT_EQ(out[3 * n].values[0], k);                         // count

    double bc1 = 1 - std::pow(Hyper::f32(hyper.b1), k), bc2 = 1 - std::pow(Hyper::f32(hyper.b2), k);
    size_t flat = 0;
    double worst = 0;
    if (m_ref.empty()) {
      size_t total = 0;
      for (const HostTensor& w : weights) total += w.values.size();
      m_ref.assign(total, 0);
      v_ref.assign(total, 0);
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t e = 0; e < weights[i].values.size(); ++e, ++flat) {
        double g = expected_grads[3 + i].values[e];
        double p = weights[i].values[e];
        m_ref[flat] = Hyper::f32(hyper.b1) * m_ref[flat] + (1 - Hyper::f32(hyper.b1)) * g;
        v_ref[flat] = Hyper::f32(hyper.b2) * v_ref[flat] + (1 - Hyper::f32(hyper.b2)) * g * g;
        double update =
            (m_ref[flat] / bc1) / (std::sqrt(v_ref[flat] / bc2) + Hyper::f32(hyper.eps)) +
            Hyper::f32(hyper.wd) * p;
        double want = p - Hyper::f32(hyper.lr) * update;
        worst = std::max(worst, std::abs(out[i].values[e] - want));
        worst = std::max(worst, std::abs(out[n + i].values[e] - m_ref[flat]));
        worst = std::max(worst, std::abs(out[2 * n + i].values[e] - v_ref[flat]));
      }
    }
    EXPECT_LT(worst, 1e-12) << "step " << k;
    double param_norm = norm(out, 0, n);
    EXPECT_NEAR(out[metrics + 7].values[0], param_norm, 1e-12 * param_norm);
    state.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(3 * n + 1));
    weights.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  }
}

TEST(TrainStep, ClippingScalesToTheThresholdAndZeroDisablesIt) {
  ModelSpec spec = tiny_spec("llama2-7b");
  Built built = build(spec, 2, DType::kF64, optimizer(OptimizerKind::kSgd));
  size_t n = built.forward.weights.size();
  std::vector<HostTensor> weights = random_weights(built.forward, DType::kF64, 3);
  std::vector<HostTensor> batch = packed_batch(2, 8, 32, 5);
  std::vector<HostTensor> grads = loss_gradients(spec, 2, DType::kF64, weights, batch);
  double raw = norm(grads, 3, 3 + n);
  ASSERT_GT(raw, 0.05);
  size_t metrics = built.layout.first_metric_result;
  ASSERT_EQ(metrics, n);  // SGD has no optimizer state

  Hyper hyper;
  hyper.clip = raw / 4;  // clips: every gradient scaled by 1/4
  std::vector<HostTensor> out = step(built, weights, batch, hyper);
  EXPECT_NEAR(out[metrics + 6].values[0], raw, 1e-12 * raw);
  double factor = Hyper::f32(hyper.clip) / raw;  // ~1/4; the threshold is an f32 input
  EXPECT_NEAR(out[metrics + 5].values[0], Hyper::f32(hyper.clip), 1e-12 * raw);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t e = 0; e < weights[i].values.size(); ++e) {
      double want = weights[i].values[e] - Hyper::f32(hyper.lr) * grads[3 + i].values[e] * factor;
      worst = std::max(worst, std::abs(out[i].values[e] - want));
    }
  }
  EXPECT_LT(worst, 1e-14);

  hyper.clip = raw * 2;  // above the norm: untouched
  out = step(built, weights, batch, hyper);
  EXPECT_NEAR(out[metrics + 5].values[0], raw, 1e-12 * raw);
  hyper.clip = 0;  // disabled
  out = step(built, weights, batch, hyper);
  EXPECT_NEAR(out[metrics + 5].values[0], raw, 1e-12 * raw);
  for (size_t e = 0; e < weights[0].values.size(); ++e) {
    EXPECT_NEAR(out[0].values[e], weights[0].values[e] - Hyper::f32(hyper.lr) * grads[3].values[e],
                1e-15);
  }
}

TEST(TrainStep, AdamPaxAndTheDecayMaskFollowTheirFormulas) {
  ModelSpec spec = tiny_spec("llama2-7b");
  TrainStepSpec pax = optimizer(OptimizerKind::kAdamPax);
  Built built = build(spec, 2, DType::kF64, pax);
  size_t n = built.forward.weights.size();
  std::vector<HostTensor> weights = random_weights(built.forward, DType::kF64, 21);
  std::vector<HostTensor> batch = packed_batch(2, 8, 32, 23);
  std::vector<HostTensor> grads = loss_gradients(spec, 2, DType::kF64, weights, batch);
  Hyper hyper;
  std::vector<HostTensor> out = step(built, adam_state(weights), batch, hyper);
  // First adam_pax step: decay b(1 - b^0)/(1 - b) = 0, so mu = g, nu = g^2 and the update is
  // g / (|g| + eps) + wd p.
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t e = 0; e < weights[i].values.size(); ++e) {
      double g = grads[3 + i].values[e], p = weights[i].values[e];
      double want = p - Hyper::f32(hyper.lr) *
                            (g / (std::abs(g) + Hyper::f32(hyper.eps)) + Hyper::f32(hyper.wd) * p);
      worst = std::max(worst, std::abs(out[i].values[e] - want));
      worst = std::max(worst, std::abs(out[n + i].values[e] - g));
    }
  }
  EXPECT_LT(worst, 1e-12);

  // AdamW with weight decay masked off for the first weight only.
  TrainStepSpec masked;
  masked.weight_decay.assign(n, true);
  masked.weight_decay[0] = false;
  Built adamw = build(spec, 2, DType::kF64, masked);
  out = step(adamw, adam_state(weights), batch, hyper);
  for (size_t i : {size_t{0}, size_t{1}}) {
    double decay = i == 0 ? 0.0 : Hyper::f32(hyper.wd);
    double worst_i = 0;
    for (size_t e = 0; e < weights[i].values.size(); ++e) {
      double g = grads[3 + i].values[e], p = weights[i].values[e];
      double want =
          p - Hyper::f32(hyper.lr) * (g / (std::abs(g) + Hyper::f32(hyper.eps)) + decay * p);
      worst_i = std::max(worst_i, std::abs(out[i].values[e] - want));
    }
    EXPECT_LT(worst_i, 1e-12) << "weight " << i;
  }
}

// mu_dtype and grad_dtype: the first moment is stored in bf16 (its parameters and results are
// bf16 tensors, so memory analysis sees 2 bytes), gradients are cast to bf16 before the
// optimizer, and the update is computed from those casts: after one step mu = (1 - b1) g_bf16
// rounded to bf16, nu = (1 - b2) g_bf16^2 in f32.
TEST(TrainStep, MuDtypeAndGradDtypeAreRealConverts) {
  ModelSpec spec = tiny_spec("llama2-7b");
  TrainStepSpec bf16;
  bf16.mu_dtype = DType::kBF16;
  bf16.grad_dtype = DType::kBF16;
  Built built = build(spec, 2, DType::kF32, bf16, /*keep_state_dtypes=*/true);
  size_t n = built.forward.weights.size();
  const ir::Function& f = *built.layout.function;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(f.type(f.params()[n + i]).dtype, DType::kBF16) << "mu " << i;
    EXPECT_EQ(f.type(f.params()[2 * n + i]).dtype, DType::kF32) << "nu " << i;
  }
  std::vector<HostTensor> weights = random_weights(built.forward, DType::kF32, 41);
  std::vector<HostTensor> state = weights;
  for (size_t i = 0; i < n; ++i) {
    state.push_back(HostTensor::filled(ir::TensorType{DType::kBF16, weights[i].type.dims}, 0));
  }
  for (size_t i = 0; i < n; ++i) state.push_back(HostTensor::filled(weights[i].type, 0));
  state.push_back(HostTensor::scalar(0, DType::kS32));
  std::vector<HostTensor> batch = packed_batch(2, 8, 32, 43);
  // Gradients from the gradient function, in f32 (the train step's own are the same math).
  std::vector<HostTensor> grads = loss_gradients(spec, 2, DType::kF32, weights, batch);
  Hyper hyper;
  std::vector<HostTensor> out = step(built, state, batch, hyper);
  ASSERT_EQ(out.size(), 3 * n + 1 + autodiff::kNumMetrics);
  auto bf16_round = [](double v) { return ir::round_to_dtype(DType::kBF16, v); };
  double b1 = Hyper::f32(hyper.b1), b2 = Hyper::f32(hyper.b2);
  double worst_mu = 0, worst_nu = 0, scale_mu = 0, scale_nu = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[n + i].type.dtype, DType::kBF16);
    for (size_t e = 0; e < weights[i].values.size(); ++e) {
      double g = bf16_round(grads[3 + i].values[e]);
      double mu = out[n + i].values[e];
      EXPECT_EQ(mu, bf16_round(mu));  // a bf16 value
      worst_mu = std::max(worst_mu, std::abs(mu - bf16_round((1 - b1) * g)));
      worst_nu = std::max(worst_nu, std::abs(out[2 * n + i].values[e] - (1 - b2) * g * g));
      scale_mu = std::max(scale_mu, std::abs((1 - b1) * g));
      scale_nu = std::max(scale_nu, (1 - b2) * g * g);
    }
  }
  // The train step's gradient differs from the gradient function's in f32 rounding, which
  // bf16 rounding can turn into one bf16 ulp (2^-8 relative).
  EXPECT_LT(worst_mu, scale_mu * 0x1p-7);
  EXPECT_LT(worst_nu, scale_nu * 0x1p-6);
}

// deepseek's auxiliary-loss-free balancing (routed_bias_update_rate): a tiny deepseek3 (one dense
// layer, then top 2 of 4 experts with sigmoid scores and a routing bias). The MoE layer's
// gate.bias starts at [100, 100, 0, 0], far above any sigmoid score, so every (token, choice)
// pair picks expert 0 or 1: loads [R*T, R*T, 0, 0] = [16, 16, 0, 0] on 2 rows of 8 tokens,
// mean load R*T*K/X = 16 * 2 / 4 = 8, so the update is rate * sign(8 - load) = rate * [-1, -1,
// +1, +1]. deepseek3's weights are the scores before the bias, so the bias has no gradient:
// AdamW moves it by weight decay alone, w (1 - lr wd). The update comes after that, and nothing
// else differs from the same step without it. With 2 micro-batches of 1 row the loads are
// [8, 8, 0, 0] against a mean of 4 in each, and the updates add up: 2 rate * [-1, -1, +1, +1].
TEST(TrainStep, RoutedBiasUpdateMovesTheBiasTowardTheMeanLoad) {
  const std::vector<std::string> deepseek3 = {"base_num_kv_heads=4", "q_lora_rank=6",
                                              "kv_lora_rank=8",      "qk_nope_head_dim=4",
                                              "qk_rope_head_dim=4",  "v_head_dim=4",
                                              "num_experts=4",       "num_experts_per_tok=2",
                                              "base_moe_mlp_dim=8",  "first_num_dense_layers=1"};
  std::vector<std::string> with_update = deepseek3;
  with_update.push_back("routed_bias_update_rate=0.01");
  const double rate = 0.01;
  ModelSpec plain = tiny_spec("deepseek3-tiny", deepseek3);
  ModelSpec balanced = tiny_spec("deepseek3-tiny", with_update);
  ASSERT_EQ(balanced.moe.routed_bias_update_rate, rate);
  Built reference = build(plain, 2, DType::kF64, {});
  Built one = build(balanced, 2, DType::kF64, {});
  Built two = build(balanced, 1, DType::kF64, accumulation(2));
  size_t n = one.forward.weights.size();
  ASSERT_EQ(reference.forward.weights.size(), n);
  size_t bias = n;
  for (size_t i = 0; i < n; ++i) {
    if (one.forward.weights[i].name.ends_with("gate.bias")) {
      ASSERT_EQ(bias, n) << "one MoE layer, one routing bias";
      bias = i;
    }
  }
  ASSERT_LT(bias, n);
  std::vector<HostTensor> weights = random_weights(one.forward, DType::kF64, 41);
  weights[bias].values = {100, 100, 0, 0};
  std::vector<HostTensor> state = adam_state(weights);
  std::vector<HostTensor> batch = packed_batch(2, 8, 32, 43);
  Hyper hyper;
  std::vector<HostTensor> without = step(reference, state, batch, hyper);
  std::vector<HostTensor> a = step(one, state, batch, hyper);
  std::vector<HostTensor> b = step(two, state, batch, hyper);
  ASSERT_EQ(a.size(), without.size());
  ASSERT_EQ(b.size(), without.size());
  const double decayed = 1 - Hyper::f32(hyper.lr) * Hyper::f32(hyper.wd);
  const std::vector<double> direction = {-1, -1, 1, 1};
  for (size_t e = 0; e < 4; ++e) {
    SCOPED_TRACE(e);
    double w = weights[bias].values[e];
    EXPECT_NEAR(without[bias].values[e], w * decayed, 1e-12);
    EXPECT_NEAR(a[bias].values[e], w * decayed + rate * direction[e], 1e-12);
    EXPECT_NEAR(b[bias].values[e], w * decayed + 2 * rate * direction[e], 1e-12);
  }
  // Everything else (weights, moments, count, metrics but param_norm, which is the new
  // weights' norm) is the step without the update's.
  const size_t param_norm = one.layout.first_metric_result + 7;
  for (size_t r = 0; r < a.size(); ++r) {
    if (r == bias || r == param_norm) continue;
    EXPECT_EQ(a[r].values, without[r].values) << "result " << r;
  }
}

// MaxText's accumulation: micro-batch i takes rows i, i+G, ...; summed unnormalised gradients
// divided by the total real-token count give the single-batch step's update.
TEST(TrainStep, GradientAccumulationOfTwoEqualsOneBatchInF32) {
  ModelSpec spec = tiny_spec("llama2-7b");
  Built one = build(spec, 4, DType::kF32, {});
  Built two = build(spec, 2, DType::kF32, accumulation(2));
  ASSERT_EQ(two.layout.rows_per_step, 4);
  size_t n = one.forward.weights.size();
  std::vector<HostTensor> weights = random_weights(one.forward, DType::kF32, 31);
  // Rows 0 and 2 hold two segments each, rows 1 and 3 one: the micro-batches (0, 2) and (1, 3)
  // have different token counts, so a per-micro-batch mean would differ from the global one.
  std::vector<HostTensor> batch = packed_batch(4, 8, 32, 33);
  Hyper hyper;
  hyper.clip = 1.0;
  std::vector<HostTensor> state = adam_state(weights);
  std::vector<HostTensor> a = step(one, state, batch, hyper);
  std::vector<HostTensor> b = step(two, state, batch, hyper);
  ASSERT_EQ(a.size(), b.size());
  size_t metrics = one.layout.first_metric_result;
  EXPECT_NEAR(a[metrics].values[0], b[metrics].values[0], 1e-6 * a[metrics].values[0]);
  EXPECT_EQ(a[metrics + 4].values[0], b[metrics + 4].values[0]);
  EXPECT_NEAR(a[metrics + 6].values[0], b[metrics + 6].values[0], 1e-5 * a[metrics + 6].values[0]);
  double worst = 0;
  for (size_t i = 0; i < 3 * n; ++i) worst = std::max(worst, max_relative_difference(b[i], a[i]));
  EXPECT_LT(worst, 1e-4);
  // The parameters move by lr-sized steps; their difference is f32 round-off of those steps.
  double worst_param = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t e = 0; e < a[i].values.size(); ++e) {
      worst_param = std::max(worst_param, std::abs(a[i].values[e] - b[i].values[e]));
    }
  }
  EXPECT_LT(worst_param, 1e-6);
}

// The train-step IR of every shipped model at its real size verifies and parses back; its dots
// are exactly three times the forward's (MaxText's x3), so model FLOPs counted from the train
// step equal the formula.
TEST(TrainStep, EveryShippedModelsTrainStepVerifiesAndCountsMaxTextsFlops) {
  std::vector<std::string> names = testing::shipped_models();
  ASSERT_EQ(names.size(), 56u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    Config config = testing::load_derived(testing::base_yml(),
                                          {"model_name=" + name, "per_device_batch_size=1"}, 1);
    Expected<ModelSpec> spec = model_spec_from_config(config);
    ASSERT_TRUE(spec.ok());
    BatchSpec batch = batch_spec_from_config(config);
    frontend::ForwardOptions options;
    options.loss_sums = true;
    Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch, options);
    ASSERT_TRUE(forward.ok()) << forward.error().message();
    IrCounts forward_counts = count_function(forward->module.function(0));
    Expected<OptimizerKind> kind = autodiff::optimizer_from_name(config.get_string("opt_type"));
    ASSERT_TRUE(kind.ok());
    Expected<TrainStepLayout> layout = autodiff::add_train_step(
        forward->module, forward->module.function(0), forward->weights.size(), optimizer(*kind));
    ASSERT_TRUE(layout.ok()) << layout.error().message();
    const ir::Function& train = *layout->function;
    Status verified = ir::verify_function(train);
    ASSERT_TRUE(verified.ok()) << verified.error().message();

    IrCounts counts = count_function(train);
    EXPECT_EQ(counts.dot_flops, 3 * forward_counts.dot_flops);
    ModelFlops formula = model_flops_per_device(*spec, batch);
    ModelFlops from_ir = model_flops_of_train_step(counts, layout->rows_per_step, batch);
    EXPECT_EQ(from_ir.learnable, formula.learnable + testing::dense_expert_surplus(config, batch));
    EXPECT_EQ(from_ir.attention, formula.attention);
    EXPECT_GT(counts.hardware_flops, counts.total_flops());

    {  // forward and train_step print, parse back and print the same
      std::string text = ir::print_module(forward->module);
      Expected<ir::Module> parsed = ir::parse_module(text);
      ASSERT_TRUE(parsed.ok()) << parsed.error().message();
      EXPECT_EQ(ir::print_module(*parsed), text);
    }
  }
}

}  // namespace
}  // namespace precast
