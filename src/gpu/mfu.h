// Model FLOPs utilisation (MFU): the one formula behind every MFU dtrain
// reports (`dtrain train`'s progress lines, --metrics-jsonl and
// dtrain_train_mfu; `dtrain bench train`'s results). Torch-free.
//
//   MFU = items/s x FLOPs per item / (GPUs x peak FLOP/s of one GPU)
//
// An item is what the caller counts: a sample (an image, a sequence) or a
// token. The rate is the whole group's (all GPUs together), and the FLOPs
// are the model's training FLOPs per item, forward and backward (a language
// model's 6N + 12·L·d·T per token, models/lm_counts.h; docs/architecture.md
// "Language-model FLOPs and MFU"). The peak is one GPU's dense tensor-core
// rate for the run's precision (gpu/gpu_peak.h). A caller that already has
// achieved FLOP/s passes it as the rate with 1 FLOP per item.
#pragma once

namespace dtrain::gpu {

// MFU as a fraction (0.4 is 40%), or -1 when it is unknown: a peak that is
// not positive (a GPU the peak table does not list, the CPU), no GPUs, no
// FLOPs count for the model, or a rate that is negative or not finite.
// A rate of 0 is an MFU of 0.
double modelFlopsUtilisation(double items_per_second, double flops_per_item, int gpus, double peak_flops_per_gpu);

}  // namespace dtrain::gpu
