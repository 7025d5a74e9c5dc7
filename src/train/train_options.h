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

#include "checkpoint/meta_checks.h"  // kMaxBatch, kMaxEpochs, kMaxSteps
#include "data/chat_template.h"      // ChatTemplate (an enum; no code of data/ is linked)
#include "models/fp8_recipe.h"         // Fp8Recipe (an enum)
#include "parallel/parallel_plan.h"    // ParallelOptions, ComputePrecision
#include "train/straggler_options.h"   // StragglerOptions

namespace dtrain {

class EnumOption;
class OptionSet;

// The choices of the flags, each parsed once into its enum. The ...Name
// functions give a value's word as the flag spells it (and as files and
// library calls that take words, such as data::makeTokenizer, want it).
enum class DatasetKind { kFashionMnist, kMnist, kCifar10, kSynthetic, kText, kChat };
// kUnset: not given (dtrain train: byte, or the kind --tokenizer-dir holds,
// and on token shards the shards' own; dtrain generate: the checkpoint's).
enum class TokenizerKind { kByte, kGpt2, kSentencePiece, kHf, kUnset };
enum class TieEmbeddings { kAuto, kOn, kOff };  // auto: as the named size does
enum class StemKind { kAuto, kCifar, kImageNet };  // ResNets; auto: cifar up to 64 pixels
enum class OptimizerKind { kSgd, kAdamW, kAuto };  // auto: by model kind (withModelDefaults)
enum class ScheduleKind { kConstant, kCosine, kStep };
enum class ProgressMode { kAuto, kBar, kLines, kNone };  // auto: a bar on a terminal, else lines

const char* datasetName(DatasetKind dataset);
const char* tokenizerKindName(TokenizerKind kind);  // "" for kUnset
const char* stemName(StemKind stem);
const char* optimizerName(OptimizerKind kind);
const char* scheduleName(ScheduleKind kind);

// The words of --tokenizer (dtrain train, generate, tokenize).
EnumOption& declareTokenizerChoice(OptionSet& set, TokenizerKind& field, const std::string& help);


// Where the batches come from.
struct DataOptions {
  // fashion-mnist | mnist | cifar10 | synthetic (images) | text (language models)
  DatasetKind dataset = DatasetKind::kFashionMnist;
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
  // How text becomes tokens: how the embedded corpus is tokenized, and what
  // a checkpoint names for `dtrain generate` (on token shards: the flags,
  // else the shards' own, data/shard_tokenizer.h).
  TokenizerKind tokenizer = TokenizerKind::kUnset;
  std::string tokenizer_dir;              // gpt2, hf: a directory; sentencepiece: the .model file
  std::string cache_dir;                  // where the tokenized embedded corpus is kept
  int64_t tokens_per_step = 0;            // global tokens per optimizer step (0: one micro-batch per rank)
  int64_t eval_batches = 0;               // validation batches per rank per evaluation (0: all)
  // Chat (instruction data, docs/chat-data.md): JSONL conversations in
  // --data-dir (or --val-data for the held-out ones).
  data::ChatTemplate chat_template = data::ChatTemplate::kAuto;
  double val_fraction = 0.05;             // records held out for validation (without --val-data)
  int64_t max_bad_records = 0;            // bad records a run goes on with
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
  TieEmbeddings tie_embeddings = TieEmbeddings::kAuto;
  double rope_theta = 0;
  bool activation_checkpointing = false;  // recompute each block's activations in backward
  std::string init_from;  // a Hugging Face model directory: the architecture and the starting weights
};

// Low-rank adapters over a language model's frozen weights (LoRA;
// train/lora_options.h declares and checks the flags).
struct LoraSpec {
  int64_t rank = 0;     // 0: no adapters, the whole model trains
  double alpha = 0;     // 0 (not given): the rank, a scale alpha / r of 1
  std::string targets;  // "" (not given): q,v
};

// Which network, and its memory format.
struct ModelSpec {
  std::string name = "cnn";     // mlp | cnn | resnet18 | resnet34 | resnet50 | gpt2[-size] | llama[-size]
  StemKind stem = StemKind::kAuto;  // resnets
  bool channels_last = false;
  LanguageModelSpec lm;         // gpt2 / llama only
  LoraSpec lora;                // gpt2 / llama only (dtrain train)
};

// Whether the model is a language model (gpt2 and llama families).
bool isLanguageModel(const ModelSpec& model);

// The peak learning rate a language model of `parameters` gets when --lr
// is not given: GPT-3's by size (Brown et al. 2020, table 2.1: 6e-4 at
// 125M down to 6e-5 at 175B, log-interpolated), and below 125M
// 6e-4 x (125M / N)^0.25, at most 3e-3.
double languageModelLr(int64_t parameters);

// The options with every "not given" marker filled in by model kind:
// image models SGD (lr 0.05, momentum 0.9, weight decay 5e-4, warm-up 0.2
// epochs, cosine to 0); language models the GPT recipe: AdamW, lr by size,
// betas 0.9/0.95, weight decay 0.1 on the matrices, warm-up over 5% of the
// steps (at most 2000), cosine to a tenth of the peak.
struct TrainOptions;
TrainOptions withModelDefaults(TrainOptions options);
// "adamw lr 0.0006 (betas 0.9/0.95, weight decay 0.1, warm-up 5% of the
// steps, cosine to 6e-05)": the resolved optimizer and schedule, for the start line.
std::string describeOptimizer(const TrainOptions& resolved);

// The optimizer and its hyper-parameters. kAuto and the negative numbers
// mean "not given": withModelDefaults() fills them in by model kind.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAuto;  // sgd for image models, adamw for language models
  double lr = -1;               // peak: 0.05; language models by size (languageModelLr)
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = -1;     // 5e-4; language models 0.1 (matrices only)
  double beta1 = 0.9;           // AdamW
  double beta2 = -1;            // AdamW: 0.999; language models 0.95 (the GPT recipe)
  double clip_grad_norm = 0;    // 0 = off
};

