// Scalar numerics of the element emitter: each elementwise op on register values, with the
// interpreter's semantics (ir/interpreter/Elementwise.cpp, ir/FloatFormats.h). Floats compute
// in their own precision (bf16 and f16 in float, then rounded to the format; float has more than
// 2p+2 bits for both, so + - * / sqrt round exactly as the interpreter's double-then-round);
// transcendental ops call libm's float functions (within a few ulp of the interpreter's double
// result rounded once).
#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <limits>

#include "compiler/backend/cpu/Emitter.h"
#include "ir/FloatFormats.h"
#include "llvm/IR/Intrinsics.h"

namespace precast::backend::cpu {

using ir::ComparisonDirection;
using ir::DType;
using ir::OpKind;

namespace {

bool is_double(llvm::Value* x) { return x->getType()->isDoubleTy(); }

// Ops whose float result is not a single correctly rounded IEEE operation.
bool is_transcendental(OpKind kind) {
  switch (kind) {
    case OpKind::kExp:
    case OpKind::kExpm1:
    case OpKind::kLog:
    case OpKind::kLog1p:
    case OpKind::kLogistic:
    case OpKind::kTanh:
    case OpKind::kRsqrt:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kErf:
    case OpKind::kPow:
    case OpKind::kAtan2: return true;
    default: return false;
  }
}

}  // namespace

llvm::Value* Emitter::intrinsic(llvm::Intrinsic::ID id, llvm::Value* x) {
  llvm::Function* declaration = llvm::Intrinsic::getDeclaration(&module_, id, {x->getType()});
  return builder_.CreateCall(declaration, {x});
}

llvm::Value* Emitter::math_call(const std::string& float_name, llvm::Value* x, llvm::Value* y) {
  std::string name = is_double(x) ? float_name.substr(0, float_name.size() - 1) : float_name;
  llvm::Type* type = x->getType();
  std::vector<llvm::Type*> params(y ? 2 : 1, type);
  llvm::FunctionCallee callee =
      module_.getOrInsertFunction(name, llvm::FunctionType::get(type, params, false));
  if (auto* function = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    function->setDoesNotAccessMemory();
    function->setDoesNotThrow();
    function->addFnAttr(llvm::Attribute::WillReturn);
  }
  llvm::CallInst* call = y ? builder_.CreateCall(callee, {x, y}) : builder_.CreateCall(callee, {x});
  call->setDoesNotAccessMemory();
  call->setDoesNotThrow();
  return call;
}

llvm::Value* Emitter::fast_exp_f32(llvm::Value* x) {
  llvm::IRBuilder<>& b = builder_;
  llvm::Type* f = x->getType();  // float or a vector of float
  llvm::Type* bits_type = i32();
  if (auto* vector = llvm::dyn_cast<llvm::VectorType>(f)) {
    bits_type = llvm::VectorType::get(i32(), vector->getElementCount());
  }
  auto c = [&](double v) { return llvm::ConstantFP::get(f, v); };
  auto n32 = [&](uint32_t v) { return llvm::ConstantInt::get(bits_type, v); };
  auto fma = [&](llvm::Value* p, llvm::Value* q, llvm::Value* r) {
    return b.CreateIntrinsic(llvm::Intrinsic::fma, {f}, {p, q, r});
  };
  constexpr double kLow = -87.33654475;  // log(FLT_MIN)
  constexpr double kHigh = 88.72283935;  // just above log(FLT_MAX): 2^n overflows to inf there
  // NaN passes the clamps unchanged and is returned as is at the end.
  llvm::Value* low = b.CreateFCmpOLT(x, c(kLow));
  llvm::Value* xc = b.CreateSelect(low, c(kLow), x);
  xc = b.CreateSelect(b.CreateFCmpOGT(xc, c(kHigh)), c(kHigh), xc);
  // n = round(x / ln 2) through the 1.5 * 2^23 shifter: t's low mantissa bits hold n.
  llvm::Value* shifter = c(12582912.0);
  llvm::Value* t = fma(xc, c(1.44269504088896341), shifter);
  llvm::Value* n = b.CreateFSub(t, shifter);
  llvm::Value* r = fma(b.CreateFNeg(n), c(0.693145751953125), xc);  // ln 2 high part (exact n*hi)
  r = fma(b.CreateFNeg(n), c(1.428606765330187045e-06), r);         // ln 2 low part
  // e^r on |r| <= ln2/2: Taylor to degree 7 (truncation < 1e-8 relative).
  static constexpr double kCoefficients[] = {1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24,
                                             1.0 / 6,    1.0 / 2,   1.0,       1.0};
  llvm::Value* poly = c(kCoefficients[0]);
  for (size_t i = 1; i < std::size(kCoefficients); ++i) poly = fma(poly, r, c(kCoefficients[i]));
  llvm::Value* ni = b.CreateSub(b.CreateBitCast(t, bits_type), n32(0x4B400000));
  llvm::Value* scale = b.CreateBitCast(b.CreateShl(b.CreateAdd(ni, n32(127)), n32(23)), f);
  llvm::Value* result = b.CreateFMul(poly, scale);
  result = b.CreateSelect(low, c(0.0), result);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, result);
}

