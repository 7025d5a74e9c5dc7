// Where a store's shared secret comes from. The token travels in the HELLO
// frame; a job keeps it in a file (DTRAIN_STORE_TOKEN_FILE) so it does not
// show up in `ps` or in a job script.
#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/settings.h"
#include "store/tcp_store.h"

namespace dtrain {
namespace {

DTRAIN_SETTING(std::string, kStoreToken, "store-token", "DTRAIN_STORE_TOKEN", "",
               "Shared secret a store client presents to the store server; the server "
               "refuses clients without it. Empty: no authentication.");
DTRAIN_SETTING(std::string, kStoreTokenFile, "store-token-file", "DTRAIN_STORE_TOKEN_FILE", "",
               "File holding the store token (read when DTRAIN_STORE_TOKEN is unset; a "
               "trailing newline is stripped).");

}  // namespace

std::string storeTokenFromEnvironment() {
  // envValue(), not get(): the token is read rarely, and a test or a launcher
  // may change the environment between reads.
  if (auto token = kStoreToken.envValue(); token && !token->empty()) return *token;
  auto path = kStoreTokenFile.envValue();
  if (!path || path->empty()) return "";
  std::ifstream file(*path, std::ios::binary);
  if (!file) {
    throw errnoError("open", errno, "cannot read the store token file '" + *path + "' (DTRAIN_STORE_TOKEN_FILE)");
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  std::string token = contents.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

}  // namespace dtrain