// How long, and the learning rate over time.
struct ScheduleOptions {
  int64_t epochs = 3;
  int64_t max_steps = 0;        // 0 = all epochs
  ScheduleKind kind = ScheduleKind::kCosine;
  double warmup_epochs = -1;    // not given: 0.2; language models warm up over a share of the steps instead
  int64_t warmup_steps = -1;    // >= 0: linear warm-up over this many steps instead of --warmup epochs
  double warmup_share = 0;      // > 0 (language-model default): warm up over this share of the run's steps,
  int64_t warmup_cap = 0;       //   at most this many
  double min_lr = -1;           // cosine: the floor it decays to; not given: 0, language models --lr / 10
  double step_epochs = 0;       // step schedule: decay every this many epochs (0: epochs / 3)
  double gamma = 0.1;
};

// The image models' defaults for whatever was not given: what a caller of
// the library that never resolved by model kind gets (TrainingJob's
// optimizer, the schedule).
OptimizerOptions withImageDefaults(OptimizerOptions optimizer);
ScheduleOptions withImageDefaults(ScheduleOptions schedule);

// How a step runs on the device.
struct ExecutionOptions {
  ComputePrecision precision = ComputePrecision::kFp32;
  models::Fp8Recipe fp8_recipe = models::Fp8Recipe::kTensorwise;  // --precision fp8's scaling
  bool cuda_graphs = false;        // capture the whole step after warm-up
  int64_t graph_warmup = 3;        // eager steps of a batch size before its capture
  bool cudnn_benchmark = true;
  bool deterministic = false;
};

// The process group and the gradient all-reduce: ParallelOptions
// (parallel/parallel_plan.h), parsed into a ParallelPlan.

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
  ProgressMode progress = ProgressMode::kAuto;
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
  StragglerOptions straggler;
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
    model.stem = StemKind::kImageNet;
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

// What planParallelism needs to know of the model: its name, whether it
// has ZeRO-3's sharding units and a tensor-parallel plan (the language
// models) and, for those, the shape tensor parallelism splits. ConfigError
// for a language-model flag out of range.
PlannedModel plannedModel(const ModelSpec& model);

// Bytes of optimizer state per parameter: AdamW 8 (two fp32 moments), SGD
// 4 with momentum, 0 without.
double optimizerStateBytes(const OptimizerOptions& optimizer);

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
// `cuda`: the run is on CUDA devices (only there is a CUDA graph captured).
void checkBenchTrainOptions(const BenchTrainOptions& options, bool cuda = true);

}  // namespace dtrain
