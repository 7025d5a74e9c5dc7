// Encodes batches of documents on worker threads and hands the results back
// in the order the batches were submitted, so the token stream does not
// depend on the number of threads (torch-free; library dtrain_text).
//
//   ParallelEncoder encoder(tokenizer, threads);
//   for (...) {
//     while (encoder.pending() >= encoder.capacity()) consume(encoder.next());
//     encoder.submit(std::move(batch));
//   }
//   while (encoder.pending() > 0) consume(encoder.next());
//
// Each document becomes the end-of-text id followed by its tokens (llm.c's
// fineweb.py puts the delimiter before each document), or, with a tokenizer
// that has a begin-of-text id (Llama 3), that id, its tokens and the
// end-of-text id (data/tokenizer.h, documentFrame). An exception thrown
// by the tokenizer in a worker is rethrown by next() for that batch. The
// destructor stops and joins the workers, abandoning batches not taken.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/tokenizer.h"

namespace dtrain::data {

struct DocumentBatch {
  std::shared_ptr<const std::string> text;  // keeps the documents' bytes alive
  std::vector<std::string_view> documents;  // views into *text
  bool validation = false;
  int64_t bytes = 0;  // input bytes this batch accounts for (progress)
};

struct EncodedBatch {
  std::vector<uint32_t> tokens;
  bool validation = false;
  int64_t bytes = 0;
  int64_t documents = 0;
};

class ParallelEncoder {
 public:
  // threads >= 1; at most capacity() = 4 x threads batches are pending.
  ParallelEncoder(const Tokenizer& tokenizer, int threads);
  ~ParallelEncoder();
  ParallelEncoder(const ParallelEncoder&) = delete;
  ParallelEncoder& operator=(const ParallelEncoder&) = delete;

  size_t capacity() const { return capacity_; }
  // Batches submitted and not yet taken by next().
  size_t pending() const;
  void submit(DocumentBatch batch);
  // The oldest pending batch, encoded (waits for it). pending() must be > 0.
  EncodedBatch next();

 private:
  struct Slot {
    DocumentBatch batch;
    EncodedBatch result;
    std::exception_ptr error;
    bool done = false;
  };
  void work();
  void encode(Slot& slot) const;

  const Tokenizer& tokenizer_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, slot_done_;
  std::deque<std::shared_ptr<Slot>> order_;  // pending, oldest first
  std::deque<std::shared_ptr<Slot>> queue_;  // not yet started
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dtrain::data