// ---- Rounding -------------------------------------------------------------------------------

namespace {

// float → bf16 (held in a float): round to nearest even on the bit pattern; NaN stays a quiet
// NaN with its sign.
llvm::Value* round_to_bf16(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Value* bits = b.CreateBitCast(x, b.getInt32Ty());
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* rounded =
      b.CreateAnd(b.CreateAdd(b.CreateAdd(bits, b.getInt32(0x7fff)), lsb), b.getInt32(0xffff0000u));
  llvm::Value* quiet = b.CreateAnd(b.CreateOr(bits, b.getInt32(0x00400000)), b.getInt32(0xffff0000u));
  llvm::Value* is_nan = b.CreateFCmpUNO(x, x);
  return b.CreateBitCast(b.CreateSelect(is_nan, quiet, rounded), b.getFloatTy());
}

}  // namespace

llvm::Value* Emitter::round_float_to(DType dtype, llvm::Value* x) {
  llvm::IRBuilder<>& b = builder_;
  switch (dtype) {
    case DType::kF64: return is_double(x) ? x : b.CreateFPExt(x, f64());
    case DType::kF32: return is_double(x) ? b.CreateFPTrunc(x, b.getFloatTy()) : x;
    case DType::kBF16:
    case DType::kF16: {
      llvm::Value* single = x;
      if (is_double(x)) {
        // Round to odd into float (the nearest float whose last bit is 1 when inexact), so that
        // the second rounding into the 8- or 11-bit format is the correct one.
        llvm::Value* nearest = b.CreateFPTrunc(x, b.getFloatTy());
        llvm::Value* back = b.CreateFPExt(nearest, f64());
        llvm::Value* bits = b.CreateBitCast(nearest, i32());
        llvm::Value* inexact = b.CreateFCmpONE(back, x);
        llvm::Value* finite = b.CreateFCmpONE(intrinsic(llvm::Intrinsic::fabs, nearest),
                                              llvm::ConstantFP::getInfinity(b.getFloatTy()));
        llvm::Value* even = b.CreateICmpEQ(b.CreateAnd(bits, 1), b.getInt32(0));
        llvm::Value* away = b.CreateFCmpOGT(intrinsic(llvm::Intrinsic::fabs, back),
                                            intrinsic(llvm::Intrinsic::fabs, x));
        llvm::Value* odd = b.CreateSelect(away, b.CreateSub(bits, b.getInt32(1)),
                                          b.CreateAdd(bits, b.getInt32(1)));
        llvm::Value* fix = b.CreateAnd(b.CreateAnd(inexact, finite), even);
        single = b.CreateBitCast(b.CreateSelect(fix, odd, bits), b.getFloatTy());
      }
      if (dtype == DType::kBF16) return round_to_bf16(b, single);
      return b.CreateFPExt(b.CreateFPTrunc(single, b.getHalfTy()), b.getFloatTy());
    }
    default:
      fail(fmt::format("rounding a float to {}", ir::dtype_name(dtype)));
      return llvm::UndefValue::get(register_type(dtype));
  }
}

