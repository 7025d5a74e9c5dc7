// The exporter's live page (GET /): one self-contained HTML document that
// polls the exporter's api/history, api/gpus and api/jobs and draws them.
#pragma once

#include <string>

namespace dtrain::exporter {

// The page, UTF-8, served as text/html; charset=utf-8. Built from
// live_page.html at compile time.
const std::string& livePageHtml();

}  // namespace dtrain::exporter
