// Builder: shape inference for every op, annotations, and shape errors reported as values.
#include <gtest/gtest.h>

#include "tests/support/IrTestSupport.h"
#include "ir/Builder.h"
#include "ir/Printer.h"
#include "ir/ValueNames.h"
#include "ir/Verifier.h"

namespace precast::ir {
namespace {

class BuilderTest : public ::testing::Test {
 protected:
  Module module_;
  Function& f_ = module_.add_function("f");
  Builder b_{f_};

  std::string type_of(Value v) { return v.valid() ? print_value_type(f_, v) : "<invalid>"; }
  std::string error() { return b_.ok() ? "" : b_.status().error().message(); }
};

TEST_F(BuilderTest, ElementwiseKeepsType) {
  Value x = b_.param({DType::kF32, {2, 3}});
  EXPECT_EQ(type_of(b_.add(x, x)), "f32[2,3]");
  EXPECT_EQ(type_of(b_.exp(x)), "f32[2,3]");
  EXPECT_EQ(type_of(b_.unary(OpKind::kIsFinite, x)), "pred[2,3]");
  EXPECT_EQ(type_of(b_.compare(x, x, ComparisonDirection::kLt)), "pred[2,3]");
  Value p = b_.compare(x, x, ComparisonDirection::kEq);
  EXPECT_EQ(type_of(b_.select(p, x, x)), "f32[2,3]");
  EXPECT_EQ(type_of(b_.convert(x, DType::kBF16)), "bf16[2,3]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, DataMovementShapes) {
  Value x = b_.param({DType::kF32, {2, 3}});
  EXPECT_EQ(type_of(b_.broadcast_in_dim(x, {4, 2, 3}, {1, 2})), "f32[4,2,3]");
  EXPECT_EQ(type_of(b_.broadcast_to(x, {5, 2, 3})), "f32[5,2,3]");
  EXPECT_EQ(type_of(b_.reshape(x, {6})), "f32[6]");
  EXPECT_EQ(type_of(b_.transpose(x, {1, 0})), "f32[3,2]");
  EXPECT_EQ(type_of(b_.slice(x, {0, 1}, {2, 3})), "f32[2,2]");
  EXPECT_EQ(type_of(b_.slice(x, {0, 0}, {2, 3}, {1, 2})), "f32[2,2]");
  EXPECT_EQ(type_of(b_.concatenate(std::vector<Value>{x, x, x}, 1)), "f32[2,9]");
  EXPECT_EQ(type_of(b_.pad(x, b_.scalar(0.0), {1, 0}, {2, -1}, {0, 1})), "f32[5,4]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, ReductionsAndContractions) {
  Value x = b_.param({DType::kF32, {4, 8, 16}});
  Value w = b_.param({DType::kF32, {4, 16, 32}});
  EXPECT_EQ(type_of(b_.reduce_sum(x, {1})), "f32[4,16]");
  EXPECT_EQ(type_of(b_.reduce_max(x, {0, 1, 2})), "f32[]");
  EXPECT_EQ(type_of(b_.dot_general(x, w, DotDims{{0}, {0}, {2}, {1}})), "f32[4,8,32]");
  EXPECT_EQ(type_of(b_.dot_general(x, w, DotDims{{}, {}, {2}, {1}})), "f32[4,8,4,32]");
  EXPECT_EQ(type_of(b_.dot_general(x, w, DotDims{{0}, {0}, {2}, {1}}, DType::kF64)), "f64[4,8,32]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, EmbeddingLookupAndGradient) {
  Value table = b_.param({DType::kF32, {1000, 64}});
  Value ids = b_.param({DType::kS32, {8, 128}});
  Value rows = b_.take(table, ids);
  EXPECT_EQ(type_of(rows), "f32[8,128,64]");
  EXPECT_EQ(type_of(b_.scatter_add(b_.splat(0.0, table), ids, rows)), "f32[1000,64]");
  Value by_column = b_.take(table, ids, 1);
  EXPECT_EQ(type_of(by_column), "f32[1000,8,128]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, LeavesAndRandom) {
  Value seed = b_.param({DType::kU32, {}});
  EXPECT_EQ(type_of(b_.scalar(2.0)), "f32[]");
  EXPECT_EQ(type_of(b_.iota({DType::kS32, {4, 5}}, 1)), "s32[4,5]");
  EXPECT_EQ(type_of(b_.rng_bits(seed, {3}, 0)), "u32[3]");
  EXPECT_EQ(type_of(b_.rng_uniform(seed, {DType::kBF16, {3}}, 1)), "bf16[3]");
  EXPECT_EQ(type_of(b_.rng_normal(seed, {DType::kF32, {3}}, 2)), "f32[3]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, ConstantsAreRoundedToTheirType) {
  Value c = b_.constant(0.1, {DType::kBF16, {}});
  const Op& op = f_.op(f_.defining_op(c));
  EXPECT_EQ(f_.attrs(op).reals(AttrKey::kValue)[0], 0.10009765625);
}

TEST_F(BuilderTest, AttentionWithGroupedQueries) {
  Value q = b_.param({DType::kF32, {2, 16, 8, 32}});
  Value k = b_.param({DType::kF32, {2, 16, 2, 32}});
  Value v = b_.param({DType::kF32, {2, 16, 2, 48}});
  Value s = b_.param({DType::kS32, {2, 16}});
  EXPECT_EQ(type_of(b_.attention(q, k, v, {0.125, true})), "f32[2,16,8,48]");
  EXPECT_EQ(type_of(b_.attention(q, k, v, s, s, {0.125, false, 4, 50.0, true})), "f32[2,16,8,48]");
  EXPECT_TRUE(b_.ok()) << error();
}

TEST_F(BuilderTest, AnnotationsScopesAndCheckpoints) {
  Value x = b_.param({DType::kF32, {8, 128}}, "x", {"activation_batch", "activation_embed"});
  Value y;
  {
    Builder::ScopeGuard decoder(b_, "decoder");
    Builder::ScopeGuard layer(b_, "layers_0");
    y = b_.with_checkpoint(b_.with_axes(b_.exp(x), {"activation_batch", ""}), "mlpwi_0");
    EXPECT_EQ(b_.scope(), "decoder/layers_0");
  }
  EXPECT_EQ(b_.scope(), "");
  const Op& op = f_.op(f_.defining_op(y));
  EXPECT_EQ(f_.scope(op), "decoder/layers_0");
  EXPECT_EQ(f_.checkpoint(op), "mlpwi_0");
  EXPECT_EQ(type_of(x), "f32[8,128]{activation_batch,activation_embed}");
  EXPECT_EQ(type_of(y), "f32[8,128]{activation_batch,_}");
  EXPECT_EQ(f_.value_name(x), "x");
}

TEST_F(BuilderTest, OptionalZeroAttributesAreDropped) {
  Value x = b_.param({DType::kF32, {2, 3}});
  Value s = b_.slice(x, {0, 0}, {2, 3}, {1, 1});
  EXPECT_FALSE(f_.attrs(f_.op(f_.defining_op(s))).has(AttrKey::kStride));
  Value p = b_.pad(x, b_.scalar(0.0), {0, 0}, {1, 1}, {0, 0});
  EXPECT_FALSE(f_.attrs(f_.op(f_.defining_op(p))).has(AttrKey::kInterior));
  Value q = b_.param({DType::kF32, {1, 2, 1, 4}});
  Value a = b_.attention(q, q, q, AttentionOptions{0.5});
  const AttrSet& attrs = f_.attrs(f_.op(f_.defining_op(a)));
  EXPECT_TRUE(attrs.has(AttrKey::kScale));
  EXPECT_FALSE(attrs.has(AttrKey::kCausal));
  EXPECT_FALSE(attrs.has(AttrKey::kFlash));
}

TEST_F(BuilderTest, ShapeErrorIsAValueAndPropagatesQuietly) {
  Value x = b_.param({DType::kF32, {4, 8}});
  Value w = b_.param({DType::kF32, {16, 32}});
  b_.set_scope("decoder/mlp");
  Value bad = b_.dot_general(x, w, DotDims{{}, {}, {1}, {0}});
  EXPECT_FALSE(bad.valid());
  Value later = b_.exp(b_.add(bad, bad));
  EXPECT_FALSE(later.valid());
  ASSERT_FALSE(b_.ok());
  EXPECT_EQ(error(),
            "builder: dot_general in scope \"decoder/mlp\": contract dimension pair 0: lhs "
            "dimension 1 has size 8 but rhs dimension 0 has size 16");
  EXPECT_EQ(b_.status().error().code(), ExitCode::kUsage);
}

TEST_F(BuilderTest, FirstErrorIsKept) {
  Value x = b_.param({DType::kF32, {4}});
  Value y = b_.param({DType::kF32, {5}});
  b_.add(x, y);
  b_.reshape(x, {3});
  EXPECT_NE(error().find("add"), std::string::npos) << error();
}

TEST_F(BuilderTest, MoreShapeErrors) {
  Value x = b_.param({DType::kF32, {4, 8}});
  auto fails = [&](Value v, std::string_view needle) {
    EXPECT_FALSE(v.valid());
    EXPECT_NE(error().find(needle), std::string::npos) << error();
  };
  fails(b_.reshape(x, {3, 3}), "cannot reshape f32[4,8] (32 elements) to f32[3,3]");
  Builder b2(f_);
  EXPECT_FALSE(b2.transpose(x, {0, 0}).valid());
  EXPECT_NE(b2.status().error().message().find("names dimension 0 twice"), std::string::npos);
  Builder b3(f_);
  EXPECT_FALSE(b3.broadcast_in_dim(x, {4, 9}, {0, 1}).valid());
  EXPECT_NE(b3.status().error().message().find("cannot broadcast"), std::string::npos);
  Builder b4(f_);
  EXPECT_FALSE(b4.exp(b4.param({DType::kS32, {2}})).valid());
  EXPECT_NE(b4.status().error().message().find("expected f32, f64, bf16 or f16"), std::string::npos);
  Builder b5(f_);
  b5.with_axes(x, {"batch"});
  EXPECT_NE(b5.status().error().message().find("1 axis names given"), std::string::npos);
}

TEST_F(BuilderTest, BuiltModuleVerifies) {
  Module m = testing::every_op_module();
  Status s = verify_module(m);
  EXPECT_TRUE(s.ok()) << s.error().message();
}

TEST_F(BuilderTest, EveryOpKindIsCovered) {
  Module m = testing::every_op_module();
  std::vector<bool> seen(kNumOpKinds, false);
  for (const Op& op : m.function(0).ops()) seen[static_cast<int>(op.kind)] = true;
  for (int i = 0; i < kNumOpKinds; ++i) {
    EXPECT_TRUE(seen[i]) << "every_op_module lacks " << op_name(static_cast<OpKind>(i));
  }
}

}  // namespace
// Facts set on the builder go to the ops it creates; clone carries them, and the results'
// shardings, into a function of another module (another context), as rebuilding passes rely on.
TEST(BuilderFacts, CreatedOpsTakeTheFactsAndCloneCarriesThem) {
  Module source;
  Function& f = source.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {4, 2}}, "x");
  std::vector<std::vector<std::string>> spec = {{"data", "fsdp"}, {}};
  b.with_sharding(x, spec);
  b.set_scope("decoder/layers_2/mlp/backward");
  const OpFacts given{OpPhase::kBackward, OpRegion::kNone, 2, /*block=*/3, /*site=*/5};
  b.set_facts(given);
  Value y = b.with_sharding(b.exp(x), spec);
  b.set_scope("loss");
  b.set_facts({});
  Value z = b.neg(y);
  b.set_results({z});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(f.facts(f.defining_op(y)), given);
  EXPECT_EQ(f.facts(f.defining_op(z)), OpFacts{});  // one component: no block

  Module target;
  Function& g = target.add_function("f");
  Builder c(g);
  Value gx = c.param(TensorType{DType::kF32, {4, 2}}, "x");
  Value gy = c.clone(f, f.defining_op(y), std::span<const Value>(&gx, 1))[0];
  EXPECT_EQ(g.facts(g.defining_op(gy)), given);
  EXPECT_EQ(print_sharding(g, gy), "P(('data', 'fsdp'), None)");
  EXPECT_EQ(print_sharding(g, gx), "");
  EXPECT_EQ(print_sharding(f, x), "P(('data', 'fsdp'), None)");
}

// A new forward op's block is its module instance: query and key of one layer's attention share
// one, the same module of another layer has another, and a scope of one component has none. Its
// site is its place in the layer, the same in every layer. Backward ops take neither from their
// own scope when given their forward op's facts (autodiff); clone keeps facts as they are.
TEST(BuilderFacts, NewForwardOpsNameTheirBlockAndSiteFromTheirScope) {
  Module m;
  Function& f = m.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {4}}, "x");
  auto made = [&](std::string_view scope, int16_t layer) {
    b.set_scope(scope);
    b.set_layer(layer);
    return f.facts(f.defining_op(b.exp(x)));
  };
  OpFacts q3 = made("decoder/layers_3/self_attention/query", 3);
  OpFacts k3 = made("decoder/layers_3/self_attention/key", 3);
  OpFacts q4 = made("decoder/layers_4/self_attention/query", 4);
  OpFacts wo3 = made("decoder/layers_3/mlp/wo", 3);
  OpFacts wo4 = made("decoder/layers_4/mlp/wo", 4);
  OpFacts loss = made("loss", kNoLayer);
  OpFacts head = made("decoder/logits", kNoLayer);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(q3.block, 0);
  EXPECT_EQ(k3.block, q3.block);
  EXPECT_NE(q4.block, q3.block);
  EXPECT_NE(wo3.block, q3.block);
  EXPECT_NE(wo4.block, wo3.block);
  EXPECT_EQ(loss.block, 0);
  EXPECT_NE(head.block, 0);
  EXPECT_NE(q3.site, 0);
  EXPECT_EQ(q4.site, q3.site);
  EXPECT_NE(k3.site, q3.site);
  EXPECT_EQ(wo4.site, wo3.site);
  EXPECT_NE(wo3.site, q3.site);
  EXPECT_EQ(loss.site, 0);
  EXPECT_EQ(head.site, 0);

  // Autodiff's way: the forward op's facts with the backward phase, in ".../backward".
  b.set_scope("decoder/layers_3/self_attention/query/backward");
  OpFacts backward = q3;
  backward.phase = OpPhase::kBackward;
  b.set_facts(backward);
  EXPECT_EQ(f.facts(f.defining_op(b.neg(x))), backward);
}

// Numbers read from text are kept, and those the builder gives later are new ones.
TEST(BuilderFacts, NumbersAfterParsedOnesAreFresh) {
  Module m;
  m.context().note_fact_numbers(7, 9);
  Function& f = m.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {4}}, "x");
  b.set_scope("decoder/layers_0/mlp/wi");
  b.set_layer(0);
  OpFacts facts = f.facts(f.defining_op(b.exp(x)));
  EXPECT_EQ(facts.block, 8);
  EXPECT_EQ(facts.site, 10);
}

}  // namespace precast::ir

