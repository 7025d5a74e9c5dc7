#include "data/embedded_corpus.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/env.h"
#include "common/error.h"
#include "common/files.h"
#include "common/host.h"
#include "data/corpus_tokenizer.h"
#include "data/tokenizer.h"

namespace dtrain::data {
namespace {

constexpr double kValidationFraction = 0.05;
constexpr int kCacheFormat = 1;  // bump when what a cache folder holds changes

bool isArt(const std::string& name) { return name == "art" || name == "ascii-art"; }

// FNV-1a: a stable 64-bit digest of the cache key's text.
std::string digest(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

// "path size mtime" of a file or of each file of a directory, for the key.
std::string fileStamp(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return path + " -";
  if (S_ISDIR(st.st_mode)) {
    std::string stamp;
    for (const char* name : {"encoder.json", "vocab.bpe", "vocab.json", "merges.txt", "tokenizer.json",
                             "tokenizer_config.json"}) {
      stamp += fileStamp(path + "/" + name) + ";";
    }
    return stamp;
  }
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtime);
}

// Removes a folder of plain files (a staging copy of the shards).
void removeFlatFolder(const std::string& dir) {
  if (DIR* handle = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(handle)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(handle);
  }
  ::rmdir(dir.c_str());
}

std::string tokenizeInto(const std::string& parent, const std::vector<std::string>& files,
                         const Tokenizer& tokenizer) {
  if (const int err = makeDirectories(parent)) {
    throw errnoError("mkdir", err, "cannot create the cache folder " + parent);
  }
  const std::string staging = parent + "/.staging-" + std::to_string(::getpid()) + "-" + hostName();
  CorpusOptions options;
  options.out_dir = staging;
  options.name = "fortunes";
  options.val_fraction = kValidationFraction;
  options.threads = std::max(1, static_cast<int>(std::min<long>(8, ::sysconf(_SC_NPROCESSORS_ONLN))));
  options.split = DocumentSplit{DocumentSplit::Mode::kSeparatorLine, "%"};
  tokenizeCorpus(files, tokenizer, options, {});
  return staging;
}

}  // namespace

std::vector<std::string> embeddedCorpusFiles(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* handle = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(handle)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.' || name.ends_with(".dat") || name.ends_with(".u8")) continue;
      struct stat st {};
      const std::string path = dir + "/" + name;
      if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
    }
    ::closedir(handle);
  }
  if (names.empty()) {
    throw ConfigError("the embedded corpus: no fortunes files in " + dir +
                      "; install Debian's fortunes package (scripts/setup.sh does), or give --data-dir token shards");
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return isArt(a) != isArt(b) ? isArt(b) : a < b;
  });
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back(dir + "/" + name);
  return paths;
}

std::string defaultCacheDir() {
  if (auto xdg = envString("XDG_CACHE_HOME"); xdg && xdg->starts_with('/')) return *xdg + "/dtrain";
  if (auto home = envString("HOME"); home && home->starts_with('/')) return *home + "/.cache/dtrain";
  return "/tmp/dtrain-cache";
}

std::string preparedEmbeddedCorpus(const std::string& tokenizer_kind, const std::string& tokenizer_path,
                                   const std::string& cache_dir, const std::string& corpus_dir) {
  const std::vector<std::string> files = embeddedCorpusFiles(corpus_dir);
  std::string key = "format " + std::to_string(kCacheFormat) + "\ntokenizer " + tokenizer_kind + " " +
                    fileStamp(tokenizer_path) + "\n";
  for (const std::string& file : files) key += fileStamp(file) + "\n";
  const std::string parent = cache_dir.empty() ? defaultCacheDir() : cache_dir;
  const std::string folder = parent + "/fortunes-" + tokenizer_kind + "-" + digest(key);
  if (isDirectory(folder)) return folder;

  const std::unique_ptr<Tokenizer> tokenizer = makeTokenizer(tokenizer_kind, tokenizer_path);
  const std::string staging = tokenizeInto(parent, files, *tokenizer);
  // Another rank may have renamed its copy first: then ours goes.
  if (::rename(staging.c_str(), folder.c_str()) != 0) {
    const int err = errno;
    removeFlatFolder(staging);
    if (!isDirectory(folder)) throw errnoError("rename", err, "cannot put the tokenized corpus at " + folder);
  }
  return folder;
}

}  // namespace dtrain::data
