#include "data/parallel_encoder.h"

#include <algorithm>
#include <stdexcept>

namespace dtrain::data {

ParallelEncoder::ParallelEncoder(const Tokenizer& tokenizer, int threads)
    : tokenizer_(tokenizer), capacity_(4 * static_cast<size_t>(std::max(threads, 1))) {
  for (int i = 0; i < std::max(threads, 1); ++i) workers_.emplace_back([this] { work(); });
}

ParallelEncoder::~ParallelEncoder() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

size_t ParallelEncoder::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return order_.size();
}

void ParallelEncoder::submit(DocumentBatch batch) {
  auto slot = std::make_shared<Slot>();
  slot->batch = std::move(batch);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    order_.push_back(slot);
    queue_.push_back(slot);
  }
  work_ready_.notify_one();
}

EncodedBatch ParallelEncoder::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (order_.empty()) throw std::logic_error("ParallelEncoder::next() with no pending batch");
  slot_done_.wait(lock, [&] { return order_.front()->done; });
  std::shared_ptr<Slot> slot = std::move(order_.front());
  order_.pop_front();
  lock.unlock();
  if (slot->error) std::rethrow_exception(slot->error);
  return std::move(slot->result);
}

void ParallelEncoder::work() {
  for (;;) {
    std::shared_ptr<Slot> slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      slot = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      encode(*slot);
    } catch (...) {
      slot->error = std::current_exception();
    }
    slot->batch = {};  // frees the text early when this was its last batch
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot->done = true;
    }
    slot_done_.notify_all();
  }
}

void ParallelEncoder::encode(Slot& slot) const {
  EncodedBatch& out = slot.result;
  out.validation = slot.batch.validation;
  out.bytes = slot.batch.bytes;
  out.documents = static_cast<int64_t>(slot.batch.documents.size());
  const DocumentFrame frame = documentFrame(tokenizer_);
  for (std::string_view document : slot.batch.documents) {
    out.tokens.push_back(frame.before);
    tokenizer_.encodeInto(document, out.tokens);
    if (frame.after) out.tokens.push_back(*frame.after);
  }
}

}  // namespace dtrain::data
