// Every collective x every dtype x world sizes 1..8 against a host-computed
// reference. Inputs are small integers chosen so that every partial result
// is exact in every dtype (half and bfloat16 included), so the comparisons
// are exact and independent of the order of reduction.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "tests/comm/gloo/buffers.h"
#include "tests/comm/gloo/gloo_group.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::runGlooGroup;
constexpr auto cpu = testing::cpuBuffer;
constexpr auto filled = testing::filledBuffer;

constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProd};
constexpr Milliseconds kWait{60s};

// Rank `rank`'s input at element i for `op`: sums stay below 64, products
// below 16 (uint8 does not wrap), and avg inputs sum to an exact multiple of
// the world size, so the average is the integer 2 + i % 5.
double inputValue(ReduceOp op, int rank, int size, size_t i) {
  switch (op) {
    case ReduceOp::kSum: return static_cast<double>((rank * 3 + i) % 7);
    case ReduceOp::kProd: return (rank + i) % 3 == 0 ? 2.0 : 1.0;
    case ReduceOp::kMin:
    case ReduceOp::kMax: return static_cast<double>((rank * 5 + i * 3) % 11);
    case ReduceOp::kAvg: {
      const bool unpaired = size % 2 == 1 && rank == size - 1;
      const int offset = unpaired ? 0 : (rank % 2 == 0 ? 1 : -1);
      return static_cast<double>(2 + i % 5 + offset);
    }
  }
  return 0;
}

double referenceValue(ReduceOp op, int size, size_t i) {
  double result = inputValue(op, 0, size, i);
  for (int r = 1; r < size; ++r) {
    const double x = inputValue(op, r, size, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: result += x; break;
      case ReduceOp::kProd: result *= x; break;
      case ReduceOp::kMin: result = std::min(result, x); break;
      case ReduceOp::kMax: result = std::max(result, x); break;
    }
  }
  return op == ReduceOp::kAvg ? result / size : result;
}

double plainValue(int rank, size_t i) { return static_cast<double>((rank * 7 + i) % 13); }

// One failure per buffer, not one per element.
void expectElements(const void* data, DType dtype, size_t count,
                    const std::function<double(size_t)>& expected, const std::string& what) {
  const std::string mismatch = testing::firstMismatch(data, dtype, count, expected);
  if (!mismatch.empty()) ADD_FAILURE() << what << ": " << mismatch;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
};

TEST_P(GlooCollectivesTest, AllreduceEveryOpAndDtypeInAndOutOfPlace) {
  constexpr size_t kCount = 13;  // not a multiple of any world size > 1
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    for (DType dtype : kAllDTypes) {
      // Queue every op of this dtype before waiting: they must run in order.
      struct Case {
        ReduceOp op;
        bool in_place;
        std::vector<char> send, recv;
        std::shared_ptr<Work> work;
      };
      std::vector<Case> cases;
      for (ReduceOp op : kAllOps) {
        for (bool in_place : {false, true}) {
          auto send = filled(dtype, kCount, [&](size_t i) { return inputValue(op, rank, size(), i); });
          cases.push_back({op, in_place, send, std::vector<char>(send.size()), nullptr});
        }
      }
      for (Case& c : cases) {
        void* recv = c.in_place ? c.send.data() : c.recv.data();
        c.work = comm.allreduce(cpu(c.send.data(), kCount, dtype), cpu(recv, kCount, dtype), {c.op, kWait});
      }
      for (Case& c : cases) {
        c.work->wait(kWait);
        const std::string what = std::string("allreduce ") + reduceOpName(c.op) +
                                 (c.in_place ? " in place" : " out of place");
        expectElements(c.in_place ? c.send.data() : c.recv.data(), dtype, kCount,
                       [&](size_t i) { return referenceValue(c.op, size(), i); }, what);
        if (!c.in_place) {
          expectElements(c.send.data(), dtype, kCount,
                         [&](size_t i) { return inputValue(c.op, rank, size(), i); }, what + " input");
        }
      }
    }
  });
}

TEST_P(GlooCollectivesTest, BroadcastEveryDtypeFromSeveralRoots) {
  constexpr size_t kCount = 11;
  const std::set<int> roots = {0, size() / 2, size() - 1};
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    for (DType dtype : kAllDTypes) {
      for (int root : roots) {
        auto data = filled(dtype, kCount, [&](size_t i) { return rank == root ? plainValue(root, i) : 99.0; });
        comm.broadcast(cpu(data.data(), kCount, dtype), {root, kWait})->wait(kWait);
        expectElements(data.data(), dtype, kCount, [&](size_t i) { return plainValue(root, i); },
                       "broadcast from root " + std::to_string(root));
      }
    }
  });
}

