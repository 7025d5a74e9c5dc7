#include "collective_cases.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "device_buffer.h"

namespace dtrain::testing {
namespace {

constexpr std::chrono::seconds kWaitLimit{60};
constexpr size_t kCount = 1031;     // odd, so no kernel gets a round size
constexpr size_t kSlotCount = 257;  // per-rank elements of allgather/reduce_scatter
constexpr double kGarbage = 99;     // what outputs hold before an operation

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};

enum class Form { kOutOfPlace, kSameData, kOwnSlot };
const char* formName(Form form) {
  switch (form) {
    case Form::kOutOfPlace: return "out-of-place";
    case Form::kSameData: return "in-place (send.data == recv.data)";
    case Form::kOwnSlot: return "in-place (NCCL's own-slot form)";
  }
  return "?";
}

// Small non-negative integers: every dtype (uint8, half, bfloat16 included)
// holds every input, sum and product exactly, whatever order NCCL adds in.
double inputValue(int rank, size_t index, ReduceOp op) {
  if (op == ReduceOp::kProd) return 1.0 + static_cast<double>((index + rank) % 2);
  return static_cast<double>((index * 7 + static_cast<size_t>(rank) * 3) % 8);
}

std::vector<double> inputsOf(int rank, size_t offset, size_t count, ReduceOp op) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = inputValue(rank, offset + i, op);
  return values;
}

// Elements [offset, offset + count) of the reduction over all ranks' inputs.
std::vector<double> reference(DType dtype, ReduceOp op, int size, size_t offset, size_t count) {
  std::vector<char> result = hostValues(dtype, inputsOf(0, offset, count, op));
  for (int rank = 1; rank < size; ++rank) {
    const std::vector<char> other = hostValues(dtype, inputsOf(rank, offset, count, op));
    reduceInto(result.data(), other.data(), count, dtype, op);
  }
  if (op == ReduceOp::kAvg) divideInPlace(result.data(), count, dtype, size);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = loadElement(result.data(), i, dtype);
  return values;
}

// Exact except a floating average over a group whose size is not a power of
// two: NCCL pre-multiplies by 1/size, which rounds, where the reference
// divides the exact sum once.
double relativeTolerance(DType dtype, ReduceOp op, int size) {
  const bool power_of_two = (size & (size - 1)) == 0;
  if (op != ReduceOp::kAvg || power_of_two) return 0;
  switch (dtype) {
    case DType::kFloat16: return 1e-2;
    case DType::kBFloat16: return 4e-2;
    case DType::kFloat32: return 1e-5;
    case DType::kFloat64: return 1e-12;
    default: return 0;
  }
}

// Tracks the sequence numbers the communicator must hand out.
struct Group {
  Communicator& comm;
  int rank;
  int size;
  int device;
  uint64_t collectives = 0;
  uint64_t p2p = 0;

  void finish(const std::shared_ptr<Work>& work, bool collective, const std::string& what) {
    const uint64_t expected = collective ? ++collectives : ++p2p;
    expectThat(work->seq() == expected, what + ": sequence number " + std::to_string(work->seq()) +
                                             ", expected " + std::to_string(expected));
    work->wait(kWaitLimit);
    expectThat(work->isCompleted(), what + ": isCompleted() is false after wait()");
  }
};

std::string caseName(const char* op, DType dtype, const std::string& detail, int size) {
  return std::string(op) + " " + dtypeName(dtype) + " " + detail + " (world " + std::to_string(size) + ")";
}

void checkAllreduce(Group& g, DType dtype, ReduceOp op, bool in_place) {
  const std::string what = caseName("allreduce", dtype, std::string(reduceOpName(op)) +
                                        (in_place ? " in-place" : " out-of-place"), g.size);
  DeviceBuffer send(dtype, kCount, g.device);
  DeviceBuffer recv(dtype, kCount, g.device);
  send.upload(inputsOf(g.rank, 0, kCount, op));
  recv.upload(std::vector<double>(kCount, kGarbage));
  AllreduceOptions options;
  options.op = op;
  const DeviceBuffer& out = in_place ? send : recv;
  g.finish(g.comm.allreduce(send.all(), out.all(), options), true, what);
  expectValues(out.download(), reference(dtype, op, g.size, 0, kCount), relativeTolerance(dtype, op, g.size), what);
}

void checkBroadcast(Group& g, DType dtype, int root) {
  const std::string what = caseName("broadcast", dtype, "root " + std::to_string(root), g.size);
  DeviceBuffer buffer(dtype, kCount, g.device);
  buffer.upload(g.rank == root ? inputsOf(root, 0, kCount, ReduceOp::kSum) : std::vector<double>(kCount, kGarbage));
  BroadcastOptions options;
  options.root = root;
  g.finish(g.comm.broadcast(buffer.all(), options), true, what);
  expectValues(buffer.download(), inputsOf(root, 0, kCount, ReduceOp::kSum), 0, what);
}

