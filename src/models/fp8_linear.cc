#include "models/fp8_linear.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "libtorch/compat.h"
#include "models/fused_kernels_setting.h"
#include "models/fused_ops_cuda.h"
#include "models/gradient_slot.h"
#include "models/transformer_ops.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace dtrain::models {
namespace {

thread_local int scope_depth = 0;

// noteAbsoluteMaximum's notes, by data pointer.
struct AmaxNote {
  int64_t numel = 0;
  at::ScalarType dtype = at::ScalarType::Undefined;
  int64_t version = 0;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  torch::Tensor amax_bits;
};

struct AmaxNotes {
  std::mutex mutex;
  std::unordered_map<const void*, AmaxNote> by_data;
};

AmaxNotes& amaxNotes() {
  static AmaxNotes* n = new AmaxNotes;  // never destroyed: tensors may outlive static destruction order
  return *n;
}

std::atomic<bool> noted_amax_enabled{true};
std::atomic<int64_t> noted_amax_casts{0};
std::atomic<int64_t> measured_amax_casts{0};

// Notes whose storage is gone, dropped when the table grows (activations
// come and go every step; their addresses mostly repeat).
constexpr size_t kAmaxNotesBeforeSweep = 4096;

void sweepDeadAmaxNotes(std::unordered_map<const void*, AmaxNote>& by_data) {
  for (auto it = by_data.begin(); it != by_data.end();) {
    it = it->second.storage.expired() ? by_data.erase(it) : std::next(it);
  }
}

// A tensor cast to float8 with its scale: value = data / scale = data * inverse.
struct Cast {
  torch::Tensor data;
  torch::Tensor scale;    // float32 scalar
  torch::Tensor inverse;  // 1 / scale
};

// The fused kernel's two passes where it takes t (fused_ops_cuda.h), else
// libtorch's operations; the same bits either way.
Cast castFp8(const torch::Tensor& t, at::ScalarType type, double max) {
  ++measured_amax_casts;
  if (auto fused = fused::fp8Cast(t, type == compat::float8E5m2())) {
    return {std::move(fused->data), std::move(fused->scale), std::move(fused->inverse)};
  }
  const torch::Tensor wide = t.to(torch::kFloat);
  const torch::Tensor scale = fp8Scale(wide.abs().max(), max);
  return {(wide * scale).clamp(-max, max).to(type), scale, scale.reciprocal()};
}

// castFp8 with data's transpose too (Cast::transposed, contiguous): the
// fused kernel writes both in one pass; else libtorch's copy. Tensorwise,
// transposed_inverse is inverse (one scalar); rowwise, inverse holds the
// rows' [rows] and transposed_inverse the columns' [cols].
struct CastPair : Cast {
  torch::Tensor transposed;
  torch::Tensor transposed_inverse;
};

std::atomic<Fp8Recipe> fp8_recipe_now{Fp8Recipe::kTensorwise};

bool fp8RowwiseNow() { return fp8_recipe_now.load(std::memory_order_relaxed) == Fp8Recipe::kRowwise; }

// s rounded down to a power of two (exponent kept, mantissa cleared); a
// NaN or infinite s as it is: fp8_cast_axiswise's rounding.
torch::Tensor powerOfTwoBelow(const torch::Tensor& s) {
  const torch::Tensor masked =
      s.view(torch::kInt).bitwise_and(static_cast<int64_t>(static_cast<int32_t>(0xff800000u))).view(torch::kFloat);
  return torch::where(torch::isfinite(s), masked, s);
}

// The rowwise recipe's casts of a 2-D t: scaled per row (data) and per
// column (transposed, [cols, rows]), e4m3; the fused kernel's two passes
// where it takes t, else libtorch's operations (the same bits).
CastPair castFp8Axiswise(const torch::Tensor& t) {
  if (auto fused = fused::fp8CastAxiswise(t)) {
    CastPair c;
    c.data = std::move(fused->data);
    c.inverse = std::move(fused->inverse);
    c.transposed = std::move(fused->transposed);
    c.transposed_inverse = std::move(fused->transposed_inverse);
    return c;
  }
  const torch::Tensor wide = t.to(torch::kFloat);
  const torch::Tensor abs = wide.abs();
  const torch::Tensor row_scale = powerOfTwoBelow(fp8Scale(abs.amax({1}, /*keepdim=*/true), kFp8E4m3Max));
  const torch::Tensor col_scale = powerOfTwoBelow(fp8Scale(abs.amax({0}, /*keepdim=*/true), kFp8E4m3Max));
  const auto e4m3 = compat::float8E4m3();
  CastPair c;
  c.data = (wide * row_scale).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(e4m3);
  c.transposed = (wide * col_scale).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(e4m3).t().contiguous();
  c.inverse = row_scale.reciprocal().reshape({-1});
  c.transposed_inverse = col_scale.reciprocal().reshape({-1});
  return c;
}

// An operand's scale factors as a product takes them: a scalar stays one;
// per-row factors of the first operand as [M, 1], per-column factors of
// the second as [1, N].
torch::Tensor asRows(const torch::Tensor& inverse) { return inverse.dim() == 0 ? inverse : inverse.view({-1, 1}); }
torch::Tensor asColumns(const torch::Tensor& inverse) {
  return inverse.dim() == 0 ? inverse : inverse.view({1, -1});
}

CastPair castFp8Pair(const torch::Tensor& t, at::ScalarType type, double max) {
  if (fp8RowwiseNow()) return castFp8Axiswise(t);
  if (const torch::Tensor amax_bits = notedAbsoluteMaximum(t); amax_bits.defined()) {
    if (auto fused = fused::fp8CastTransposed(t, type == compat::float8E5m2(), amax_bits)) {
      ++noted_amax_casts;
      torch::Tensor inverse = fused->inverse;
      return {{std::move(fused->data), std::move(fused->scale), std::move(fused->inverse)}, std::move(fused->transposed),
              std::move(inverse)};
    }
  }
  if (auto fused = fused::fp8CastTransposed(t, type == compat::float8E5m2())) {
    ++measured_amax_casts;
    torch::Tensor inverse = fused->inverse;
    return {{std::move(fused->data), std::move(fused->scale), std::move(fused->inverse)}, std::move(fused->transposed),
            std::move(inverse)};
  }
  Cast c = castFp8(t, type, max);
  torch::Tensor transposed = c.data.t().contiguous();
  torch::Tensor inverse = c.inverse;
  return {std::move(c), std::move(transposed), std::move(inverse)};
}

// The last product input's cast, reused while the same unchanged tensor
// comes in again: q, k and v (and gate and up) read one normed activation,
// cast once. The tensor is held, so its memory cannot be reused for another
// while the entry lives; the entry ends with the outermost Fp8Scope.
struct SharedInput {
  torch::Tensor x;
  int64_t version = 0;
  bool rowwise = false;
  CastPair cast;
};
thread_local std::optional<SharedInput> shared_input;

bool sameInput(const SharedInput& s, const torch::Tensor& x) {
  return s.rowwise == fp8RowwiseNow() && s.x.data_ptr() == x.data_ptr() && s.x.sizes() == x.sizes() &&
         s.x.strides() == x.strides() &&
         s.x.scalar_type() == x.scalar_type() && s.x.device() == x.device() && s.version == x._version();
}

const CastPair& inputCast(const torch::Tensor& flat) {
  if (!shared_input || !sameInput(*shared_input, flat)) {
    shared_input =
        SharedInput{flat, flat._version(), fp8RowwiseNow(), castFp8Pair(flat, compat::float8E4m3(), kFp8E4m3Max)};
  }
  return shared_input->cast;
}

// a row-major [M, K] x b [K, N] column-major: the product, dequantized.
// Fast accumulation in forward only (torchao's float8 default).
torch::Tensor product(const torch::Tensor& a_data, const torch::Tensor& a_inverse, const torch::Tensor& b_data,
                      const torch::Tensor& b_inverse, at::ScalarType out, bool fast_accum = false) {
  return compat::scaledMm(a_data, b_data, a_inverse, b_inverse, {}, out, fast_accum);
}

// Hopper's FP8 products take the first operand row-major and the second
// column-major, so every operand is needed in both layouts across forward
// and backward (W: forward's Wᵀ, backward's W; x and g: backward's both);
// the casts write both at once and backward keeps only the transposes.
torch::Tensor fp8Forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                         const torch::Tensor& bias) {
  const torch::Tensor flat = x.reshape({-1, x.size(-1)});
  // --breakdown's split: the casts, then the product (transformer_ops.h).
  std::optional<ops::ObservedOp> casts(std::in_place, ops::OpKind::kFp8Cast, x);
  const CastPair& x8 = inputCast(flat);
  const CastPair w8 = castFp8Pair(weight, compat::float8E4m3(), kFp8E4m3Max);
  casts.reset();
  const ops::ObservedOp products(ops::OpKind::kFp8Product, x);
  // bf16 out, as a product under autocast; the bias added after (cuBLASLt
  // takes a bias only of a 16-bit dtype).
  const at::ScalarType out = torch::kBFloat16;
  // Wᵀ of a row-major W [N, K] is the column-major [K, N] cuBLASLt wants.
  torch::Tensor y =
      product(x8.data, asRows(x8.inverse), w8.data.t(), asColumns(w8.inverse), out, /*fast_accum=*/true);
  if (bias.defined()) y = y + bias.to(out);
  ctx->save_for_backward({x8.transposed, x8.transposed_inverse, w8.transposed, w8.transposed_inverse});
  ctx->saved_data["rowwise"] = fp8RowwiseNow();
  ctx->saved_data["has_bias"] = bias.defined();
  // The parameter itself (a leaf: no cycle through this node), for its
  // gradient's slot (gradient_slot.h).
  ctx->saved_data["weight"] = weight;
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
  ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
  ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : x.scalar_type());
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

