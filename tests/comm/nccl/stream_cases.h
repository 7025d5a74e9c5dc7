// What one rank checks about CUDA stream semantics of the NCCL backend:
// ordering with a caller's stream and capture into a CUDA graph. Each runs
// inside a forked rank process and throws with a message on failure.
#pragma once

namespace dtrain {

class Communicator;

namespace testing {

// An allreduce on a caller stream, fed by an async copy queued before it on
// that stream and read back by an async copy queued after it, with no host
// wait on the Work: the stream alone must order the three. Rank 1 arrives
// late so that rank 0's collective is still running when its read-back is
// queued.
void checkCallerStreamOrdering(Communicator& comm, int device);

// An in-place sum allreduce captured into a CUDA graph (global capture
// mode, as PyTorch captures) on a caller stream, replayed three times: the
// values must be size^3 times the input, and the communicator must keep
// working normally afterwards.
void checkGraphCapture(Communicator& comm, int device);

}  // namespace testing
}  // namespace dtrain