llvm::Value* Emitter::to_double(DType from, llvm::Value* x) {
  switch (from) {
    case DType::kF64: return x;
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return builder_.CreateFPExt(x, f64());
    case DType::kS32: return builder_.CreateSIToFP(x, f64());
    case DType::kU32:
    case DType::kPred: return builder_.CreateUIToFP(x, f64());
  }
  return x;
}

llvm::Value* Emitter::constant_of(DType dtype, double value) {
  switch (dtype) {
    case DType::kF64: return llvm::ConstantFP::get(f64(), value);
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return llvm::ConstantFP::get(builder_.getFloatTy(),
                                   static_cast<float>(ir::round_to_dtype(dtype, value)));
    case DType::kS32:
    case DType::kU32:
      return builder_.getInt32(static_cast<uint32_t>(ir::to_int64_or_zero(ir::round_to_dtype(dtype, value))));
    case DType::kPred: return builder_.getInt1(value != 0.0);
  }
  return nullptr;
}

llvm::Value* Emitter::convert(DType from, DType to, llvm::Value* x) {
  llvm::IRBuilder<>& b = builder_;
  if (from == to) return x;
  bool from_float = ir::is_floating(from), to_float = ir::is_floating(to);
  if (from_float && to_float) return round_float_to(to, x);
  if (from_float) {
    if (to == DType::kPred) return b.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0.0));
    llvm::Intrinsic::ID id = to == DType::kS32 ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    llvm::Function* saturating = llvm::Intrinsic::getDeclaration(&module_, id, {i32(), x->getType()});
    return b.CreateCall(saturating, {x});  // truncates, saturates, NaN → 0
  }
  if (from == DType::kPred) {
    if (to_float) return b.CreateSelect(x, constant_of(to, 1.0), constant_of(to, 0.0));
    return b.CreateZExt(x, i32());
  }
  // s32 / u32.
  if (to_float) return round_float_to(to, to_double(from, x));
  if (to == DType::kPred) return b.CreateICmpNE(x, b.getInt32(0));
  return x;  // s32 <-> u32: the same bits
}

// ---- Ops ------------------------------------------------------------------------------------

llvm::Value* Emitter::float_max(llvm::Value* a, llvm::Value* c) {
  llvm::Value* nan = llvm::ConstantFP::getNaN(a->getType());
  llvm::Value* larger = builder_.CreateSelect(builder_.CreateFCmpOLT(a, c), c, a);
  return builder_.CreateSelect(builder_.CreateFCmpUNO(a, c), nan, larger);
}

llvm::Value* Emitter::float_min(llvm::Value* a, llvm::Value* c) {
  llvm::Value* nan = llvm::ConstantFP::getNaN(a->getType());
  llvm::Value* smaller = builder_.CreateSelect(builder_.CreateFCmpOLT(c, a), c, a);
  return builder_.CreateSelect(builder_.CreateFCmpUNO(a, c), nan, smaller);
}