// dx, dw and (with a bias) db.
torch::autograd::variable_list fp8Backward(torch::autograd::AutogradContext* ctx,
                                           const torch::autograd::variable_list& grads) {
  const auto saved = ctx->get_saved_variables();
  // xᵀ [K, M] and Wᵀ [K, N], row-major.
  const torch::Tensor& xt = saved[0];
  const torch::Tensor& wt = saved[2];
  const torch::Tensor g = grads[0].reshape({-1, grads[0].size(-1)});
  // Rowwise: e4m3 gradients too, and products in bf16 only.
  const bool by_rows = ctx->saved_data["rowwise"].toBool();
  const CastPair g8 = by_rows ? castFp8Axiswise(g) : castFp8Pair(g, compat::float8E5m2(), kFp8E5m2Max);
  // g [M, N] x W [N, K] and gᵀ [N, M] x x [M, K]; (Xᵀ row-major).t() is X column-major.
  const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
  const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
  const torch::Tensor dx =
      product(g8.data, asRows(g8.inverse), wt.t(), asColumns(saved[3]), by_rows ? torch::kBFloat16 : x_dtype)
          .to(x_dtype);
  // dW = gᵀ x, written straight over a stale gradient where its owner
  // lets it (then no gradient goes back for W: nothing to add), else
  // returned for autograd to accumulate.
  torch::Tensor dw;
  if (ctx->needs_input_grad(1) && by_rows) {
    dw = product(g8.transposed, asRows(g8.transposed_inverse), xt.t(), asColumns(saved[1]), torch::kBFloat16)
             .to(weight_dtype);
  } else if (ctx->needs_input_grad(1)) {
    torch::Tensor into = takeStaleGradient(ctx->saved_data["weight"].toTensor());
    if (into.defined()) {
      compat::scaledMmOut(into, g8.transposed, xt.t(), g8.inverse, saved[1], /*fast_accum=*/false);
    } else {
      dw = product(g8.transposed, g8.inverse, xt.t(), saved[1], weight_dtype);
    }
  }
  std::vector<int64_t> sizes = grads[0].sizes().vec();
  sizes.back() = wt.size(0);
  if (!ctx->saved_data["has_bias"].toBool()) return {dx.view(sizes), dw};
  const torch::Tensor db = g.sum(std::vector<int64_t>{0}, /*keepdim=*/false, torch::kFloat)
                               .to(static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
  return {dx.view(sizes), dw, db};
}

// Two functions, since an autograd function's inputs must all be defined
// tensors (an undefined bias failed in libtorch 2.11: "tensor does not have
// a device").
class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    return fp8Forward(ctx, x, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return fp8Backward(ctx, grads);
  }
};

