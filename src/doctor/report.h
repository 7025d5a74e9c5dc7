// The report of a `dtrain doctor` run (doctor/): a table for people and
// JSON for programs.
//
// JSON schema (other tools read it; fields are only ever added):
//   {"host": "<hostname>", "root": "/",
//    "checks": [{"name": "gpu.count", "status": "PASS|WARN|FAIL|SKIP",
//                "reason": "...", "hint": "...", "detail": "..."}, ...],
//    "summary": {"pass": N, "warn": N, "fail": N, "skip": N},
//    "exit_code": 0|1|2}
#pragma once

#include <string>
#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

struct DoctorReport {
  std::string host;  // this machine's host name
  std::string root;  // the --root the checks read
  std::vector<CheckResult> results;
  int exit_code = 0;
};

struct StatusCounts {
  int pass = 0;
  int warn = 0;
  int fail = 0;
  int skip = 0;
};
StatusCounts countStatuses(const std::vector<CheckResult>& results);

// Header line "dtrain doctor: <host> (root <root>)", columns CHECK, STATUS,
// REASON; under a WARN or FAIL row an indented "hint: ..." line; detail lines
// indented under the row; the summary line
// "N passed, N warnings, N failed, N skipped". `color`: ANSI colours on the
// status column (only for a terminal).
std::string formatTable(const DoctorReport& report, bool color);

// The JSON document above, pretty-printed with two-space indents.
std::string formatJson(const DoctorReport& report);

// `dtrain doctor --list`: one line per check, name and description; active
// checks say which option runs them.
std::string formatCheckList(const std::vector<CheckSpec>& checks);

}  // namespace dtrain::doctor
