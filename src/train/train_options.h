// The options of `dtrain train` and `dtrain bench train`, one narrow struct
// per concern, and their declarations (common/options.h): names, defaults,
// help and accepted values live in train_options.cc and nowhere else.
//
// Torch-free: the dtrain binary parses these without loading libtorch and
// hands the filled struct to the training runtime it loads with dlopen.
// Code that needs three fields receives the struct of their concern, never
// the whole TrainOptions.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

class OptionSet;

// Bounds of the flags; a checkpoint's meta is held to the same ones.
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxEpochs = 1'000'000;
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

// Where the batches come from.
struct DataOptions {
  // fashion-mnist | mnist | cifar10 | synthetic (images) | text (language models)
  std::string dataset = "fashion-mnist";
  std::string data_dir;                   // default per data set (fashion-mnist: Debian's path; text: the
                                          // embedded corpus); text: token shards (a directory or glob)
  int64_t batch_size = 64;                // per rank (language models: sequences per micro-batch)
  int loader_workers = 2;
  bool on_gpu = false;                    // keep the data set on the GPU, build batches there
  bool on_device = false;                 // the same on whatever device the job runs (tests: the CPU)
  int64_t synthetic_samples = 4096;       // synthetic training set size (test: a quarter)
  int64_t synthetic_image_size = 32;
  // Language models.
  std::string val_data;                   // validation shards; default: the *_val_* shards of --data-dir
  std::string tokenizer = "byte";         // byte | gpt2 | sentencepiece: how the embedded corpus is tokenized
  std::string tokenizer_dir;              // gpt2: encoder.json + vocab.bpe; sentencepiece: the .model file
  std::string cache_dir;                  // where the tokenized embedded corpus is kept
  int64_t tokens_per_step = 0;            // global tokens per optimizer step (0: one micro-batch per rank)
  int64_t eval_batches = 0;               // validation batches per rank per evaluation (0: all)
};

// A language model's shape over its named size (0: the size's own value).
struct LanguageModelSpec {
  int64_t layers = 0;
  int64_t dim = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn_dim = 0;
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  std::string tie_embeddings = "auto";  // auto (the named size's) | on | off
  double rope_theta = 0;
  bool activation_checkpointing = false;  // recompute each block's activations in backward
};

// Which network, and its memory format.
struct ModelSpec {
  std::string name = "cnn";     // mlp | cnn | resnet18 | resnet34 | resnet50 | gpt2[-size] | llama[-size]
  std::string stem = "auto";    // resnets: auto | cifar | imagenet
  bool channels_last = false;
  LanguageModelSpec lm;         // gpt2 / llama only
};

// Whether the model is a language model (gpt2 and llama families).
bool isLanguageModel(const ModelSpec& model);

// The optimizer and its hyper-parameters.
struct OptimizerOptions {
  std::string kind = "sgd";     // sgd | adamw
  double lr = 0.05;             // peak
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  double beta1 = 0.9;           // AdamW
  double beta2 = 0.999;         // AdamW (GPT recipes: 0.95)
  double clip_grad_norm = 0;    // 0 = off
};

// How long, and the learning rate over time.
struct ScheduleOptions {
  int64_t epochs = 3;
  int64_t max_steps = 0;        // 0 = all epochs
  std::string kind = "cosine";  // constant | cosine | step
  double warmup_epochs = 0.2;
  int64_t warmup_steps = -1;    // >= 0: linear warm-up over this many steps instead of --warmup epochs
  double min_lr = 0;            // cosine: the floor it decays to
  double step_epochs = 0;       // step schedule: decay every this many epochs (0: epochs / 3)
  double gamma = 0.1;
};

// How a step runs on the device.
struct ExecutionOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  bool cuda_graphs = false;        // capture the whole step after warm-up
  int64_t graph_warmup = 3;        // eager steps of a batch size before its capture
  bool cudnn_benchmark = true;
  bool deterministic = false;
};

// The process group and the gradient all-reduce.
struct ParallelOptions {
  std::string backend = "auto";  // auto | nccl | gloo ($DTRAIN_BACKEND)
  int64_t timeout_s = 600;       // collective timeout
  double bucket_mb = 25;         // gradient bucket cap (the first bucket is 1 MiB)
  std::string shard = "none";    // none | optimizer (ZeRO-1) | gradients (ZeRO-2) | full (ZeRO-3)
  std::string reduce_dtype = "fp32";  // fp32 | bf16: what gradients are reduce-scattered in (ZeRO-2, ZeRO-3)
};

struct CheckpointOptions {
  std::string dir;         // empty = no checkpoints
  int64_t every = 0;       // steps; 0 = at the end of each epoch only
  int keep = 3;
  std::string resume;      // "" | none | auto | a file
  bool allow_nonfinite = false;  // resume from NaN/Inf weights or optimizer state
};

// What the job reports while it runs.
struct ObservabilityOptions {
  int64_t log_every = 50;            // steps
  int64_t eval_every = 1;            // epochs; 0 = at the end only
  int64_t eval_steps = 0;            // also every N steps (0: off)
  std::string progress = "auto";     // auto | bar | lines | none
  std::string metrics_jsonl;         // rank 0 appends one JSON object per line
  int metrics_port = 0;              // Prometheus on this port + LOCAL_RANK (0: off)
  std::string timeline;              // Chrome trace of some steps
  int64_t timeline_steps = 20;
  bool print_bucket_timeline = false;
};

struct TrainOptions {
  DataOptions data;
  ModelSpec model;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  ExecutionOptions execution;
  ParallelOptions parallel;
  CheckpointOptions checkpoint;
  ObservabilityOptions observe;
  uint64_t seed = 0;  // model init, shuffling, augmentation
};

// The synthetic batch `dtrain bench train` trains on, resident on the device.
struct SyntheticBatchOptions {
  int64_t image_size = 32;
  int64_t channels = 3;
  int64_t classes = 10;
  int64_t batch_size = 64;  // per rank
};

struct BenchTrainOptions {
  BenchTrainOptions() {
    model.name = "resnet50";
    model.stem = "imagenet";
    execution.cuda_graphs = true;
  }
  ModelSpec model;
  SyntheticBatchOptions input;  // language models: batch_size sequences of model.lm.seq_len tokens
  double clip_grad_norm = 0;    // language models train with clipping as recipes do
  ExecutionOptions execution;
  ParallelOptions parallel;
  int64_t steps = 100;       // timed
  int64_t warmup = 20;       // untimed, before the timed steps (graph capture happens here)
  bool breakdown = false;    // time forward / backward / all-reduce / optimizer of eager steps
  bool profile_range = false;  // cudaProfilerStart/Stop around the timed steps (CUDA)
  std::string result_file;   // rank 0 writes its JSON result here; empty: stdout
};

}  // namespace dtrain

#include "models/lm_config.h"

namespace dtrain {

// The language model's shape: the named size with the flags over it.
// ConfigError naming the flag that is out of range.
models::LanguageModelOverrides languageModelOverrides(const LanguageModelSpec& spec);
models::LanguageModelConfig languageModelConfig(const ModelSpec& model);

// The declarations. Cross-option rules (--resume auto needs
// --checkpoint-dir, ...) are checked by checkTrainOptions.
void declareTrainOptions(OptionSet& set, TrainOptions& options);
void declareBenchTrainOptions(OptionSet& set, BenchTrainOptions& options);

// Every declared check and the cross-option rules; ConfigError naming the
// option, the value and what is accepted. For structs filled in by code.
void checkTrainOptions(const TrainOptions& options);
void checkBenchTrainOptions(const BenchTrainOptions& options);

}  // namespace dtrain
