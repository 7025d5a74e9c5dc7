// Where a store's shared secret comes from. The token travels in the HELLO
// frame; a job keeps it in a file (DTRAIN_STORE_TOKEN_FILE) so it does not
// show up in `ps` or in a job script. A file that was named but holds no
// token is an error, never "no authentication": the server would then accept
// anyone while its clients present a token, and nothing would look wrong.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"
#include "common/file_descriptor.h"
#include "common/log.h"
#include "common/settings.h"
#include "store/tcp_store.h"

namespace dtrain {
namespace {

DTRAIN_SETTING(std::string, kStoreToken, "store-token", "DTRAIN_STORE_TOKEN", "",
               "Shared secret a store client presents to the store server; the server "
               "refuses clients without it. Empty: no authentication.");
DTRAIN_SETTING(std::string, kStoreTokenFile, "store-token-file", "DTRAIN_STORE_TOKEN_FILE", "",
               "File holding the store token (read when DTRAIN_STORE_TOKEN is unset; a "
               "trailing newline is stripped). It must be a regular, non-empty file; one "
               "that others can read is used with a warning.");

// A token is a line of text; anything longer is not a token file.
constexpr off_t kMaxTokenFileBytes = 4096;

std::string readTokenFile(const std::string& path) {
  const std::string what = "the store token file '" + path + "' (DTRAIN_STORE_TOKEN_FILE)";
  // O_NONBLOCK: a FIFO named by mistake must not block the launcher.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) throw errnoError("open", errno, "cannot read " + what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw errnoError("fstat", errno, "cannot read " + what);
  if (S_ISDIR(st.st_mode)) {
    throw ConfigError(what + " is a directory; expected a regular file holding the token");
  }
  if (!S_ISREG(st.st_mode)) throw ConfigError(what + " is not a regular file; expected a file holding the token");
  if (st.st_size > kMaxTokenFileBytes) {
    throw ConfigError(what + " has " + std::to_string(st.st_size) + " bytes; expected a token of at most " +
                      std::to_string(kMaxTokenFileBytes) + " bytes");
  }
  std::string token(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < token.size()) {
    ssize_t n = ::read(fd.get(), token.data() + got, token.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errnoError("read", errno, "cannot read " + what);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  token.resize(got);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    throw ConfigError(what + " is empty; expected the token on its first line (unset the variable to run "
                      "without authentication)");
  }
  if ((st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    DTRAIN_LOG_WARN(what << " can be read by other users (mode " << std::oct << (st.st_mode & 0777) << std::dec
                         << "); chmod 600 it so only the job's user knows the token");
  }
  return token;
}

}  // namespace

std::string storeTokenFrom(const std::optional<std::string>& token, const std::optional<std::string>& token_file) {
  if (token && !token->empty()) return *token;
  if (!token_file || token_file->empty()) return "";
  return readTokenFile(*token_file);
}

std::string storeTokenFromEnvironment() {
  // envValue(), not get(): the token is read rarely, and a test or a launcher
  // may change the environment between reads.
  return storeTokenFrom(kStoreToken.envValue(), kStoreTokenFile.envValue());
}

}  // namespace dtrain