TEST_P(GlooCollectivesTest, AllgatherEveryDtypeOutOfPlaceInPlaceAndAliased) {
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    for (DType dtype : kAllDTypes) {
      for (size_t count : {size_t{1}, size_t{5}}) {
        const size_t element = dtypeSize(dtype);
        auto expected = [&](size_t j) { return plainValue(static_cast<int>(j / count), j % count); };
        auto mine = [&](size_t i) { return plainValue(rank, i); };

        auto send = filled(dtype, count, mine);
        std::vector<char> recv(count * size() * element);
        comm.allgather(cpu(send.data(), count, dtype), cpu(recv.data(), count * size(), dtype), {kWait})->wait(kWait);
        expectElements(recv.data(), dtype, count * size(), expected, "allgather out of place");

        // In place as NCCL defines it: the input already sits in this rank's slot.
        auto in_place = filled(dtype, count * size(), [&](size_t j) {
          return j / count == static_cast<size_t>(rank) ? mine(j % count) : 99.0;
        });
        comm.allgather(cpu(in_place.data() + rank * count * element, count, dtype),
                       cpu(in_place.data(), count * size(), dtype), {kWait})->wait(kWait);
        expectElements(in_place.data(), dtype, count * size(), expected, "allgather in place");

        // send.data == recv.data: the input is the first slot of the output.
        auto aliased = filled(dtype, count * size(), [&](size_t j) { return j < count ? mine(j) : 99.0; });
        comm.allgather(cpu(aliased.data(), count, dtype), cpu(aliased.data(), count * size(), dtype), {kWait})
            ->wait(kWait);
        expectElements(aliased.data(), dtype, count * size(), expected, "allgather aliased");
      }
    }
  });
}

TEST_P(GlooCollectivesTest, ReduceScatterEveryOpAndDtypeInAndOutOfPlace) {
  constexpr size_t kCount = 3;
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    const size_t total = kCount * size();
    for (DType dtype : kAllDTypes) {
      const size_t element = dtypeSize(dtype);
      for (ReduceOp op : kAllOps) {
        auto input = [&](size_t j) { return inputValue(op, rank, size(), j); };
        auto expected = [&](size_t i) { return referenceValue(op, size(), rank * kCount + i); };
        const std::string name = std::string("reduce_scatter ") + reduceOpName(op);

        auto send = filled(dtype, total, input);
        std::vector<char> recv(kCount * element);
        comm.reduceScatter(cpu(send.data(), total, dtype), cpu(recv.data(), kCount, dtype), {op, kWait})
            ->wait(kWait);
        expectElements(recv.data(), dtype, kCount, expected, name + " out of place");
        expectElements(send.data(), dtype, total, input, name + " input");

        // In place: this rank's result lands in its own chunk of the input.
        auto buffer = filled(dtype, total, input);
        comm.reduceScatter(cpu(buffer.data(), total, dtype),
                           cpu(buffer.data() + rank * kCount * element, kCount, dtype), {op, kWait})
            ->wait(kWait);
        expectElements(buffer.data() + rank * kCount * element, dtype, kCount, expected, name + " in place");
      }
    }
  });
}

TEST_P(GlooCollectivesTest, BarrierReleasesNoRankBeforeAllArrived) {
  std::atomic<int> arrived{0};
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    for (int round = 1; round <= 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rank * 3));  // late arrivals
      arrived.fetch_add(1);
      comm.barrier({kWait})->wait(kWait);
      EXPECT_GE(arrived.load(), size() * round) << "rank " << rank << " left barrier " << round << " early";
    }
  });
}

TEST_P(GlooCollectivesTest, SendRecvAroundTheRingEveryDtype) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  constexpr size_t kCount = 9;
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    const int right = (rank + 1) % size();
    const int left = (rank + size() - 1) % size();
    for (DType dtype : kAllDTypes) {
      for (uint32_t tag : {0u, 5u}) {
        auto out = filled(dtype, kCount, [&](size_t i) { return plainValue(rank, i + tag); });
        std::vector<char> in(out.size());
        // A send completes only when the peer posted its recv: alternate the
        // order so that the ring cannot deadlock.
        std::shared_ptr<Work> first, second;
        if (rank % 2 == 0) {
          first = comm.send(cpu(out.data(), kCount, dtype), right, {tag, kWait});
          second = comm.recv(cpu(in.data(), kCount, dtype), left, {tag, kWait});
        } else {
          first = comm.recv(cpu(in.data(), kCount, dtype), left, {tag, kWait});
          second = comm.send(cpu(out.data(), kCount, dtype), right, {tag, kWait});
        }
        first->wait(kWait);
        second->wait(kWait);
        expectElements(in.data(), dtype, kCount, [&](size_t i) { return plainValue(left, i + tag); },
                       "recv from rank " + std::to_string(left) + " tag " + std::to_string(tag));
      }
    }
  });
}