class Fp8LinearNoBiasFunction : public torch::autograd::Function<Fp8LinearNoBiasFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight) {
    return fp8Forward(ctx, x, weight, {});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return fp8Backward(ctx, grads);
  }
};

}  // namespace

Fp8Scope::Fp8Scope() { ++scope_depth; }
Fp8Scope::~Fp8Scope() {
  if (--scope_depth == 0) shared_input.reset();
}
bool Fp8Scope::active() { return scope_depth > 0; }

// Dense tensors (any order of their dimensions) of the same data pointer
// and element count cover the same memory, so the same elements.
static bool notableForAmax(const torch::Tensor& t) {
  return t.defined() && t.has_storage() && t.numel() > 0 && t.is_non_overlapping_and_dense();
}

void noteAbsoluteMaximum(const torch::Tensor& t, const torch::Tensor& amax_bits) {
  if (!notableForAmax(t)) return;
  if (!amax_bits.defined() || amax_bits.scalar_type() != torch::kInt || amax_bits.numel() != 1 ||
      amax_bits.device() != t.device()) {
    throw ConfigError("noteAbsoluteMaximum: amax_bits must be one int32 on " + t.device().str());
  }
  AmaxNote note;
  note.numel = t.numel();
  note.dtype = t.scalar_type();
  note.version = t._version();
  note.storage = t.storage().getWeakStorageImpl();
  note.amax_bits = amax_bits;
  AmaxNotes& n = amaxNotes();
  const std::lock_guard<std::mutex> lock(n.mutex);
  if (n.by_data.size() >= kAmaxNotesBeforeSweep) sweepDeadAmaxNotes(n.by_data);
  n.by_data[t.data_ptr()] = std::move(note);
}

