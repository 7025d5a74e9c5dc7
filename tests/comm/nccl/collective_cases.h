// What one rank of an NCCL test group checks. Each function runs inside a
// forked rank process and throws std::runtime_error (or the communicator's
// own error) with a message naming the case and the first wrong element.
#pragma once

namespace dtrain {

class Communicator;

namespace testing {

// Every collective x dtype x reduce op x in-place/out-of-place form, against a
// host reference built with reduceInto(); send/recv around a ring; barrier;
// many operations in flight at once; argument errors (CPU buffer, size
// mismatch, bad root/peer/tag), which must take no sequence number.
void checkEveryOperation(Communicator& comm, int device);

}  // namespace testing
}  // namespace dtrain
