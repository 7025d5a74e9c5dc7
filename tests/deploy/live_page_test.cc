// The exporter's live page in a real browser (headless Chromium) against a
// fake exporter: it draws every chart from api/history and api/gpus, lists
// the training jobs from api/jobs, and copes with an exporter that has no
// data and no api/jobs.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/command.h"
#include "exporter/live_page/live_page.h"
#include "fake_exporter_server.h"
#include "png_image.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;

constexpr int kGpus = 2;
constexpr int kHistorySeconds = 120;
constexpr int kWidth = 1280, kHeight = 900;

json gpuSample(int gpu, int second) {
  return {{"gpu", gpu},
          {"uuid", "GPU-0000000" + std::to_string(gpu) + "-test"},
          {"name", "NVIDIA H100 80GB HBM3"},
          {"util", 40 + (second * 7 + gpu * 30) % 60},
          {"mem_used_mib", 20000 + gpu * 8000 + second * 50},
          {"mem_total_mib", 81559},
          {"power_w", 250 + (second * 13 + gpu * 50) % 300},
          {"temp_c", 45 + gpu * 5 + second / 10}};
}

// A fake exporter with two minutes of history for kGpus GPUs, one training
// job of four ranks, and its hostname in api/status.
std::map<std::string, FakeResponse> busyExporter() {
  long now = static_cast<long>(std::time(nullptr));
  json samples = json::array();
  for (int s = 0; s < kHistorySeconds; ++s) {
    json gpus = json::array();
    for (int g = 0; g < kGpus; ++g) gpus.push_back(gpuSample(g, s));
    samples.push_back({{"t", now - kHistorySeconds + s}, {"gpus", gpus}});
  }
  json latest = json::array();
  for (int g = 0; g < kGpus; ++g) latest.push_back(gpuSample(g, kHistorySeconds));
  json jobs = json::array();
  for (int rank = 0; rank < 4; ++rank) {
    jobs.push_back({{"job", "resnet50-demo"}, {"rank", rank}, {"samples_per_s", 1000.0 + rank},
                    {"step_ms", 120.0 + rank}, {"t", now}});
  }
  return {{"/", {"text/html; charset=utf-8", dtrain::exporter::livePageHtml()}},
          {"/api/history", {"application/json", json{{"interval_s", 1}, {"samples", samples}}.dump()}},
          {"/api/gpus", {"application/json", latest.dump()}},
          {"/api/jobs", {"application/json", jobs.dump()}},
          {"/api/status", {"application/json", R"({"hostname":"gpu-node-07","nvml_error":null})"}}};
}

// An exporter that has sampled nothing yet, from before api/jobs existed.
std::map<std::string, FakeResponse> emptyExporter() {
  return {{"/", {"text/html; charset=utf-8", dtrain::exporter::livePageHtml()}},
          {"/api/history", {"application/json", R"({"interval_s":1,"samples":[]})"}},
          {"/api/gpus", {"application/json", "[]"}}};
}


// Runs headless Chromium on `url` with `action` (--dump-dom or
// --screenshot=FILE); returns stdout, and fails the test with Chromium's
// stderr when it does not finish in time.
std::string runChromium(const std::string& url, const std::string& action) {
  if (runCommand("command -v chromium").exit_code != 0) {
    ADD_FAILURE() << "chromium is not installed: run scripts/setup.sh (Debian package chromium)";
    return "";
  }
  std::string dir = makeTempDir("dtrain-live-page-test");
  // Its own profile per run, so parallel tests never share a profile lock.
  std::string command = "chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
                        "--disable-dev-shm-usage --no-first-run --hide-scrollbars --force-device-scale-factor=1 "
                        "--user-data-dir=" + dir + "/profile --window-size=" + std::to_string(kWidth) + "," +
                        std::to_string(kHeight) + " --virtual-time-budget=5000 " + action + " " + url +
                        " 2>" + dir + "/stderr";
  auto r = runCommand(command, 90);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << readFile(dir + "/stderr");
  runCommand("rm -rf " + dir + "/profile");
  return r.output;
}

std::optional<long> attribute(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(tag, m, std::regex(name + "=\"(\\d+)\""))) return std::nullopt;
  return std::stol(m[1]);
}

std::string bodyTag(const std::string& dom) {
  std::smatch m;
  return std::regex_search(dom, m, std::regex("<body[^>]*>")) ? m.str() : "";
}

struct ChartArea {
  std::string chart;
  long points = 0;
  int x = 0, y = 0, width = 0, height = 0;
};

