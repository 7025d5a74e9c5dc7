// `dtrain train`: data-parallel training of a built-in model on a built-in
// data set. Run it under `dtrain launch` (or torchrun) for several ranks:
//   dtrain launch --nproc-per-node 2 --standalone dtrain train --epochs 3
#include <memory>

#include "cli/commands.h"
#include "cli/training_runtime.h"
#include "train/train_settings.h"
#include "train/trainer.h"

namespace dtrain::cli {

void registerTrain(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Data-parallel training of a built-in model (mlp, cnn, resnet18/34/50) on Fashion-MNIST, MNIST, "
               "CIFAR-10 or synthetic data; run it under `dtrain launch` for several ranks");
  auto c = std::make_shared<TrainConfig>();
  cmd->add_option("--model", c->model, "mlp | cnn | resnet18 | resnet34 | resnet50")->capture_default_str();
  cmd->add_option("--dataset", c->dataset, "fashion-mnist | mnist | cifar10 | synthetic")->capture_default_str();
  cmd->add_option("--data-dir", c->data_dir,
                  "Directory of the data set's files (fashion-mnist default: /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--epochs", c->epochs, "Passes over the training set")->capture_default_str();
  cmd->add_option("--batch-size", c->batch_size, "Samples per rank per step")->capture_default_str();
  cmd->add_option("--lr", c->lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--momentum", c->momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", c->nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--weight-decay", c->weight_decay, "Weight decay (decoupled for AdamW)")->capture_default_str();
  cmd->add_option("--optimizer", c->optimizer, "sgd | adamw")->capture_default_str();
  cmd->add_option("--schedule", c->schedule, "Learning-rate schedule: constant | cosine | step")
      ->capture_default_str();
  cmd->add_option("--warmup", c->warmup_epochs, "Linear warmup, in epochs (fractions allowed)")->capture_default_str();
  cmd->add_option("--step-epochs", c->step_epochs, "Step schedule: multiply the LR by --gamma every N epochs "
                                                  "(default: epochs/3)");
  cmd->add_option("--gamma", c->gamma, "Step schedule decay factor")->capture_default_str();
  cmd->add_option("--clip-grad-norm", c->clip_grad_norm, "Clip gradients to this global L2 norm (0: off)")
      ->capture_default_str();
  cmd->add_option("--precision", c->precision, "fp32 | bf16 (autocast) | fp16 (autocast + loss scaling)")
      ->capture_default_str();
  cmd->add_flag("--channels-last", c->channels_last, "Images and conv weights in channels-last memory format");
  cmd->add_option("--bucket-mb", c->bucket_mb, "Gradient bucket size in MiB (the first bucket is 1 MiB)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", c->checkpoint_dir, "Where rank 0 writes checkpoints (none if empty)");
  cmd->add_option("--checkpoint-every", c->checkpoint_every,
                  "Checkpoint every N steps (0: at the end of each epoch)")
      ->capture_default_str();
  cmd->add_option("--keep", c->keep_checkpoints, "Checkpoints kept (the newest)")->capture_default_str();
  cmd->add_option("--resume", c->resume,
                  "auto (newest valid checkpoint in --checkpoint-dir, if any) | a checkpoint file | none");
  cmd->add_option("--eval-every", c->eval_every, "Evaluate on the test set every N epochs (0: at the end only)")
      ->capture_default_str();
  cmd->add_option("--seed", c->seed, "Seed of model init, shuffling and augmentation")->capture_default_str();
  cmd->add_option("--log-every", c->log_every, "Progress every N steps")->capture_default_str();
  cmd->add_option("--metrics-jsonl", c->metrics_jsonl, "Append step/eval/summary records as JSON lines here");
  cmd->add_option("--progress", c->progress, "auto | bar | lines | none")->capture_default_str();
  cmd->add_option("--loader-workers", c->loader_workers, "Background threads assembling batches")
      ->capture_default_str();
  cmd->add_option("--max-steps", c->max_steps, "Stop after this many steps (0: run all epochs)")
      ->capture_default_str();
  cmd->add_option("--synthetic-samples", c->synthetic_samples, "Size of the synthetic training set")
      ->capture_default_str();
  cmd->add_option("--synthetic-image-size", c->synthetic_image_size, "Height = width of synthetic images")
      ->capture_default_str();
  c->backend = backendSetting();  // DTRAIN_BACKEND, else auto
  cmd->add_option("--backend", c->backend, "auto | nccl | gloo (default: $DTRAIN_BACKEND, else auto)")
      ->capture_default_str();
  cmd->add_option("--timeout", c->timeout_s, "Seconds a collective may take before the job fails")
      ->capture_default_str();
  cmd->add_flag("--print-bucket-timeline", c->print_bucket_timeline,
                "At the end, print when each gradient bucket's all-reduce ran against the end of backward");
  cmd->add_option("--timeline", c->timeline,
                  "Write a Chrome trace (chrome://tracing, Perfetto) of --timeline-steps steps here: forward, "
                  "backward, each bucket's all-reduce, optimizer and data wait, one row per rank");
  cmd->add_option("--timeline-steps", c->timeline_steps, "Steps the --timeline trace covers, after warm-up")
      ->capture_default_str();
  cmd->add_option("--metrics-port", c->metrics_port,
                  "Serve Prometheus metrics at http://HOST:(PORT + LOCAL_RANK)/metrics while training (0: off)")
      ->capture_default_str();
  cmd->add_flag("--cuda-graphs", c->cuda_graphs,
                "Capture forward, backward, all-reduce and optimizer step into one CUDA graph after warm-up and "
                "replay it (fp32/bf16, NCCL; otherwise says why and runs eagerly)");
  cmd->add_option("--graph-warmup", c->graph_warmup, "Eager steps of each batch size before its capture")
      ->capture_default_str();
  cmd->add_flag("--data-on-gpu", c->data_on_gpu,
                "Keep the whole data set on the device; shuffle and augment there once per epoch");
  cmd->add_flag("!--no-cudnn-benchmark", c->cudnn_benchmark,
                "Do not let cuDNN time its algorithms per input shape (on by default)");
  cmd->add_flag("--deterministic", c->deterministic,
                "Deterministic cuDNN algorithms, no benchmarking (torch.backends.cudnn.deterministic)");
  cmd->callback([c, &exit_code] { exit_code.value = trainingRuntime<int (*)(const TrainConfig*)>("dtrain_run_training")(c.get()); });
}

}  // namespace dtrain::cli