// reduce, gather and scatter to and from every root, and alltoall, in
// place and not, against a host reference.
TEST_P(GlooCollectivesTest, RootedCollectivesAndAlltoallMatchTheReference) {
  const int n = size();
  constexpr size_t kPart = 5;
  runGlooGroup(n, [&](Communicator& comm, int rank) {
    const auto value = [](int r, size_t i) { return static_cast<float>(r * 100 + static_cast<int>(i)); };
    for (int root = 0; root < n; ++root) {
      std::vector<float> mine(kPart), sum(kPart, -1.0f);
      for (size_t i = 0; i < kPart; ++i) mine[i] = value(rank, i);
      comm.reduce(cpu(mine.data(), kPart, DType::kFloat32), cpu(sum.data(), kPart, DType::kFloat32),
                  {ReduceOp::kSum, root, kWait})->wait(kWait);
      std::vector<float> all(kPart * n, -1.0f);
      comm.gather(cpu(mine.data(), kPart, DType::kFloat32), cpu(all.data(), kPart * n, DType::kFloat32), {root, kWait})
          ->wait(kWait);
      std::vector<float> source(kPart * n), part(kPart, -1.0f);
      for (size_t i = 0; i < source.size(); ++i) source[i] = value(rank, i);
      comm.scatter(cpu(source.data(), kPart * n, DType::kFloat32), cpu(part.data(), kPart, DType::kFloat32), {root, kWait})
          ->wait(kWait);
      for (size_t i = 0; i < kPart; ++i) {
        if (rank == root) {
          float expected = 0;
          for (int r = 0; r < n; ++r) expected += value(r, i);
          EXPECT_EQ(sum[i], expected) << "reduce to " << root << ", element " << i;
          for (int r = 0; r < n; ++r) EXPECT_EQ(all[r * kPart + i], value(r, i)) << "gather to " << root;
        }
        EXPECT_EQ(part[i], value(root, rank * kPart + i)) << "scatter from " << root << " on rank " << rank;
      }
    }
    for (const bool in_place : {false, true}) {
      std::vector<float> send(kPart * n), recv(kPart * n, -1.0f);
      for (size_t i = 0; i < send.size(); ++i) send[i] = value(rank, i);
      float* out = in_place ? send.data() : recv.data();
      comm.alltoall(cpu(send.data(), kPart * n, DType::kFloat32), cpu(out, kPart * n, DType::kFloat32), {kWait})
          ->wait(kWait);
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < kPart; ++i) {
          EXPECT_EQ(out[j * kPart + i], value(j, rank * kPart + i)) << "alltoall part " << j << (in_place ? " in place" : "");
        }
      }
    }
  });
}

// sendRecv posts both at once: every rank may send right and receive from
// the left in the same order (nccl-tests' sendrecv), and two ranks may
// exchange (send_peer == recv_peer), without deadlock.
TEST_P(GlooCollectivesTest, SendRecvShiftsTheRingInOneCall) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  constexpr size_t kCount = 300000;  // over a Gloo segment: the send waits for the peer's recv
  runGlooGroup(size(), [&](Communicator& comm, int rank) {
    const int right = (rank + 1) % size();
    const int left = (rank + size() - 1) % size();
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
      auto out = filled(dtype, kCount, [&](size_t i) { return plainValue(rank, i); });
      std::vector<char> in(out.size());
      comm.sendRecv(cpu(out.data(), kCount, dtype), right, cpu(in.data(), kCount, dtype), left, {0, kWait})
          ->wait(kWait);
      expectElements(in.data(), dtype, kCount, [&](size_t i) { return plainValue(left, i); },
                     "sendrecv from rank " + std::to_string(left));
      // The pair exchange: ranks 2k and 2k + 1 swap.
      const int partner = rank ^ 1;
      if (partner < size()) {
        std::vector<char> back(out.size());
        comm.sendRecv(cpu(out.data(), kCount, dtype), partner, cpu(back.data(), kCount, dtype), partner, {0, kWait})
            ->wait(kWait);
        expectElements(back.data(), dtype, kCount, [&](size_t i) { return plainValue(partner, i); },
                       "exchange with rank " + std::to_string(partner));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(GlooLargeAllreduceTest, FourMebibytesSpanManySegments) {
  constexpr size_t kCount = (1u << 20) + 3;  // 4 MiB of floats, many 1 MiB Gloo segments
  runGlooGroup(4, [&](Communicator& comm, int rank) {
    std::vector<float> data(kCount);
    for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>((rank + i) % 5);
    comm.allreduce(cpu(data.data(), kCount, DType::kFloat32), cpu(data.data(), kCount, DType::kFloat32),
                   {ReduceOp::kSum, kWait})
        ->wait(kWait);
    for (size_t i = 0; i < kCount; ++i) {
      double expected = 0;
      for (int r = 0; r < 4; ++r) expected += (r + i) % 5;
      if (data[i] != expected) {
        ADD_FAILURE() << "element " << i << " is " << data[i] << ", expected " << expected;
        break;
      }
    }
  });
}

}  // namespace
}  // namespace dtrain
