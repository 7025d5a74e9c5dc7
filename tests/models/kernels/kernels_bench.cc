// kernels_bench: GB/s of each fused kernel at GPT-2 124M and Llama 3.2 1B
// shapes (rows = batch * seq = 16 * 1024 by default), of batch norm at
// ResNet-50 224x224 shapes and of the stem's max pooling (batch 128,
// channels-last), bf16, beside a
// device-to-device copy (the bandwidth ceiling). Bytes are the fewest the
// kernel must move (each input read once, each output written once); times
// are per call, from replays of a CUDA graph of 20 calls (no launch gaps,
// as torch's do_bench_cudagraph times bench/peers/torch_fused_ops.py).
//   kernels_bench [--rows N] [--iters N] [--filter SUBSTRING-OF-KERNEL-NAME]
// Exits 0 with a message when there is no GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "models/kernels/kernels.h"

namespace dk = dtrain::kernels;

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}
#define CHECK(call) check((call), #call)

// Device memory filled with random bf16 values (N(0, 1)): a 64 MiB random
// pool copied over and over, so nothing is timed on zeros.
class Arena {
 public:
  Arena() {
    std::vector<uint16_t> host(kPool / 2);
    std::mt19937 gen(7);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (auto& h : host) {
      float f = dist(gen);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
    CHECK(cudaMalloc(&pool_, kPool));
    CHECK(cudaMemcpy(pool_, host.data(), kPool, cudaMemcpyHostToDevice));
  }
  ~Arena() {
    for (void* p : owned_) cudaFree(p);
    cudaFree(pool_);
  }
  void* random(size_t bytes) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    owned_.push_back(p);
    for (size_t off = 0; off < bytes; off += kPool) {
      CHECK(cudaMemcpy(static_cast<char*>(p) + off, pool_, std::min(kPool, bytes - off), cudaMemcpyDeviceToDevice));
    }
    return p;
  }
  template <typename T>
  T* upload(const std::vector<T>& v) {
    void* p = random(v.size() * sizeof(T));
    CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return static_cast<T*>(p);
  }

 private:
  static constexpr size_t kPool = size_t{64} << 20;
  void* pool_ = nullptr;
  std::vector<void*> owned_;
};

int g_iters = 20;

cudaStream_t g_stream = nullptr;