llvm::Value* Emitter::unary(OpKind kind, DType dtype, llvm::Value* x) {
  llvm::IRBuilder<>& b = builder_;
  if (dtype == DType::kPred) {
    if (kind == OpKind::kNot) return b.CreateNot(x);
  } else if (ir::is_integer(dtype)) {
    llvm::Value* zero = b.getInt32(0);
    switch (kind) {
      case OpKind::kNeg: return b.CreateSub(zero, x);
      case OpKind::kAbs: return b.CreateSelect(b.CreateICmpSLT(x, zero), b.CreateSub(zero, x), x);
      case OpKind::kSign:
        return b.CreateSub(b.CreateZExt(b.CreateICmpSGT(x, zero), i32()),
                           b.CreateZExt(b.CreateICmpSLT(x, zero), i32()));
      case OpKind::kNot: return b.CreateNot(x);
      default: break;
    }
  } else {
    if (options_.precise_transcendentals && dtype != DType::kF64 && is_transcendental(kind)) {
      x = builder_.CreateFPExt(x, f64());
    }
    llvm::Type* type = x->getType();
    llvm::Value* one = llvm::ConstantFP::get(type, 1.0);
    llvm::Value* r = nullptr;
    switch (kind) {
      case OpKind::kNeg: r = b.CreateFNeg(x); break;
      case OpKind::kAbs: r = intrinsic(llvm::Intrinsic::fabs, x); break;
      case OpKind::kSign: {
        llvm::Value* zero = llvm::ConstantFP::get(type, 0.0);
        llvm::Value* s = b.CreateSelect(b.CreateFCmpOGT(x, zero), one,
                                        b.CreateSelect(b.CreateFCmpOLT(x, zero),
                                                       llvm::ConstantFP::get(type, -1.0), x));
        r = s;  // NaN and ±0 fall through as x
        break;
      }
      case OpKind::kFloor: r = intrinsic(llvm::Intrinsic::floor, x); break;
      case OpKind::kCeil: r = intrinsic(llvm::Intrinsic::ceil, x); break;
      case OpKind::kRoundNearestEven: r = intrinsic(llvm::Intrinsic::roundeven, x); break;
      case OpKind::kExp: r = intrinsic(llvm::Intrinsic::exp, x); break;
      case OpKind::kExpm1: r = math_call("expm1f", x); break;
      case OpKind::kLog: r = intrinsic(llvm::Intrinsic::log, x); break;
      case OpKind::kLog1p: r = math_call("log1pf", x); break;
      case OpKind::kLogistic:
        r = b.CreateFDiv(one, b.CreateFAdd(one, intrinsic(llvm::Intrinsic::exp, b.CreateFNeg(x))));
        break;
      case OpKind::kTanh: r = math_call("tanhf", x); break;
      case OpKind::kSqrt: r = intrinsic(llvm::Intrinsic::sqrt, x); break;
      case OpKind::kRsqrt: r = b.CreateFDiv(one, intrinsic(llvm::Intrinsic::sqrt, x)); break;
      case OpKind::kSin: r = intrinsic(llvm::Intrinsic::sin, x); break;
      case OpKind::kCos: r = intrinsic(llvm::Intrinsic::cos, x); break;
      case OpKind::kErf: r = math_call("erff", x); break;
      case OpKind::kIsFinite:
        return b.CreateFCmpONE(intrinsic(llvm::Intrinsic::fabs, x), llvm::ConstantFP::getInfinity(type));
      default: break;
    }
    if (r) return round_float_to(dtype, r);
  }
  fail(fmt::format("{} of {} is not supported", ir::op_name(kind), ir::dtype_name(dtype)));
  return llvm::UndefValue::get(x->getType());
}