namespace precast::ir {
namespace {

// clone() onto a function of the same context copies the source op's interned ids (attributes,
// result types, scope, checkpoint name, value name, axis names, sharding) instead of looking
// them up again, and prints as the same op cloned into another context does; with operands of
// another type and no declared types it infers the result's type from them.
TEST(BuilderClone, SameContextKeepsTheSourceIdsAndInfersNewTypes) {
  Module m;
  Function& f = m.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {4, 2}}, "x");
  b.set_scope("decoder/layers_0/mlp/wo");
  Value t = b.transpose(x, {1, 0});
  b.with_checkpoint(t, "mlpwo");
  b.with_name(t, "t");
  b.with_axes(t, {"mlp", "activation_embed"});
  std::vector<std::vector<std::string>> spec = {{"fsdp"}, {}};
  b.with_sharding(t, spec);
  b.set_results({t});
  ASSERT_TRUE(b.ok());
  const OpIndex source = f.defining_op(t);

  Function& g = m.add_function("g");
  Builder c(g);
  Value gx = c.param(TensorType{DType::kF32, {4, 2}}, "x");
  Value gt = c.clone(f, source, std::span<const Value>(&gx, 1))[0];
  ASSERT_TRUE(c.ok());
  const Op& copy = g.op(g.defining_op(gt));
  EXPECT_EQ(copy.attrs, f.op(source).attrs);
  EXPECT_EQ(copy.scope, f.op(source).scope);
  EXPECT_EQ(copy.checkpoint, f.op(source).checkpoint);
  EXPECT_EQ(g.type_id(gt), f.type_id(t));
  EXPECT_EQ(g.value_info(gt).name, f.value_info(t).name);
  EXPECT_EQ(g.value_info(gt).axes, f.value_info(t).axes);
  EXPECT_EQ(g.value_info(gt).sharding, f.value_info(t).sharding);
  EXPECT_EQ(print_value_type(g, gt), "f32[2,4]{mlp,activation_embed}");
  EXPECT_EQ(print_sharding(g, gt), "P('fsdp', None)");

  // The same op cloned into another module (another context) prints alike.
  Module other;
  Function& h = other.add_function("g");
  Builder d(h);
  Value hx = d.param(TensorType{DType::kF32, {4, 2}}, "x");
  d.clone(f, source, std::span<const Value>(&hx, 1));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(print_op(g, ValueNames(g), g.defining_op(gt)),
            print_op(h, ValueNames(h), h.defining_op(Value{1})));

  // Another operand type, no declared types: transpose [3,5] -> [5,3], the rest still copied.
  Value wide = c.param(TensorType{DType::kF32, {3, 5}}, "wide");
  Value gw = c.clone(f, source, std::span<const Value>(&wide, 1), {}, f.attrs(f.op(source)))[0];
  ASSERT_TRUE(c.ok()) << c.status().error().message();
  EXPECT_EQ(print_value_type(g, gw), "f32[5,3]{mlp,activation_embed}");
  EXPECT_EQ(g.op(g.defining_op(gw)).scope, f.op(source).scope);
  EXPECT_EQ(g.checkpoint(g.op(g.defining_op(gw))), "mlpwo");
}

}  // namespace
}  // namespace precast::ir