std::vector<ChartArea> chartAreas(const std::string& dom) {
  std::vector<ChartArea> out;
  std::regex canvas("<canvas[^>]*>");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), canvas); it != std::sregex_iterator(); ++it) {
    std::string tag = it->str();
    ChartArea area;
    std::smatch m;
    if (std::regex_search(tag, m, std::regex("data-chart=\"([a-z_]+)\""))) area.chart = m[1];
    area.points = attribute(tag, "data-points").value_or(0);
    if (std::regex_search(tag, m, std::regex("data-rect=\"(\\d+),(\\d+),(\\d+),(\\d+)\""))) {
      area.x = std::stoi(m[1]);
      area.y = std::stoi(m[2]);
      area.width = std::stoi(m[3]);
      area.height = std::stoi(m[4]);
    }
    out.push_back(area);
  }
  return out;
}

// The page's own colours are greys; the series palette is saturated.
bool isSeriesColour(const Rgb& p) {
  int hi = std::max({p.r, p.g, p.b}), lo = std::min({p.r, p.g, p.b});
  return hi - lo > 60;
}

long seriesPixels(const PngImage& image, const ChartArea& area) {
  long n = 0;
  for (int y = area.y; y < std::min(area.y + area.height, image.height); ++y) {
    for (int x = area.x; x < std::min(area.x + area.width, image.width); ++x) n += isSeriesColour(image.at(x, y));
  }
  return n;
}

TEST(LivePageTest, IsSelfContained) {
  const std::string& html = dtrain::exporter::livePageHtml();
  ASSERT_GT(html.size(), 1000u);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* outside : {"http://", "https://", "<script src", "<link", "@import", "//cdn"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << "the page must not load anything from outside: " << outside;
  }
}

TEST(LivePageTest, DrawsEveryChartAndTheJobTable) {
  FakeExporterServer server(busyExporter());
  std::string dom = runChromium(server.url(), "--dump-dom");
  std::string body = bodyTag(dom);
  ASSERT_FALSE(body.empty()) << "no <body> in the dumped DOM:\n" << dom.substr(0, 2000);
  auto points = attribute(body, "data-points");
  auto charts = attribute(body, "data-charts");
  ASSERT_TRUE(points && charts) << "the page never drew a point in every chart: " << body;
  EXPECT_GE(*charts, 4);
  // The whole history, per GPU and chart, at the least.
  EXPECT_GE(*points, 4L * kGpus * kHistorySeconds) << body;
  auto areas = chartAreas(dom);
  ASSERT_GE(areas.size(), 4u);
  for (const auto& area : areas) EXPECT_GT(area.points, kHistorySeconds) << area.chart;

  EXPECT_NE(dom.find("resnet50-demo"), std::string::npos) << "job missing from the table";
  EXPECT_NE(dom.find("4006"), std::string::npos) << "the job's samples/s (ranks summed) missing";
  EXPECT_NE(dom.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(dom.find("dtrain exporter · gpu-node-07"), std::string::npos) << "hostname from api/status missing";
  auto paths = server.requestedPaths();
  for (const char* path : {"/", "/api/history", "/api/gpus", "/api/jobs"}) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), path), paths.end()) << path << " never requested";
  }
}

TEST(LivePageTest, EmptyExporterWithoutJobsApiDrawsNothingAndSaysSo) {
  FakeExporterServer server(emptyExporter());
  std::string dom = runChromium(server.url(), "--dump-dom");
  std::string body = bodyTag(dom);
  ASSERT_FALSE(body.empty()) << dom.substr(0, 2000);
  EXPECT_FALSE(attribute(body, "data-points")) << body;
  EXPECT_NE(dom.find("does not report training jobs"), std::string::npos) << "a 404 on api/jobs should show";
  EXPECT_NE(dom.find("The exporter reports no GPU."), std::string::npos);
}

TEST(LivePageTest, ScreenshotShowsSeriesInEveryChartArea) {
  std::string dir = makeTempDir("dtrain-live-page-test");
  std::string busy_png = dir + "/busy.png", empty_png = dir + "/empty.png";
  std::vector<ChartArea> areas;
  {
    FakeExporterServer server(busyExporter());
    // The same window size in both runs, so the rects from the DOM match the screenshot.
    areas = chartAreas(runChromium(server.url(), "--dump-dom"));
    runChromium(server.url(), "--screenshot=" + busy_png);
  }
  {
    FakeExporterServer server(emptyExporter());
    runChromium(server.url(), "--screenshot=" + empty_png);
  }
  ASSERT_GE(areas.size(), 4u);
  PngImage busy = readPng(busy_png), empty = readPng(empty_png);
  EXPECT_EQ(busy.width, kWidth);
  EXPECT_EQ(busy.height, kHeight);
  for (const auto& area : areas) {
    ASSERT_GT(area.width, 100) << area.chart;
    ASSERT_GT(area.height, 50) << area.chart;
    // Two GPU lines across two minutes of the window: hundreds of pixels.
    EXPECT_GT(seriesPixels(busy, area), 300) << area.chart << " is empty in the screenshot";
    EXPECT_LT(seriesPixels(empty, area), 10) << area.chart << " shows data the exporter never had";
  }
  runCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace dtrain::testing
