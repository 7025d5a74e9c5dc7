#include "models/lora.h"

#include <cmath>
#include <unordered_set>

#include "common/error.h"

namespace dtrain::models {
namespace {

// float32, or the weight's dtype when it is wider (gradient checks in float64).
torch::ScalarType loraAdapterType(const torch::Tensor& weight) {
  return weight.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

}  // namespace

bool LoraAdapters::adapts(const torch::Tensor& weight) const {
  return !by_weight_.empty() && by_weight_.count(weight.unsafeGetTensorImpl()) > 0;
}

torch::Tensor LoraAdapters::delta(const torch::Tensor& x, const torch::Tensor& weight) const {
  const auto it = by_weight_.find(weight.unsafeGetTensorImpl());
  if (it == by_weight_.end()) return {};
  const int64_t out = weight.size(0);
  torch::Tensor sum;
  for (size_t index : it->second) {
    const LoraAdapter& adapter = adapters_[index];
    // The scale on the r-wide product: the cheaper of the two places.
    torch::Tensor d = torch::linear(torch::linear(x, adapter.a) * config_.scale(), adapter.b);
    const int64_t rows = adapter.b.size(0);
    if (rows != out) d = torch::constant_pad_nd(d, {adapter.row_begin, out - adapter.row_begin - rows});
    sum = sum.defined() ? sum + d : d;
  }
  return sum;
}

void LoraAdapters::add(const LoraSite& site, const LoraConfig& config) {
  if (!config.enabled()) throw ConfigError("LoRA: an adapter of rank " + std::to_string(config.rank));
  if (site.owner == nullptr || !site.weight.defined() || site.weight.dim() != 2 || site.row_begin < 0 ||
      site.rows <= 0 || site.row_begin + site.rows > site.weight.size(0)) {
    throw ConfigError("LoRA: no weight, or rows outside it, at an adapter's site");
  }
  config_ = config;
  const auto options = torch::TensorOptions().dtype(loraAdapterType(site.weight)).device(site.weight.device());
  torch::Tensor a = torch::empty({config.rank, site.weight.size(1)}, options);
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
  }
  torch::Tensor b = torch::zeros({site.rows, config.rank}, options);
  LoraAdapter adapter{site.weight, site.row_begin, site.owner->register_parameter("lora_A" + site.suffix, a),
                      site.owner->register_parameter("lora_B" + site.suffix, b)};
  by_weight_[site.weight.unsafeGetTensorImpl()].push_back(adapters_.size());
  adapters_.push_back(std::move(adapter));
}

std::vector<std::pair<std::string, torch::Tensor>> mergedParameters(torch::nn::Module& model,
                                                                    const LoraAdapters& adapters) {
  torch::NoGradGuard no_grad;
  std::unordered_set<const void*> adapter_parameters;
  for (const LoraAdapter& a : adapters.all()) {
    adapter_parameters.insert(a.a.unsafeGetTensorImpl());
    adapter_parameters.insert(a.b.unsafeGetTensorImpl());
  }
  std::vector<std::pair<std::string, torch::Tensor>> merged;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (adapter_parameters.count(p.unsafeGetTensorImpl())) continue;
    if (!adapters.adapts(p)) {
      merged.emplace_back(item.key(), p.detach());
      continue;
    }
    const torch::ScalarType wide = loraAdapterType(p);
    torch::Tensor w = p.detach().to(wide, /*non_blocking=*/false, /*copy=*/true);
    for (const LoraAdapter& a : adapters.all()) {
      if (a.weight.unsafeGetTensorImpl() != p.unsafeGetTensorImpl()) continue;
      const torch::Tensor product = torch::mm(a.b.to(wide), a.a.to(wide)) * adapters.config().scale();
      w.narrow(0, a.row_begin, a.b.size(0)).add_(product);
    }
    merged.emplace_back(item.key(), w);
  }
  return merged;
}

}  // namespace dtrain::models