// The same without a graph: g_iters calls back to back between two events.
double time_launches_us(const std::function<cudaError_t()>& call) {
  for (int i = 0; i < 3; ++i) CHECK(call());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(start, g_stream));
    for (int i = 0; i < g_iters; ++i) CHECK(call());
    CHECK(cudaEventRecord(stop, g_stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e3 / g_iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Time of one call in microseconds: g_iters calls captured into a CUDA graph
// (as dtrain's CUDA-graph step runs them; this also checks that every call
// can be captured), the graph replayed 5 times, the median.
double time_us(const std::function<cudaError_t()>& call, bool replay_graph = true) {
  if (!replay_graph) return time_launches_us(call);
  for (int i = 0; i < 3; ++i) CHECK(call());
  CHECK(cudaStreamSynchronize(g_stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < g_iters; ++i) CHECK(call());
  CHECK(cudaStreamEndCapture(g_stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, g_stream));  // warm-up
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(start, g_stream));
    CHECK(cudaGraphLaunch(exec, g_stream));
    CHECK(cudaEventRecord(stop, g_stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e3 / g_iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string g_filter;  // --filter SUBSTRING: only kernels whose name holds it

void report(const char* model, const std::string& kernel, const std::string& shape, double bytes,
            const std::function<cudaError_t()>& call, bool graph = true) {
  if (!g_filter.empty() && kernel.find(g_filter) == std::string::npos) return;
  const double us = time_us(call, graph);
  std::printf("| %-10s | %-22s | %-28s | %9.1f | %8.0f |\n", model, kernel.c_str(), shape.c_str(), us,
              bytes / (us * 1e-6) / 1e9);
}

std::string shape(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

void bench_norms(Arena& a, const char* model, bool rms, int64_t rows, int cols) {
  const size_t n = rows * cols, e = 2;
  dk::NormForwardArgs f;
  f.x = a.random(n * e);
  f.residual = a.random(n * e);
  f.weight = a.random(cols * e);
  f.bias = rms ? nullptr : a.random(cols * e);
  f.y = a.random(n * e);
  f.residual_out = a.random(n * e);
  f.mean = static_cast<float*>(a.random(rows * 4));
  f.rstd = static_cast<float*>(a.random(rows * 4));
  f.rows = rows;
  f.cols = cols;
  auto fwd = [=] { return rms ? dk::rms_norm_forward(f, g_stream) : dk::layer_norm_forward(f, g_stream); };
  const char* name = rms ? "rmsnorm" : "layernorm";
  report(model, std::string("residual+") + name + " fwd", shape(rows, cols), 4.0 * n * e + 8.0 * rows, fwd);
  dk::NormBackwardArgs g;
  g.dy = a.random(n * e);
  g.x = f.residual_out;
  g.weight = f.weight;
  g.mean = f.mean;
  g.rstd = f.rstd;
  g.dresidual = a.random(n * e);
  g.dx = a.random(n * e);
  g.dweight = a.random(cols * e);
  g.dbias = rms ? nullptr : a.random(cols * e);
  g.workspace_bytes = dk::norm_backward_workspace_size(rows, cols);
  g.workspace = a.random(g.workspace_bytes);
  g.rows = rows;
  g.cols = cols;
  auto bwd = [=] { return rms ? dk::rms_norm_backward(g, g_stream) : dk::layer_norm_backward(g, g_stream); };
  report(model, std::string(name) + " bwd (+dres)", shape(rows, cols), 4.0 * n * e + 8.0 * rows, bwd);
}

void bench_gelu(Arena& a, int64_t rows, int cols) {
  const size_t n = rows * cols, e = 2;
  void *x = a.random(n * e), *y = a.random(n * e), *b = a.random(cols * e), *dy = a.random(n * e),
       *dx = a.random(n * e), *db = a.random(cols * e);
  const size_t ws_bytes = dk::gelu_backward_workspace_size(rows, cols);
  void* ws = a.random(ws_bytes);
  const auto bf = dk::DType::kBFloat16;
  report("gpt2-124M", "bias+gelu fwd", shape(rows, cols), 2.0 * n * e,
         [=] { return dk::gelu_forward(y, x, b, rows, cols, bf, bf, g_stream); });
  report("gpt2-124M", "bias+gelu bwd (+dbias)", shape(rows, cols), 3.0 * n * e,
         [=] { return dk::gelu_backward(dx, db, false, ws, ws_bytes, dy, x, b, rows, cols, bf, bf, g_stream); });
}

void bench_swiglu(Arena& a, int64_t rows, int ffn) {
  const size_t n = rows * ffn, e = 2;
  char* in = static_cast<char*>(a.random(2 * n * e));
  char* grad = static_cast<char*>(a.random(2 * n * e));
  void *y = a.random(n * e), *dy = a.random(n * e);
  const auto bf = dk::DType::kBFloat16;
  report("llama3-1B", "swiglu fwd (packed)", shape(rows, ffn), 3.0 * n * e,
         [=] { return dk::swiglu_forward(y, in, in + ffn * e, rows, ffn, 2 * ffn, bf, g_stream); });
  report("llama3-1B", "swiglu bwd (packed)", shape(rows, ffn), 5.0 * n * e, [=] {
    return dk::swiglu_backward(grad, grad + ffn * e, dy, in, in + ffn * e, rows, ffn, 2 * ffn, 2 * ffn, bf, g_stream);
  });
}

void bench_rope(Arena& a, int64_t rows, int hq, int hkv, int head_dim) {
  const int64_t stride = static_cast<int64_t>(hq + 2 * hkv) * head_dim;
  char* qkv = static_cast<char*>(a.random(rows * stride * 2));
  const auto freq = dk::rope_inverse_frequencies(head_dim, 500000.0);
  dk::RopeArgs r;
  r.q = {qkv, qkv, hq, stride, stride};
  r.k = {qkv + hq * head_dim * 2, qkv + hq * head_dim * 2, hkv, stride, stride};
  r.inv_freq = a.upload(freq);
  r.tokens = rows;
  r.seq_len = 1024;
  r.head_dim = head_dim;
  const double bytes = 2.0 * rows * (hq + hkv) * head_dim * 2;
  const std::string s = shape(rows, (hq + hkv) * head_dim) + " (q+k in qkv)";
  report("llama3-1B", "rope fwd (in place)", s, bytes, [=] { return dk::rope_forward(r, g_stream); });
  report("llama3-1B", "rope bwd (in place)", s, bytes, [=] { return dk::rope_backward(r, g_stream); });
}

void bench_cross_entropy(Arena& a, const char* model, int64_t rows, int vocab, int64_t stride) {
  std::vector<int32_t> targets(rows);
  std::mt19937 gen(3);
  for (auto& t : targets) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(gen);
  dk::CrossEntropyArgs c;
  c.logits = a.random(rows * stride * 2);
  c.targets = a.upload(targets);
  c.target_type = dk::IndexType::kInt32;
  c.losses = static_cast<float*>(a.random(rows * 4));
  c.rows = rows;
  c.vocab = vocab;
  c.row_stride = stride;
  c.grad_scale = 1.f / rows;
  // Timed on its own output after the first call (dlogits in place): the
  // same work, values of another range.
  report(model, "cross-entropy+dlogits", shape(rows, stride), 2.0 * rows * stride * 2,
         [=] { return dk::cross_entropy_forward_backward(c, g_stream); });
}

// Batch norm at one ResNet-50 shape [batch, side, side, channels]: the
// training forward with the shortcut and ReLU (statistics: one read of x;
// apply: x and residual read, y written) and its backward (sums: dy, y, x
// read; dx: the same read again, dx and dresidual written). Bytes count
// every pass, the fewest these two-pass kernels can move.
void bench_batch_norm(Arena& a, int64_t batch, int side, int channels) {
  const int64_t rows = batch * side * side;
  const size_t n = rows * channels, e = 2;
  const std::string s = std::to_string(batch) + "x" + std::to_string(side) + "x" + std::to_string(side) + "x" +
                        std::to_string(channels);
  const size_t ws_bytes = dk::batch_norm_workspace_size(rows, channels);
  dk::BatchNormForwardArgs f;
  f.x = a.random(n * e);
  f.residual = a.random(n * e);
  f.y = a.random(n * e);
  f.weight = a.upload(std::vector<float>(channels, 1.f));
  f.bias = a.upload(std::vector<float>(channels, 0.f));
  f.running_mean = a.upload(std::vector<float>(channels, 0.f));
  f.running_var = a.upload(std::vector<float>(channels, 1.f));
  f.save_mean = static_cast<float*>(a.random(channels * 4));
  f.save_invstd = static_cast<float*>(a.random(channels * 4));
  f.workspace = a.random(ws_bytes);
  f.workspace_bytes = ws_bytes;
  f.rows = rows;
  f.channels = channels;
  f.relu = true;
  report("resnet50", "bn+add+relu fwd train", s, 4.0 * n * e, [=] { return dk::batch_norm_forward(f, g_stream); });
  dk::BatchNormForwardArgs eval = f;
  eval.training = false;
  eval.save_mean = eval.save_invstd = nullptr;
  report("resnet50", "bn+add+relu fwd eval", s, 3.0 * n * e,
         [=] { return dk::batch_norm_forward(eval, g_stream); });
  dk::BatchNormBackwardArgs g;
  g.dy = a.random(n * e);
  g.y = f.y;
  g.x = f.x;
  g.weight = f.weight;
  g.mean = f.save_mean;
  g.invstd = f.save_invstd;
  g.dx = a.random(n * e);
  g.dresidual = a.random(n * e);
  g.dweight = static_cast<float*>(a.random(channels * 4));
  g.dbias = static_cast<float*>(a.random(channels * 4));
  g.workspace = f.workspace;
  g.workspace_bytes = ws_bytes;
  g.rows = rows;
  g.channels = channels;
  g.relu = true;
  // The saved statistics must be real ones (random bits may be NaN or 0).
  CHECK(dk::batch_norm_forward(f, g_stream));
  report("resnet50", "bn+add+relu bwd", s, 8.0 * n * e, [=] { return dk::batch_norm_backward(g, g_stream); });
}

// ResNet's stem pooling (kernel 3, stride 2, padding 1): forward (x read,
// y and the one-byte argmax written) and backward (dy and argmax read, dx
// written). Bytes count each once; the windows overlap, so the forward
// reads some of x again from the caches.
void bench_max_pool(Arena& a, int64_t batch, int side, int channels) {
  const int out = dk::max_pool2d_output_size(side, 3, 2, 1);
  const size_t n_in = batch * side * side * channels, n_out = batch * out * out * channels, e = 2;
  const std::string s = std::to_string(batch) + "x" + std::to_string(side) + "x" + std::to_string(side) + "x" +
                        std::to_string(channels);
  dk::MaxPool2dForwardArgs f;
  f.x = a.random(n_in * e);
  f.y = a.random(n_out * e);
  f.argmax = static_cast<uint8_t*>(a.random(n_out));
  f.batch = batch;
  f.height = f.width = side;
  f.channels = channels;
  report("resnet50", "max pool 3x3/2 fwd", s, (n_in + n_out) * e + n_out,
         [=] { return dk::max_pool2d_forward(f, g_stream); });
  dk::MaxPool2dBackwardArgs g;
  g.dy = a.random(n_out * e);
  g.argmax = f.argmax;
  g.dx = a.random(n_in * e);
  g.batch = batch;
  g.height = g.width = side;
  g.channels = channels;
  CHECK(dk::max_pool2d_forward(f, g_stream));  // a real argmax
  report("resnet50", "max pool 3x3/2 bwd", s, (n_in + n_out) * e + n_out,
         [=] { return dk::max_pool2d_backward(g, g_stream); });
}

void bench_copy(Arena& a) {
  const size_t bytes = size_t{1} << 30;
  void *src = a.random(bytes), *dst = a.random(bytes);
  // Launched, not replayed: a memcpy node in a graph was measured slower
  // (2.4 against 3.0 TB/s on an H100).
  report(
      "-", "device copy (ceiling)", "1 GiB", 2.0 * bytes,
      [=] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream); }, false);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 16 * 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iters")) g_iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--filter")) g_filter = argv[i + 1];
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("kernels_bench: no CUDA GPU, nothing to measure\n");
    return 0;
  }
  CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.0f MiB; rows %lld, bf16, median of 5 replays of a CUDA graph of %d calls\n\n",
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1048576.0, static_cast<long long>(rows),
              g_iters);
  std::printf("| model      | kernel                 | shape                        | time (us) |     GB/s |\n");
  std::printf("|------------|------------------------|------------------------------|----------:|---------:|\n");
  Arena a;
  bench_copy(a);
  bench_norms(a, "gpt2-124M", false, rows, 768);
  bench_gelu(a, rows, 3072);
  bench_cross_entropy(a, "gpt2-124M", rows, 50257, 50304);
  bench_norms(a, "llama3-1B", true, rows, 2048);
  bench_swiglu(a, rows, 8192);
  bench_rope(a, rows, 32, 8, 64);
  bench_cross_entropy(a, "llama3-1B", rows, 128256, 128256);
  for (auto [side, channels] : {std::pair{56, 64}, {56, 256}, {28, 512}, {14, 1024}, {7, 2048}}) {
    bench_batch_norm(a, 128, side, channels);
  }
  bench_max_pool(a, 128, 112, 64);
  return 0;
}