void checkAllgather(Group& g, DType dtype, Form form) {
  const std::string what = caseName("allgather", dtype, formName(form), g.size);
  const size_t total = kSlotCount * static_cast<size_t>(g.size);
  DeviceBuffer recv(dtype, total, g.device);
  DeviceBuffer separate_send(dtype, kSlotCount, g.device);
  recv.upload(std::vector<double>(total, kGarbage));
  const std::vector<double> mine = inputsOf(g.rank, 0, kSlotCount, ReduceOp::kSum);
  Buffer send;
  switch (form) {
    case Form::kOutOfPlace: separate_send.upload(mine); send = separate_send.all(); break;
    case Form::kSameData: recv.upload(mine, 0); send = recv.view(0, kSlotCount); break;
    case Form::kOwnSlot:
      recv.upload(mine, g.rank * kSlotCount);
      send = recv.view(g.rank * kSlotCount, kSlotCount);
      break;
  }
  g.finish(g.comm.allgather(send, recv.all()), true, what);
  std::vector<double> want;
  for (int rank = 0; rank < g.size; ++rank) {
    const std::vector<double> theirs = inputsOf(rank, 0, kSlotCount, ReduceOp::kSum);
    want.insert(want.end(), theirs.begin(), theirs.end());
  }
  expectValues(recv.download(), want, 0, what);
}

void checkReduceScatter(Group& g, DType dtype, ReduceOp op, Form form) {
  const std::string what = caseName("reduce_scatter", dtype, std::string(reduceOpName(op)) + " " + formName(form),
                                    g.size);
  const size_t total = kSlotCount * static_cast<size_t>(g.size);
  DeviceBuffer send(dtype, total, g.device);
  DeviceBuffer separate_recv(dtype, kSlotCount, g.device);
  send.upload(inputsOf(g.rank, 0, total, op));
  separate_recv.upload(std::vector<double>(kSlotCount, kGarbage));
  Buffer recv;
  switch (form) {
    case Form::kOutOfPlace: recv = separate_recv.all(); break;
    case Form::kSameData: recv = send.view(0, kSlotCount); break;
    case Form::kOwnSlot: recv = send.view(g.rank * kSlotCount, kSlotCount); break;
  }
  ReduceScatterOptions options;
  options.op = op;
  g.finish(g.comm.reduceScatter(send.all(), recv, options), true, what);
  std::vector<double> got;
  switch (form) {
    case Form::kOutOfPlace: got = separate_recv.download(); break;
    case Form::kSameData: got = send.download(0, kSlotCount); break;
    case Form::kOwnSlot: got = send.download(g.rank * kSlotCount, kSlotCount); break;
  }
  expectValues(got, reference(dtype, op, g.size, g.rank * kSlotCount, kSlotCount),
               relativeTolerance(dtype, op, g.size), what);
}

// A ring: rank r sends to r+1 and receives from r-1. Rank 0 sends first and
// everyone else receives first, so the chain never waits on itself.
void checkSendRecv(Group& g, DType dtype) {
  const std::string what = caseName("send/recv", dtype, "ring", g.size);
  const int next = (g.rank + 1) % g.size;
  const int previous = (g.rank + g.size - 1) % g.size;
  DeviceBuffer outgoing(dtype, kCount, g.device);
  DeviceBuffer incoming(dtype, kCount, g.device);
  outgoing.upload(inputsOf(g.rank, 0, kCount, ReduceOp::kSum));
  incoming.upload(std::vector<double>(kCount, kGarbage));
  auto sendNext = [&] { g.finish(g.comm.send(outgoing.all(), next), false, what + " send"); };
  auto recvPrevious = [&] { g.finish(g.comm.recv(incoming.all(), previous), false, what + " recv"); };
  if (g.rank == 0) {
    sendNext();
    recvPrevious();
  } else {
    recvPrevious();
    sendNext();
  }
  expectValues(incoming.download(), inputsOf(previous, 0, kCount, ReduceOp::kSum), 0, what);
}

// Many collectives queued before any wait: the watchdog must finish them in
// order and each must see its own buffer.
void checkManyInFlight(Group& g) {
  const std::string what = caseName("allreduce", DType::kFloat32, "32 in flight", g.size);
  constexpr int kInFlight = 32;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kInFlight; ++k) {
    buffers.push_back(std::make_unique<DeviceBuffer>(DType::kFloat32, kCount, g.device));
    buffers.back()->upload(std::vector<double>(kCount, g.rank + k));
  }
  for (int k = 0; k < kInFlight; ++k) works.push_back(g.comm.allreduce(buffers[k]->all(), buffers[k]->all()));
  for (int k = 0; k < kInFlight; ++k) g.finish(works[k], true, what);
  const double rank_sum = g.size * (g.size - 1) / 2.0;
  for (int k = 0; k < kInFlight; ++k) {
    expectValues(buffers[k]->download(), std::vector<double>(kCount, rank_sum + g.size * k), 0,
                 what + " buffer " + std::to_string(k));
  }
}