llvm::Value* Emitter::binary(OpKind kind, DType dtype, llvm::Value* a, llvm::Value* c) {
  llvm::IRBuilder<>& b = builder_;
  if (dtype == DType::kPred) {
    switch (kind) {
      case OpKind::kAnd: return b.CreateAnd(a, c);
      case OpKind::kOr: return b.CreateOr(a, c);
      case OpKind::kXor: return b.CreateXor(a, c);
      default: break;
    }
  } else if (ir::is_integer(dtype)) {
    bool is_signed = dtype == DType::kS32;
    llvm::Value* zero = b.getInt32(0);
    switch (kind) {
      case OpKind::kAdd: return b.CreateAdd(a, c);
      case OpKind::kSub: return b.CreateSub(a, c);
      case OpKind::kMul: return b.CreateMul(a, c);
      case OpKind::kDiv:
      case OpKind::kRem: {
        // XLA: x/0 = -1 (unsigned: all ones), x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0.
        llvm::Value* by_zero = b.CreateICmpEQ(c, zero);
        llvm::Value* overflow =
            is_signed ? b.CreateAnd(b.CreateICmpEQ(a, b.getInt32(0x80000000u)),
                                    b.CreateICmpEQ(c, b.getInt32(0xffffffffu)))
                      : b.getFalse();
        llvm::Value* safe = b.CreateSelect(b.CreateOr(by_zero, overflow), b.getInt32(1), c);
        if (kind == OpKind::kDiv) {
          llvm::Value* q = is_signed ? b.CreateSDiv(a, safe) : b.CreateUDiv(a, safe);
          return b.CreateSelect(by_zero, b.getInt32(0xffffffffu), b.CreateSelect(overflow, a, q));
        }
        llvm::Value* r = is_signed ? b.CreateSRem(a, safe) : b.CreateURem(a, safe);
        return b.CreateSelect(by_zero, a, b.CreateSelect(overflow, zero, r));
      }
      case OpKind::kMax:
        return b.CreateSelect(is_signed ? b.CreateICmpSLT(a, c) : b.CreateICmpULT(a, c), c, a);
      case OpKind::kMin:
        return b.CreateSelect(is_signed ? b.CreateICmpSLT(c, a) : b.CreateICmpULT(c, a), c, a);
      case OpKind::kAnd: return b.CreateAnd(a, c);
      case OpKind::kOr: return b.CreateOr(a, c);
      case OpKind::kXor: return b.CreateXor(a, c);
      case OpKind::kShiftLeft:
      case OpKind::kShiftRightLogical: {
        llvm::Value* amount = b.CreateAnd(c, 31);
        llvm::Value* shifted = kind == OpKind::kShiftLeft ? b.CreateShl(a, amount) : b.CreateLShr(a, amount);
        return b.CreateSelect(b.CreateICmpUGE(c, b.getInt32(32)), zero, shifted);
      }
      default: break;
    }
  } else {
    if (options_.precise_transcendentals && dtype != DType::kF64 && is_transcendental(kind)) {
      a = b.CreateFPExt(a, f64());
      c = b.CreateFPExt(c, f64());
    }
    llvm::Value* r = nullptr;
    switch (kind) {
      case OpKind::kAdd: r = b.CreateFAdd(a, c); break;
      case OpKind::kSub: r = b.CreateFSub(a, c); break;
      case OpKind::kMul: r = b.CreateFMul(a, c); break;
      case OpKind::kDiv: r = b.CreateFDiv(a, c); break;
      case OpKind::kRem: r = b.CreateFRem(a, c); break;
      case OpKind::kMax: r = float_max(a, c); break;
      case OpKind::kMin: r = float_min(a, c); break;
      case OpKind::kPow: {
        llvm::Function* pow = llvm::Intrinsic::getDeclaration(&module_, llvm::Intrinsic::pow, {a->getType()});
        r = b.CreateCall(pow, {a, c});
        break;
      }
      case OpKind::kAtan2: r = math_call("atan2f", a, c); break;
      default: break;
    }
    if (r) return round_float_to(dtype, r);
  }
  fail(fmt::format("{} of {} is not supported", ir::op_name(kind), ir::dtype_name(dtype)));
  return llvm::UndefValue::get(a->getType());
}

llvm::Value* Emitter::compare(ComparisonDirection direction, DType dtype, llvm::Value* a,
                              llvm::Value* c) {
  llvm::IRBuilder<>& b = builder_;
  using P = llvm::CmpInst::Predicate;
  if (ir::is_floating(dtype)) {
    static constexpr P kFloat[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT,
                                   P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
    return b.CreateFCmp(kFloat[static_cast<int>(direction)], a, c);
  }
  static constexpr P kSigned[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_SLT,
                                  P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
  static constexpr P kUnsigned[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_ULT,
                                    P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
  const P* table = dtype == DType::kS32 ? kSigned : kUnsigned;
  return b.CreateICmp(table[static_cast<int>(direction)], a, c);
}

}  // namespace precast::backend::cpu
