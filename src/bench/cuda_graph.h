// nccl-tests' -G for `dtrain bench`: the timed operations of one size are
// captured from a stream of their own into a CUDA graph, which is then
// launched N times. Like device_memory.h, it keeps the CUDA runtime out of
// the rest of bench/.
#pragma once

#include <memory>

#include "comm/types.h"

namespace dtrain::bench {

// A non-blocking stream on `device` whose work can be captured and replayed.
// Throws ConfigError naming -G/--cudagraph for a CPU device or a build
// without CUDA.
class GraphStream {
 public:
  explicit GraphStream(Device device);
  ~GraphStream();
  GraphStream(const GraphStream&) = delete;
  GraphStream& operator=(const GraphStream&) = delete;

  // The cudaStream_t to put in Buffer::stream while capturing.
  void* stream() const;
  // Starts capturing this thread's work on stream() (thread-local mode, so
  // threads that drive other GPUs meanwhile are not caught in it).
  void beginCapture();
  // Ends the capture and instantiates the graph (replacing an earlier one).
  void endCapture();
  // Launches the graph `times` times on stream(), without waiting.
  void launch(int times);
  // Waits for everything queued on stream().
  void synchronize();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dtrain::bench
