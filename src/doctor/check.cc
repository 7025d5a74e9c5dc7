#include "doctor/check.h"

namespace dtrain::doctor {

const char* statusName(Status status) {
  switch (status) {
    case Status::kPass: return "PASS";
    case Status::kWarn: return "WARN";
    case Status::kFail: return "FAIL";
    case Status::kSkip: return "SKIP";
  }
  return "?";
}

CheckResult pass(std::string name, std::string reason, std::string detail) {
  return {std::move(name), Status::kPass, std::move(reason), {}, std::move(detail)};
}
CheckResult warn(std::string name, std::string reason, std::string hint, std::string detail) {
  return {std::move(name), Status::kWarn, std::move(reason), std::move(hint), std::move(detail)};
}
CheckResult fail(std::string name, std::string reason, std::string hint, std::string detail) {
  return {std::move(name), Status::kFail, std::move(reason), std::move(hint), std::move(detail)};
}
CheckResult skip(std::string name, std::string reason, std::string detail) {
  return {std::move(name), Status::kSkip, std::move(reason), {}, std::move(detail)};
}

}  // namespace dtrain::doctor