torch::Tensor notedAbsoluteMaximum(const torch::Tensor& t) {
  if (!notedAbsoluteMaximaEnabled() || !notableForAmax(t)) return {};
  AmaxNotes& n = amaxNotes();
  const std::lock_guard<std::mutex> lock(n.mutex);
  const auto it = n.by_data.find(t.data_ptr());
  if (it == n.by_data.end()) return {};
  const AmaxNote& note = it->second;
  const c10::intrusive_ptr<c10::StorageImpl> storage = note.storage.lock();
  if (!storage || storage.get() != t.storage().unsafeGetStorageImpl() || note.numel != t.numel() ||
      note.dtype != t.scalar_type() || note.version != t._version()) {
    return {};
  }
  return note.amax_bits;
}

void forgetAbsoluteMaxima() {
  AmaxNotes& n = amaxNotes();
  const std::lock_guard<std::mutex> lock(n.mutex);
  n.by_data.clear();
}

void setFp8Recipe(Fp8Recipe r) { fp8_recipe_now.store(r); }

Fp8Recipe fp8Recipe() { return fp8_recipe_now.load(); }

std::string fp8RecipeUnsupported(Fp8Recipe r, torch::Device device) {
  std::string why = fp8Unsupported(device);
  if (!why.empty() || r != Fp8Recipe::kRowwise) return why;
#if DTRAIN_TORCH_CUDA
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
  if (p->major < 9) {
    return "--fp8-recipe rowwise needs compute capability 9.0 or newer (Hopper, Blackwell: cuBLASLt's row-scaled "
           "FP8 products); " + std::string(p->name) + " has " + std::to_string(p->major) + "." +
           std::to_string(p->minor) + " (use --fp8-recipe tensorwise)";
  }
#endif
  return "";
}

void setNotedAbsoluteMaximaEnabled(bool enabled) { noted_amax_enabled.store(enabled); }

bool notedAbsoluteMaximaEnabled() {
  return noted_amax_enabled.load(std::memory_order_relaxed) && fp8NotedMaximaSetting();
}

AbsoluteMaximumCounts absoluteMaximumCounts() { return {noted_amax_casts.load(), measured_amax_casts.load()}; }

torch::Tensor fp8Scale(const torch::Tensor& amax, double max) {
  return max / amax.to(torch::kFloat).clamp_min(1e-12);
}

bool fp8Takes(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!Fp8Scope::active() || !compat::kHasScaledMm || !x.is_cuda() || weight.dim() != 2 || x.dim() < 2) return false;
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  return rows % 16 == 0 && weight.size(0) % 16 == 0 && weight.size(1) % 16 == 0 && x.size(-1) == weight.size(1);
}

torch::Tensor fp8Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!compat::kHasScaledMm) throw ConfigError("fp8: " + fp8Unsupported(x.device()));
  return bias.defined() ? Fp8LinearFunction::apply(x, weight, bias) : Fp8LinearNoBiasFunction::apply(x, weight);
}

std::string fp8Unsupported(torch::Device device) {
  if (!compat::kHasScaledMm) {
    return "FP8 products need libtorch 2.5 or newer; this dtrain is built against libtorch " +
           std::string(TORCH_VERSION);
  }
  if (!device.is_cuda()) {
    return "FP8 products need an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell); this run "
           "is on the " + device.str();
  }
#if DTRAIN_TORCH_CUDA
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
  if (p->major * 10 + p->minor < 89) {
    return "FP8 products need compute capability 8.9 or newer (Ada, Hopper, Blackwell); " + std::string(p->name) +
           " has " + std::to_string(p->major) + "." + std::to_string(p->minor);
  }
  return "";
#else
  return "this dtrain was built without CUDA support";
#endif
}

}  // namespace dtrain::models
