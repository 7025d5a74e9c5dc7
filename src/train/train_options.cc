#include "train/train_options.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/options.h"
#include "models/catalog.h"
#include "models/hf_config.h"
#include "models/lm_config.h"
#include "models/lm_counts.h"
#include "train/lora_options.h"
#include "train/straggler_options.h"

namespace dtrain {
namespace {

constexpr int64_t kMaxTimeoutSeconds = 7 * 24 * 3600;

// Each choice's words, in the order --help lists them; the ...Name
// functions read the same tables.
template <typename E>
using Words = std::vector<std::pair<std::string, E>>;

const Words<DatasetKind> kDatasets = {{"fashion-mnist", DatasetKind::kFashionMnist},
                                      {"mnist", DatasetKind::kMnist},
                                      {"cifar10", DatasetKind::kCifar10},
                                      {"synthetic", DatasetKind::kSynthetic},
                                      {"text", DatasetKind::kText},
                                      {"chat", DatasetKind::kChat}};
const Words<data::ChatTemplate> kChatTemplates = {{"auto", data::ChatTemplate::kAuto},
                                                  {"llama3", data::ChatTemplate::kLlama3},
                                                  {"chatml", data::ChatTemplate::kChatml}};
const Words<TokenizerKind> kTokenizers = {
    {"byte", TokenizerKind::kByte},
    {"gpt2", TokenizerKind::kGpt2},
    {"sentencepiece", TokenizerKind::kSentencePiece},
    {"hf", TokenizerKind::kHf}};
const Words<StemKind> kStems = {
    {"auto", StemKind::kAuto}, {"cifar", StemKind::kCifar}, {"imagenet", StemKind::kImageNet}};
const Words<OptimizerKind> kOptimizers = {
    {"auto", OptimizerKind::kAuto}, {"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}};
const Words<ScheduleKind> kSchedules = {
    {"constant", ScheduleKind::kConstant}, {"cosine", ScheduleKind::kCosine}, {"step", ScheduleKind::kStep}};

template <typename E>
const char* wordOf(const Words<E>& words, E value) {
  for (const auto& [word, named] : words) {
    if (named == value) return word.c_str();
  }
  return "";
}

std::vector<std::string> allModelNames() {
  std::vector<std::string> names = models::modelNames();
  for (const std::string& name : models::languageModelNames()) names.push_back(name);
  return names;
}

void declareLanguageModel(OptionSet& set, LanguageModelSpec& o) {
  const auto dimension = [&](const char* name, int64_t& field, const char* help) {
    set.integer(name, field, help).range(0, int64_t{1} << 20).defaultMeans("the model's");
  };
  dimension("--layers", o.layers, "Language models: transformer blocks");
  dimension("--dim", o.dim, "Language models: width of the residual stream");
  dimension("--heads", o.heads, "Language models: attention heads");
  dimension("--kv-heads", o.kv_heads, "Language models: key/value heads (llama: grouped-query attention)");
  dimension("--ffn-dim", o.ffn_dim, "Language models: hidden width of the MLP");
  dimension("--seq-len", o.seq_len, "Language models: tokens per training sequence");
  set.integer("--vocab-size", o.vocab_size,
              "Language models: rows of the embedding (e.g. 50304: GPT-2's 50257 padded as llm.c does); must "
              "cover the tokenizer's ids. Unset on the default corpus (Debian's fortunes): the tokenizer's, "
              "rounded up to a multiple of 64")
      .range(0, int64_t{1} << 24)
      .defaultMeans("the model's");
  set.choice("--tie-embeddings", o.tie_embeddings,
             {{"auto", TieEmbeddings::kAuto}, {"on", TieEmbeddings::kOn}, {"off", TieEmbeddings::kOff}},
             "Language models: the output head reuses the token embedding (auto: as the named size does)");
  set.number("--rope-theta", o.rope_theta, "Llama: base of the rotary embedding frequencies")
      .atLeast(0)
      .atMost(1e12)
      .defaultMeans("the model's");
  set.path("--init-from", o.init_from,
           "Language models: start from a Hugging Face model directory (config.json and model.safetensors or a "
           "sharded index; LlamaForCausalLM, GPT2LMHeadModel): its architecture and weights; --seq-len still "
           "applies (default: its positions, at most 1024)")
      .existingDirectory();
  set.toggle("--activation-checkpointing", o.activation_checkpointing,
             "Language models: keep only each transformer block's input during forward and recompute its "
             "activations in backward (about a third more compute for far less activation memory)");
}

void declareModel(OptionSet& set, ModelSpec& o, bool with_stem) {
  set.choice("--model", o.name, allModelNames(), "The network to train");
  declareLanguageModel(set, o.lm);
  if (with_stem) {
    set.choice("--stem", o.stem, kStems,
               "ResNet stem: imagenet (as torchvision) | cifar (3x3, no max-pool) | auto (cifar up to 64 pixels)");
  }
  set.toggle("--channels-last", o.channels_last, "Images and conv weights in channels-last memory format");
}

void declareExecution(OptionSet& set, ExecutionOptions& o, bool bench) {
  if (bench) {
    set.choice("--precision", o.precision,
               {{"fp32", ComputePrecision::kFp32}, {"bf16", ComputePrecision::kBf16}, {"fp8", ComputePrecision::kFp8}},
               "fp32 | bf16 (autocast) | fp8 (bf16 autocast, the transformer blocks' linear layers in FP8: "
               "tensorwise dynamic scaling, e4m3 forward, e5m2 gradients; GPUs of compute capability 8.9+)");
    set.negatedToggle("--no-cuda-graphs", o.cuda_graphs, "Run every step eagerly instead of replaying a CUDA graph");
  } else {
    set.choice("--precision", o.precision,
               {{"fp32", ComputePrecision::kFp32},
                {"bf16", ComputePrecision::kBf16},
                {"fp16", ComputePrecision::kFp16},
                {"fp8", ComputePrecision::kFp8}},
               "fp32 | bf16 (autocast) | fp16 (autocast + loss scaling) | fp8 (bf16 autocast, the transformer "
               "blocks' linear layers in FP8: tensorwise dynamic scaling, e4m3 forward, e5m2 gradients; GPUs of "
               "compute capability 8.9+)");
    set.toggle("--cuda-graphs", o.cuda_graphs,
               "Capture forward, backward, all-reduce and optimizer step into one CUDA graph after warm-up and "
               "replay it (fp32/bf16, NCCL; otherwise says why and runs eagerly)");
  }
  set.choice("--fp8-recipe", o.fp8_recipe,
             {{"tensorwise", models::Fp8Recipe::kTensorwise}, {"rowwise", models::Fp8Recipe::kRowwise}},
             "--precision fp8's scaling: tensorwise (one scale per tensor; e4m3, e5m2 gradients) | rowwise (a "
             "power-of-two scale per row of each product's operands, e4m3 throughout, as torchao's rowwise; "
             "compute capability 9.0+)");
  set.integer("--graph-warmup", o.graph_warmup, "Eager steps of each batch size before its CUDA graph is captured")
      .range(1, 1000);
  set.negatedToggle("--no-cudnn-benchmark", o.cudnn_benchmark,
                    "Do not let cuDNN time its algorithms per input shape (on by default)");
  if (!bench) {
    set.toggle("--deterministic", o.deterministic,
               "Deterministic cuDNN algorithms, no benchmarking (torch.backends.cudnn.deterministic)");
  }
}

void declarePipeline(OptionSet& set, ParallelOptions& o) {
  set.integer("--pp", o.pp,
              "Pipeline stages (the outermost mesh dimension): the transformer blocks are cut into this many "
              "contiguous stages, the embedding with the first and the head and loss with the last, balanced by "
              "compute (gpt2, llama)")
      .range(1, 4096);
  set.integer("--microbatches", o.microbatches,
              "With --pp: the micro-batches each step's batch is split into and sent down the pipeline "
              "(--batch-size must be a multiple)")
      .range(1, 1 << 16)
      .defaultMeans("--pp");
  set.choice("--pp-schedule", o.pp_schedule,
             {{"1f1b", PipelineScheduleKind::k1F1B},
              {"gpipe", PipelineScheduleKind::kGpipe},
              {"interleaved-1f1b", PipelineScheduleKind::kInterleaved1F1B},
              {"zb-h1", PipelineScheduleKind::kZeroBubbleH1}},
             "With --pp: the order of the stages' forwards and backwards: 1f1b (one forward, one backward), gpipe "
             "(all forwards, then all backwards), interleaved-1f1b (Megatron's, --virtual-stages per rank) or "
             "zb-h1 (zero bubble: weight gradients fill the bubble)");
  set.integer("--virtual-stages", o.virtual_stages,
              "With --pp-schedule interleaved-1f1b: stages per pipeline rank (rank r holds stages r, r + pp, ...)")
      .range(1, 1024);
  set.text("--pp-split", o.pp_split,
           "With --pp: the blocks of each stage, first to last (\"5,5,6\"); default: balanced by compute");
  set.toggle("--pp-print-schedule", o.pp_print_schedule,
             "Print the pipeline's stages, each rank's actions, the simulated timeline and its bubble, then exit");
}

void declareParallel(OptionSet& set, ParallelOptions& o) {
  set.choice("--backend", o.backend,
             {{"auto", CommBackend::kAuto}, {"nccl", CommBackend::kNccl}, {"gloo", CommBackend::kGloo}},
             "Collective backend: nccl on GPUs, gloo on CPUs; auto: $DTRAIN_BACKEND, else nccl when a GPU is "
             "visible");
  set.integer("--timeout", o.timeout_s, "Seconds a collective may take before the job fails")
      .range(1, kMaxTimeoutSeconds)
      .unit("seconds");
  set.number("--bucket-mb", o.bucket_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB, or this if smaller)")
      .above(0)
      .atMost(16384)
      .unit("MiB");
  set.choice("--shard", o.shard,
             {{"none", ShardStage::kNone}, {"optimizer", ShardStage::kOptimizer}, {"gradients", ShardStage::kGradients},
              {"full", ShardStage::kFull}},
             "What is sharded across ranks: none (replicated, as DDP), optimizer (ZeRO-1: each rank keeps and "
             "updates 1/N of the optimizer state, then the parameters are all-gathered), gradients (ZeRO-2: "
             "also 1/N of the gradients, reduce-scattered bucket by bucket during backward) or full (ZeRO-3, "
             "FSDP's FULL_SHARD: also 1/N of the parameters, each transformer block all-gathered just before "
             "its forward and its backward, or under --pp once a step, kept until the optimizer step; with "
             "--precision bf16 the gathered parameters are bf16)");
  set.choice("--reduce-dtype", o.reduce_dtype, {{"fp32", ReduceDtype::kFp32}, {"bf16", ReduceDtype::kBf16}},
             "The dtype gradients are reduce-scattered in with --shard gradients or full (bf16: half the bytes; "
             "each rank's gradient shard stays fp32)");
  set.integer("--tp", o.tp,
              "Tensor-parallel ranks (Megatron's layout; the innermost mesh dimension: consecutive ranks, one "
              "node's GPUs): attention heads, the MLP and the vocabulary are split over them (gpt2, llama)")
      .range(1, 4096);
  set.integer("--dp-replicate", o.dp_replicate,
              "Replicas of the data-parallel groups (HSDP: --shard applies within each of the world / (tp x "
              "dp-replicate) ranks of a group; gradients are then all-reduced across the replicas)")
      .range(1, 1 << 20);
  set.negatedToggle("--no-sequence-parallel", o.sequence_parallel,
                    "With --tp > 1: keep the norms and residuals on the whole sequence on every tp rank instead "
                    "of 1/tp of its positions (sequence parallelism is on by default)");
  set.integer("--tp-overlap", o.tp_overlap,
              "With sequence parallelism: the pieces each rank's part of the sequence is split into so that the "
              "tensor-parallel all-gathers and reduce-scatters run beside the matrix products (Megatron's "
              "tp-comm-overlap); 0 (the default) runs each before or after its product")
      .range(0, 64);
  declarePipeline(set, o);
}

void declareData(OptionSet& set, DataOptions& o) {
  set.choice("--dataset", o.dataset, kDatasets,
             "The data set (text: token shards for language models; chat: JSONL conversations for "
             "instruction tuning, docs/chat-data.md)");
  set.path("--data-dir", o.data_dir,
           "Directory of the data set's files (fashion-mnist default: /usr/share/datasets/fashion-mnist; text: "
           "token shards in llm.c's format, default: the fortunes corpus from /usr/share/games/fortunes; chat: "
           "*.jsonl files of {\"messages\": [...]} or {\"prompt\", \"completion\"} records)")
      .existingDirectory();
  set.path("--val-data", o.val_data,
           "Text: validation token shards (a directory, a shard or a glob; default: the *_val_* shards of "
           "--data-dir); chat: a JSONL file or a directory of them held out for validation (default: "
           "--val-fraction of --data-dir's records)");
  set.choice("--chat-template", o.chat_template, kChatTemplates,
             "Chat: how conversations are rendered: llama3 (Meta Llama 3 Instruct's headers and <|eot_id|>), "
             "chatml (<|im_start|>role ... <|im_end|>), or auto: the chat_template of the tokenizer directory's "
             "tokenizer_config.json when it is one of them, else the one whose special tokens the tokenizer has");
  set.number("--val-fraction", o.val_fraction,
             "Chat: the share of --data-dir's records held out for validation, chosen by a hash of each record's "
             "text (the same records whatever the seed, file order or ranks; 0: none; ignored with --val-data)")
      .range(0, 0.5);
  set.integer("--max-bad-records", o.max_bad_records,
              "Chat: records that cannot be used (invalid JSON, no messages, an unknown or missing role, no "
              "assistant message, longer than --seq-len) a run goes on without, with a warning; more stop it "
              "with exit 2, naming them by file and line")
      .range(0, int64_t{1} << 40);
  declareTokenizerChoice(set, o.tokenizer,
                         "Text: how the default corpus (Debian's fortunes) is tokenized; with --data-dir, the "
                         "shards' tokenizer, named in the checkpoints for `dtrain generate` (default: the one in "
                         "the NAME_tokenizer.json `dtrain tokenize` writes beside them)")
      .optional(TokenizerKind::kUnset, "the kind --tokenizer-dir holds, else byte; on shards, theirs");
  set.path("--tokenizer-dir", o.tokenizer_dir,
           "gpt2: the directory of encoder.json and vocab.bpe (or vocab.json and merges.txt); hf: the directory of "
           "a Hugging Face tokenizer.json; sentencepiece: the .model file. Without --tokenizer, the kind is what "
           "it holds");
  set.path("--cache-dir", o.cache_dir,
           "Where the tokenized default corpus is kept (default: $XDG_CACHE_HOME/dtrain, else ~/.cache/dtrain)")
      .creatableDirectory();
  set.integer("--tokens-per-step", o.tokens_per_step,
              "Language models: tokens of one optimizer step over all ranks; gradients accumulate over "
              "micro-batches to reach it (0: one micro-batch per rank)")
      .range(0, int64_t{1} << 40);
  set.integer("--eval-batches", o.eval_batches, "Validation batches per rank per evaluation (0: all)")
      .range(0, int64_t{1} << 40);
  set.integer("--batch-size", o.batch_size, "Samples per rank per step").range(1, kMaxBatch);
  set.integer("--loader-workers", o.loader_workers, "Background threads assembling batches").range(0, 256);
  set.toggle("--data-on-gpu", o.on_gpu,
             "Keep the whole data set on the GPU; shuffle and augment there once per epoch");
  set.toggle("--data-on-device", o.on_device,
             "(testing) --data-on-gpu's batches on whatever device the job runs, the CPU included")
      .hide();
  set.integer("--synthetic-samples", o.synthetic_samples, "Size of the synthetic training set")
      .range(1, int64_t{1} << 31);
  set.integer("--synthetic-image-size", o.synthetic_image_size, "Height = width of synthetic images")
      .range(4, 4096);
}

void declareOptimizer(OptionSet& set, OptimizerOptions& o) {
  set.choice("--optimizer", o.kind, kOptimizers,
             "The optimizer; auto: sgd for image models, adamw (the GPT recipe) for language models");
  set.number("--lr", o.lr, "Peak learning rate")
      .range(0, 100)
      .defaultMeans("0.05 for image models; language models by size, GPT-3's 6e-4 at 125M parameters down to "
                    "6e-5 at 175B (more below 125M, at most 3e-3)");
  set.number("--momentum", o.momentum, "SGD momentum").atLeast(0).below(1);
  set.toggle("--nesterov", o.nesterov, "Nesterov momentum (SGD)");
  set.number("--weight-decay", o.weight_decay,
             "Weight decay (decoupled for AdamW; language models leave norms, biases and embeddings undecayed)")
      .range(0, 10)
      .defaultMeans("5e-4 for image models, 0.1 for language models");
  set.number("--beta1", o.beta1, "AdamW: decay of the first moment").atLeast(0).below(1);
  set.number("--beta2", o.beta2, "AdamW: decay of the second moment")
      .atLeast(0)
      .below(1)
      .defaultMeans("0.999; 0.95 for language models (the GPT recipe)");
  set.number("--clip-grad-norm", o.clip_grad_norm, "Clip gradients to this global L2 norm (0: off)").atLeast(0);
}

void declareSchedule(OptionSet& set, ScheduleOptions& o) {
  set.integer("--epochs", o.epochs, "Passes over the training set").range(1, kMaxEpochs);
  set.integer("--max-steps", o.max_steps, "Stop after this many steps (0: run all epochs)").range(0, kMaxSteps);
  set.choice("--schedule", o.kind, kSchedules, "Learning-rate schedule");
  set.number("--warmup", o.warmup_epochs, "Linear warmup, in epochs (fractions allowed)")
      .range(0, static_cast<double>(kMaxEpochs))
      .unit("epochs")
      .defaultMeans("0.2 epochs for image models; language models warm up over 5% of the run's steps, at most "
                    "2000");
  set.integer("--warmup-steps", o.warmup_steps, "Linear warmup, in steps (instead of --warmup epochs)")
      .range(-1, kMaxSteps)
      .defaultMeans("--warmup epochs");
  set.number("--min-lr", o.min_lr, "Cosine schedule: the learning rate it decays to")
      .range(0, 100)
      .defaultMeans("0 for image models, a tenth of --lr for language models");
  set.number("--step-epochs", o.step_epochs, "Step schedule: multiply the LR by --gamma every N epochs")
      .above(0)
      .atMost(static_cast<double>(kMaxEpochs))
      .unit("epochs")
      .defaultMeans("epochs / 3");
  set.number("--gamma", o.gamma, "Step schedule decay factor").above(0).atMost(1);
}

void declareCheckpoint(OptionSet& set, CheckpointOptions& o) {
  set.path("--checkpoint-dir", o.dir,
           "Where checkpoints go (none if empty): every rank writes its shard of each one there, so jobs of "
           "several nodes need a file system they all see")
      .creatableDirectory();
  set.integer("--checkpoint-every", o.every, "Checkpoint every N steps (0: at the end of each epoch)")
      .range(0, kMaxSteps);
  set.integer("--keep", o.keep, "Checkpoints kept (the newest)").range(1, 1'000'000);
  set.text("--resume", o.resume,
           "auto (the newest valid checkpoint in --checkpoint-dir; none there: step 0; only invalid ones: an "
           "error) | auto-or-fresh (as auto, but only invalid ones: step 0) | a sharded checkpoint's directory "
           "(ckpt-<step>) or its metadata.dtck | a checkpoint file | none")
      .check(
          [](const std::string& text) -> std::string {
            if (text.empty() || text == "auto" || text == "auto-or-fresh" || text == "none") return "";
            struct stat st {};
            if (::stat(text.c_str(), &st) != 0) return "no such file";
            if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? "" : fileKindName(st.st_mode);
            const std::string metadata = text + "/metadata.dtck";
            return ::stat(metadata.c_str(), &st) == 0 ? "" : "a directory without metadata.dtck";
          },
          "auto, auto-or-fresh, none, an existing checkpoint file or a sharded checkpoint's directory");
  set.toggle("--allow-nonfinite-checkpoint", o.allow_nonfinite,
             "Resume even when the checkpoint's weights or optimizer state hold NaN or Inf (refused otherwise: "
             "a diverged run's checkpoint trains on as NaN)");
}

void declareObservability(OptionSet& set, ObservabilityOptions& o) {
  set.integer("--eval-every", o.eval_every, "Evaluate on the test set every N epochs (0: at the end only)")
      .range(0, kMaxEpochs);
  set.integer("--eval-steps", o.eval_steps, "Also evaluate every N steps (0: off)").range(0, kMaxSteps);
  set.integer("--log-every", o.log_every, "Progress every N steps").range(1, kMaxSteps);
  set.path("--metrics-jsonl", o.metrics_jsonl, "Append step/eval/summary records as JSON lines here")
      .creatableFile();
  set.choice("--progress", o.progress,
             {{"auto", ProgressMode::kAuto}, {"bar", ProgressMode::kBar}, {"lines", ProgressMode::kLines},
              {"none", ProgressMode::kNone}},
             "Progress display: a bar on a terminal (auto; also when dtrain launch routes rank 0's stderr to "
             "one), plain lines, or none");
  set.toggle("--print-bucket-timeline", o.print_bucket_timeline,
             "At the end, print when each gradient bucket's all-reduce ran against the end of backward");
  set.path("--timeline", o.timeline,
           "Write a Chrome trace (chrome://tracing, Perfetto) of --timeline-steps steps here: forward, backward, "
           "each bucket's all-reduce, optimizer and data wait, one row per rank")
      .creatableFile();
  set.integer("--timeline-steps", o.timeline_steps, "Steps the --timeline trace covers, after warm-up")
      .range(1, 100'000);
  set.port("--metrics-port", o.metrics_port,
           "Serve Prometheus metrics at http://HOST:(PORT + LOCAL_RANK)/metrics while training")
      .zeroAllowed("off");
}

}  // namespace

const char* datasetName(DatasetKind dataset) { return wordOf(kDatasets, dataset); }
const char* tokenizerKindName(TokenizerKind kind) { return wordOf(kTokenizers, kind); }
const char* stemName(StemKind stem) { return wordOf(kStems, stem); }
const char* optimizerName(OptimizerKind kind) { return wordOf(kOptimizers, kind); }
const char* scheduleName(ScheduleKind kind) { return wordOf(kSchedules, kind); }

EnumOption& declareTokenizerChoice(OptionSet& set, TokenizerKind& field, const std::string& help) {
  return set.choice("--tokenizer", field, kTokenizers, help);
}

void declareTrainOptions(OptionSet& set, TrainOptions& o) {
  declareModel(set, o.model, /*with_stem=*/false);
  declareLoraOptions(set, o.model.lora);
  declareData(set, o.data);
  declareSchedule(set, o.schedule);
  declareOptimizer(set, o.optimizer);
  declareExecution(set, o.execution, /*bench=*/false);
  declareParallel(set, o.parallel);
  declareCheckpoint(set, o.checkpoint);
  declareObservability(set, o.observe);
  declareStragglerOptions(set, o.straggler);
  set.integer("--seed", o.seed, "Seed of model init, shuffling and augmentation");
}

void declareBenchTrainOptions(OptionSet& set, BenchTrainOptions& o) {
  declareModel(set, o.model, /*with_stem=*/true);
  set.integer("--image-size", o.input.image_size, "Height = width of the synthetic images").range(4, 4096);
  set.integer("--batch-size", o.input.batch_size, "Samples (language models: sequences) per GPU per step")
      .range(1, kMaxBatch);
  set.number("--clip-grad-norm", o.clip_grad_norm, "Clip gradients to this global L2 norm (0: off)").atLeast(0);
  set.integer("--classes", o.input.classes, "Classes of the synthetic labels").range(2, 1'000'000);
  declareExecution(set, o.execution, /*bench=*/true);
  declareParallel(set, o.parallel);
  set.integer("--steps", o.steps, "Timed steps").range(1, 10'000'000);
  set.integer("--warmup", o.warmup, "Untimed steps first (the CUDA graph is captured among them)")
      .range(0, 10'000'000);
  set.toggle("--breakdown", o.breakdown,
             "With --no-cuda-graphs: also time forward (language models: split into norms, activations, rotary, "
             "attention, head and loss, products, and under FP8 its products and casts apart), backward, all-reduce "
             "and optimizer with CUDA events");
  set.toggle("--profile-range", o.profile_range,
             "On CUDA: cudaProfilerStart before the timed steps and cudaProfilerStop after them, so that "
             "`nsys profile --capture-range=cudaProfilerApi` or `ncu --profile-from-start off` records only them");
  set.path("--result-file", o.result_file, "(internal) where a worker group's rank 0 writes its result")
      .creatable()
      .hide();
}

bool isLanguageModel(const ModelSpec& model) {
  return models::isLanguageModelName(model.name) || !model.lm.init_from.empty();
}


models::LanguageModelOverrides languageModelOverrides(const LanguageModelSpec& o) {
  models::LanguageModelOverrides out;
  const auto set = [](std::optional<int64_t>& field, int64_t value) {
    if (value > 0) field = value;
  };
  set(out.layers, o.layers);
  set(out.dim, o.dim);
  set(out.heads, o.heads);
  set(out.kv_heads, o.kv_heads);
  set(out.ffn_dim, o.ffn_dim);
  set(out.seq_len, o.seq_len);
  set(out.vocab_size, o.vocab_size);
  if (o.tie_embeddings != TieEmbeddings::kAuto) out.tie_embeddings = o.tie_embeddings == TieEmbeddings::kOn;
  if (o.rope_theta > 0) out.rope_theta = o.rope_theta;
  return out;
}

namespace {

// --init-from DIR: its config.json's architecture, --seq-len applied.
models::LanguageModelConfig initialConfig(const ModelSpec& model) {
  const LanguageModelSpec& lm = model.lm;
  const std::string flag = "--init-from " + lm.init_from;
  if (lm.layers || lm.dim || lm.heads || lm.kv_heads || lm.ffn_dim || lm.vocab_size ||
      lm.tie_embeddings != TieEmbeddings::kAuto || lm.rope_theta > 0) {
    throw ConfigError("--layers, --dim, --heads, --kv-heads, --ffn-dim, --vocab-size, --tie-embeddings and "
                      "--rope-theta shape a new model; with " + flag + " the shape is its config.json's");
  }
  models::LanguageModelConfig c = models::readHfConfig(lm.init_from);
  const std::string family = models::lmFamilyName(c.family);
  if (model.name != "cnn" && model.name.rfind(family, 0) != 0) {
    throw ConfigError("--model " + model.name + " with " + flag + ", which holds a " + family +
                      " model; drop --model or name the " + family + " family");
  }
  c.seq_len = lm.seq_len > 0 ? lm.seq_len : std::min<int64_t>(c.max_seq_len, 1024);
  if (c.family == models::LmFamily::kLlama) c.max_seq_len = std::max(c.max_seq_len, c.seq_len);
  models::validateLanguageModel(c);
  return c;
}

}  // namespace

models::LanguageModelConfig languageModelConfig(const ModelSpec& model) {
  if (!model.lm.init_from.empty()) return initialConfig(model);
  return models::namedLanguageModel(model.name, languageModelOverrides(model.lm));
}

namespace {

// The language-model flags make no sense for an image model, and the image
// data sets none for a language model.
void checkModelAndData(const ModelSpec& model, DatasetKind dataset) {
  if (isLanguageModel(model)) {
    languageModelConfig(model);  // names the flag that is out of range
    if (dataset != DatasetKind::kText && dataset != DatasetKind::kSynthetic && dataset != DatasetKind::kChat) {
      throw ConfigError("--model " + model.name + " is a language model: it trains on --dataset text (token "
                        "shards in --data-dir, or the fortunes corpus), chat (JSONL conversations) or --dataset "
                        "synthetic, not '" +
                        datasetName(dataset) + "'");
    }
    return;
  }
  if (dataset == DatasetKind::kText || dataset == DatasetKind::kChat) {
    throw ConfigError("--dataset " + std::string(datasetName(dataset)) +
                      " is for language models (--model gpt2, llama, ...), not --model " + model.name);
  }
  const LanguageModelSpec& lm = model.lm;
  if (lm.layers || lm.dim || lm.heads || lm.kv_heads || lm.ffn_dim || lm.seq_len || lm.vocab_size ||
      lm.tie_embeddings != TieEmbeddings::kAuto || lm.rope_theta > 0) {
    throw ConfigError("--layers, --dim, --heads, --kv-heads, --ffn-dim, --seq-len, --vocab-size, --tie-embeddings "
                      "and --rope-theta shape language models; --model " + model.name + " is an image model");
  }
}

// What a pipeline cannot do with the rest of a run's options.
void checkPipelineRun(const TrainOptions& options) {
  const ParallelOptions& p = options.parallel;
  if (p.pp < 2) return;
  const int microbatches = p.microbatches > 0 ? p.microbatches : p.pp;
  if (options.data.batch_size % microbatches != 0) {
    throw ConfigError("--batch-size " + std::to_string(options.data.batch_size) + " does not split into --microbatches " +
                      std::to_string(microbatches) + " equal micro-batches; expected a multiple of " +
                      std::to_string(microbatches));
  }
  if (options.data.tokens_per_step > 0) {
    throw ConfigError("--tokens-per-step with --pp " + std::to_string(p.pp) +
                      ": a pipeline accumulates its --microbatches; set --batch-size to the step's rows instead");
  }
}

// What packed conversations cannot run with, and what they need.
void checkChatRun(const TrainOptions& options) {
  const DataOptions& d = options.data;
  if (d.dataset != DatasetKind::kChat) return;
  if (options.parallel.pp > 1 || options.parallel.tp > 1) {
    throw ConfigError(std::string("--dataset chat with ") + (options.parallel.pp > 1 ? "--pp" : "--tp") +
                      ": packed conversations (their block-diagonal attention and per-sample positions) run "
                      "with data parallelism only (--shard, --dp-replicate), not split over pipeline or "
                      "tensor-parallel ranks yet");
  }
  if (d.data_dir.empty()) {
    throw ConfigError("--dataset chat needs --data-dir: a directory of *.jsonl conversations");
  }
  if (d.tokenizer_dir.empty() && options.model.lm.init_from.empty()) {
    throw ConfigError("--dataset chat needs a tokenizer with the chat template's special tokens: --tokenizer-dir "
                      "(a Hugging Face tokenizer.json directory), or --init-from a model directory that has one");
  }
}

}  // namespace

PlannedModel plannedModel(const ModelSpec& model) {
  if (!isLanguageModel(model)) return {model.name, false};
  const models::LanguageModelConfig c = languageModelConfig(model);
  const std::string name = model.lm.init_from.empty() ? model.name : models::lmFamilyName(c.family);
  PlannedModel planned = plannedLanguageModel(name, c.heads, c.kv_heads, c.ffn_dim, c.vocab_size, c.seq_len);
  // A stage's cost: 6 N + 12 d T per token for its blocks' N (as
  // trainingFlopsPerToken), 6 N for the head's.
  models::LanguageModelConfig headless = c;
  headless.layers = 0;
  const double head_params = static_cast<double>(models::flopParameterCount(headless));
  const double block_params = (static_cast<double>(models::flopParameterCount(c)) - head_params) /
                              static_cast<double>(std::max<int64_t>(1, c.layers));
  planned.layers = c.layers;
  planned.tied_head = c.tie_embeddings;
  planned.block_flops = 6 * block_params + 12.0 * static_cast<double>(c.heads * c.headDim() * c.seq_len);
  planned.head_flops = 6 * head_params;
  return planned;
}

double optimizerStateBytes(const OptimizerOptions& optimizer) {
  if (optimizer.kind == OptimizerKind::kAdamW) return 8;  // (auto: resolved by withModelDefaults, else SGD)
  return optimizer.momentum > 0 ? 4 : 0;
}

void checkTrainOptions(const TrainOptions& options) {
  TrainOptions copy = options;
  OptionSet set("dtrain train");
  declareTrainOptions(set, copy);
  set.checkAll();
  const std::string& resume = options.checkpoint.resume;
  if ((resume == "auto" || resume == "auto-or-fresh") && options.checkpoint.dir.empty()) {
    throw ConfigError("--resume " + resume + " needs --checkpoint-dir (where to look for checkpoints)");
  }
  checkModelAndData(options.model, options.data.dataset);
  if (!isLanguageModel(options.model) && options.data.tokens_per_step > 0) {
    throw ConfigError("--tokens-per-step is for language models, not --model " + options.model.name);
  }
  checkParallelOptions(options.parallel, plannedModel(options.model));  // the combinations any world size refuses
  checkPipelineRun(options);
  checkChatRun(options);
  checkLoraRun(options);
  checkStragglerRun(options.straggler, !options.checkpoint.dir.empty());
}

void checkBenchTrainOptions(const BenchTrainOptions& options, bool cuda) {
  BenchTrainOptions copy = options;
  OptionSet set("dtrain bench train");
  declareBenchTrainOptions(set, copy);
  set.checkAll();
  checkModelAndData(options.model, DatasetKind::kSynthetic);
  checkParallelOptions(options.parallel, plannedModel(options.model));
  // A pipeline runs eagerly (its stages wait on their neighbours), so no capture needs room.
  if (cuda && options.execution.cuda_graphs && options.parallel.pp <= 1 &&
      options.warmup <= options.execution.graph_warmup) {
    throw ConfigError("--warmup " + std::to_string(options.warmup) +
                      " leaves no room to capture the CUDA graph after " +
                      std::to_string(options.execution.graph_warmup) +
                      " eager steps; expected --warmup > --graph-warmup");
  }
}

}  // namespace dtrain
