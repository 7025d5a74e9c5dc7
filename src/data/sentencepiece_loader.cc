// SentencePiece behind dlopen. libsentencepiece carries its own copy of
// protobuf-lite whose symbols clash with the libprotobuf libtorch loads: a
// process that has both mapped the ordinary way crashes in protobuf's
// start-up code as soon as libtorch is loaded. So the library lives in the
// module dtrain_sentencepiece, opened only when a SentencePiece tokenizer
// is asked for, with RTLD_LOCAL (its symbols stay out of the global scope)
// and RTLD_DEEPBIND (its own references bind to its own protobuf first).
// DEEPBIND has one cost: inside the module std::cerr binds to libstdc++'s
// own object, not the executable's initialised copy, so the module keeps
// SentencePiece's logging (which writes std::cerr) switched off.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "common/error.h"
#include "data/sentencepiece_tokenizer.h"

namespace dtrain::data {
namespace {

using MakeFn = std::unique_ptr<Tokenizer>* (*)(const std::string*);
using TrainFn = void (*)(const SentencePieceTraining*, const std::vector<std::string>*);

struct Module {
  void* handle = nullptr;
  MakeFn make = nullptr;
  TrainFn train = nullptr;
  std::string error;
};

// Next to this library (the build tree or an installed one), else where the build put it.
std::string modulePath() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&modulePath), &info) != 0 && info.dli_fname != nullptr) {
    const auto beside = std::filesystem::path(info.dli_fname).parent_path() /
                        std::filesystem::path(DTRAIN_SENTENCEPIECE_MODULE).filename();
    if (std::filesystem::exists(beside)) return beside.string();
  }
  return DTRAIN_SENTENCEPIECE_MODULE;
}

const Module& module() {
  static Module loaded = [] {
    Module m;
    const std::string path = modulePath();
    m.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (m.handle == nullptr) {
      const char* why = ::dlerror();
      m.error = "cannot load the SentencePiece module " + path + ": " + (why != nullptr ? why : "unknown error");
      return m;
    }
    m.make = reinterpret_cast<MakeFn>(::dlsym(m.handle, "dtrain_sentencepiece_tokenizer"));
    m.train = reinterpret_cast<TrainFn>(::dlsym(m.handle, "dtrain_sentencepiece_train"));
    if (m.make == nullptr || m.train == nullptr) m.error = path + " lacks its entry points";
    return m;
  }();
  if (!loaded.error.empty()) throw IoError(loaded.error);
  return loaded;
}

}  // namespace

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& model_path) {
  std::unique_ptr<std::unique_ptr<Tokenizer>> made(module().make(&model_path));
  return std::move(*made);
}

void trainSentencePiece(const SentencePieceTraining& training, const std::vector<std::string>& files) {
  module().train(&training, &files);
}

bool haveSentencePiece() { return true; }

}  // namespace dtrain::data