// wait() with a deadline shorter than the operation throws TimeoutError and
// leaves the operation running; a later wait() sees it finish correctly.
// Every rank but 0 arrives late, so rank 0's allreduce cannot finish early.
void checkShortWaitLeavesTheOperationRunning(Group& g) {
  const std::string what = caseName("allreduce", DType::kFloat32, "short wait", g.size);
  DeviceBuffer buffer(DType::kFloat32, kCount, g.device);
  buffer.upload(std::vector<double>(kCount, 1.0));
  if (g.rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::shared_ptr<Work> work = g.comm.allreduce(buffer.all(), buffer.all());
  if (g.rank == 0) {
    bool timed_out = false;
    try {
      work->wait(std::chrono::milliseconds(20));
    } catch (const TimeoutError&) {
      timed_out = true;
    }
    expectThat(timed_out, what + ": wait(20 ms) returned although the peers arrive 500 ms late");
  }
  g.finish(work, true, what);
  expectValues(buffer.download(), std::vector<double>(kCount, g.size), 0, what);
}

void expectConfigError(const std::function<void()>& call, const std::string& needle, const std::string& what) {
  try {
    call();
  } catch (const ConfigError& e) {
    expectThat(e.message().find(needle) != std::string::npos,
               what + ": ConfigError without '" + needle + "': " + e.message());
    return;
  }
  throw std::runtime_error(what + ": no ConfigError");
}

void checkArgumentErrors(Group& g) {
  DeviceBuffer device(DType::kFloat32, kCount, g.device);
  std::vector<float> host(kCount);
  Buffer cpu;
  cpu.data = host.data();
  cpu.count = kCount;
  expectConfigError([&] { g.comm.allreduce(cpu, cpu); }, "nccl needs CUDA buffers; use the gloo backend",
                    "allreduce of a CPU buffer");
  expectConfigError([&] { g.comm.allreduce(device.view(0, kCount), device.view(0, kCount - 1)); }, "size mismatch",
                    "allreduce with recv shorter than send");
  expectConfigError([&] { g.comm.allgather(device.view(0, 10), device.view(0, 10)); }, "size mismatch",
                    "allgather with recv of one slot");
  expectConfigError([&] { g.comm.reduceScatter(device.view(0, 10), device.view(0, 10)); }, "size mismatch",
                    "reduce_scatter with send of one slot");
  BroadcastOptions bad_root;
  bad_root.root = g.size;
  expectConfigError([&] { g.comm.broadcast(device.all(), bad_root); }, "root", "broadcast from a root past the end");
  expectConfigError([&] { g.comm.send(device.all(), g.rank); }, "peer", "send to oneself");
  SendRecvOptions tagged;
  tagged.tag = 7;
  expectConfigError([&] { g.comm.send(device.all(), (g.rank + 1) % g.size, tagged); }, "tag", "send with a tag");
  Buffer other_device = device.all();
  other_device.device = Device::cuda(g.device + 1);
  expectConfigError([&] { g.comm.allreduce(other_device, other_device); }, "cuda:", "buffer of another GPU");
  // None of them took a sequence number: a barrier now is collective #next
  // on every rank, which finish() checks.
  g.finish(g.comm.barrier(), true, "barrier after argument errors (world " + std::to_string(g.size) + ")");
}

}  // namespace

void checkEveryOperation(Communicator& comm, int device) {
  Group g{comm, comm.rank(), comm.size(), device};
  expectThat(comm.backendName() == "nccl", "backendName() is " + comm.backendName());
  g.finish(comm.barrier(), true, "first barrier");
  checkArgumentErrors(g);
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      checkAllreduce(g, dtype, op, false);
      checkAllreduce(g, dtype, op, true);
      for (Form form : {Form::kOutOfPlace, Form::kSameData, Form::kOwnSlot}) checkReduceScatter(g, dtype, op, form);
    }
    checkBroadcast(g, dtype, 0);
    checkBroadcast(g, dtype, g.size - 1);
    for (Form form : {Form::kOutOfPlace, Form::kSameData, Form::kOwnSlot}) checkAllgather(g, dtype, form);
    checkSendRecv(g, dtype);
  }
  checkManyInFlight(g);
  checkShortWaitLeavesTheOperationRunning(g);
  g.finish(comm.barrier(), true, "last barrier");
}

}  // namespace dtrain::testing
