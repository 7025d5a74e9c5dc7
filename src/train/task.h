// Task: what a training job learns and how it is judged, apart from how it
// learns (TrainingJob). A task owns its data: it makes the model for its
// inputs, hands each rank its batches, and evaluates the model on held-out
// data. Image classification is one task; a new kind of model or data is a
// new Task, and the training loop does not change. (private to train/)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "dtrain/amp.h"
#include "dtrain/init.h"
#include "models/model.h"
#include "train/train_options.h"

namespace dtrain {

// One batch on the training device: what the model reads and what its
// loss compares against.
struct TrainBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
  // Rows of packed samples (the chat task): each token's position within
  // its sample (models::Model::packedLoss); undefined otherwise.
  torch::Tensor positions;
  int64_t index = 0;    // batch number within the epoch, 0-based
  int64_t samples = 0;  // samples in this batch on this rank
};

// This rank's batches, one epoch at a time. Batches depend only on the
// epoch and their index, so an epoch can be resumed at any batch.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t batchesPerEpoch() const = 0;
  // Starts epoch `epoch` at batch `first_batch` (0 <= first_batch <= batchesPerEpoch()).
  virtual void startEpoch(int64_t epoch, int64_t first_batch) = 0;
  // The epoch's next batch; nullopt at its end.
  virtual std::optional<TrainBatch> next() = 0;
  // How batches are made, for the start-up line ("" or ", data on the device").
  virtual std::string describe() const { return ""; }
};

// The result of one evaluation over every rank's share of the held-out data.
struct Evaluation {
  double loss = 0;       // mean per sample (language models: per token)
  int64_t samples = 0;   // over all ranks (language models: tokens)
  int64_t correct = -1;  // classification: samples classified right (-1: not a classifier)
  double accuracy() const { return samples > 0 && correct >= 0 ? double(correct) / double(samples) : 0; }
  bool classifier() const { return correct >= 0; }
};

// Which share of the data a rank trains and evaluates on: the
// data-parallel rank and size, and how many ranks share each share (tensor
// parallelism's ranks feed the same batches).
struct DataRanks {
  int rank = 0;
  int size = 1;
  int copies = 1;
};

class Task {
 public:
  virtual ~Task() = default;
  // "cnn on fashion-mnist (60000 train / 10000 test)".
  virtual std::string describe() const = 0;
  virtual std::shared_ptr<models::Model> makeModel() const = 0;
  // This rank's training batches on `device`.
  virtual std::unique_ptr<BatchSource> trainBatches(int rank, int world_size, torch::Device device) const = 0;
  // Evaluates `model` on this rank's share of the held-out data and sums
  // over every rank (a collective: every rank calls it), each share once.
  virtual Evaluation evaluate(models::Model& model, Context& ctx, const DataRanks& ranks, Precision precision) = 0;
  // Tokens in one sample (a language model's sequence length); 0 for tasks
  // whose samples are not token sequences.
  virtual int64_t tokensPerSample() const { return 0; }
};

}  // namespace dtrain
