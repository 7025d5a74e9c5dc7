#include "metric_names.h"

#include <cctype>

namespace dtrain::testing {
namespace {

bool isIdentifierStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool isIdentifierChar(char c) { return isIdentifierStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

}  // namespace

const std::set<std::string>& exporterMetricNames() {
  static const std::set<std::string> names = {
      "DCGM_FI_DEV_GPU_UTIL",           "DCGM_FI_DEV_MEM_COPY_UTIL",
      "DCGM_FI_DEV_FB_USED",            "DCGM_FI_DEV_FB_FREE",
      "DCGM_FI_DEV_FB_TOTAL",           "DCGM_FI_DEV_GPU_TEMP",
      "DCGM_FI_DEV_MEMORY_TEMP",        "DCGM_FI_DEV_POWER_USAGE",
      "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_SM_CLOCK",
      "DCGM_FI_DEV_MEM_CLOCK",          "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
      "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
      "DCGM_FI_DEV_ROW_REMAP_PENDING",  "DCGM_FI_DEV_ROW_REMAP_FAILURE",
      "DCGM_FI_DEV_XID_ERRORS",         "dtrain_gpu_xid_events_total",
      "dtrain_gpu_nvlink_tx_bytes_total", "dtrain_gpu_nvlink_rx_bytes_total",
      "dtrain_gpu_clock_event_active",
      "DCGM_FI_PROF_SM_ACTIVE",         "DCGM_FI_PROF_SM_OCCUPANCY",
      "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
      "DCGM_FI_PROF_PCIE_TX_BYTES",     "DCGM_FI_PROF_PCIE_RX_BYTES",
      "DCGM_FI_PROF_NVLINK_TX_BYTES",   "DCGM_FI_PROF_NVLINK_RX_BYTES",
  };
  return names;
}

const std::set<std::string>& trainingMetricNames() {
  static const std::set<std::string> names = {
      "dtrain_train_samples_per_second",
      "dtrain_train_step_seconds_bucket",
      "dtrain_train_step_seconds_sum",
      "dtrain_train_step_seconds_count",
      "dtrain_train_loss",
      "dtrain_train_allreduce_seconds_total",
      "dtrain_train_allreduce_bytes_total",
      "dtrain_train_overlap_ratio",
      "dtrain_train_data_wait_seconds_total",
      "dtrain_train_gpu_memory_bytes",
      "dtrain_train_restarts_total",
      "dtrain_rank_step_time_ratio",
  };
  return names;
}

std::set<std::string> metricNamesIn(const std::string& expr) {
  std::set<std::string> names;
  int braces = 0;                 // inside {...}: label names
  int parens = 0;
  int label_list_parens = -1;     // the depth of a by (...) list, or -1
  int label_values_parens = -1;   // the depth of label_values(...)'s arguments, or -1
  bool label_values_second = false;
  bool expect_label_list = false;  // a grouping keyword was just read
  for (size_t i = 0; i < expr.size();) {
    char c = expr[i];
    if (c == '{' || c == '}') {
      braces += c == '{' ? 1 : -1;
      ++i;
    } else if (c == '(' || c == ')') {
      if (c == '(') {
        ++parens;
        if (expect_label_list) label_list_parens = parens;
      } else {
        if (parens == label_list_parens) label_list_parens = -1;
        if (parens == label_values_parens) label_values_parens = -1;
        --parens;
      }
      expect_label_list = false;
      ++i;
    } else if (c == ',' && parens == label_values_parens && braces == 0) {
      label_values_second = true;
      ++i;
    } else if (c == '"' || c == '\'' || c == '`') {
      // PromQL strings: "..." and '...' take backslash escapes, `...` does not.
      for (++i; i < expr.size() && expr[i] != c; ++i) {
        if (expr[i] == '\\' && c != '`') ++i;
      }
      ++i;
    } else if (isIdentifierStart(c)) {
      size_t begin = i;
      while (i < expr.size() && isIdentifierChar(expr[i])) ++i;
      std::string word = expr.substr(begin, i - begin);
      const bool label = braces > 0 || label_list_parens >= 0 || (label_values_parens >= 0 && label_values_second);
      expect_label_list = word == "by" || word == "without" || word == "on" || word == "ignoring" ||
                          word == "group_left" || word == "group_right";
      if (word == "label_values") {
        label_values_parens = parens + 1;
        label_values_second = false;
      }
      if (!label && (word.starts_with("DCGM_FI_") || word.starts_with("dtrain_"))) names.insert(word);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < expr.size() && (isIdentifierChar(expr[i]) || expr[i] == '.')) ++i;  // 1e6, 5m, 0x1f
    } else {
      ++i;
    }
  }
  return names;
}

}  // namespace dtrain::testing
