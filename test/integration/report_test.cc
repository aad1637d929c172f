// `pstrain report` end to end: synthetic metrics in a temp model dir, the built `pstrain`
// writes the page, and headless Chromium renders it. Checks that the browser's DOM holds
// the four plots with every data point, and that a screenshot was painted.
//
// Needs Chromium (Debian package `chromium`; scripts/setup.sh installs it when
// PSTRAIN_WITH_TEST_TOOLS=1). PSTRAIN_CHROMIUM overrides the browser's path.
// PSTRAIN_REPORT_KEEP=DIR copies the page and the screenshot there for a human to look at.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "launcher/subprocess.h"

namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pstrain-report-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + what.size()))
    ++n;
  return n;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// build/test/integration/integration_report -> build/launcher/pstrain; PSTRAIN_BUILD_DIR overrides.
std::string PstrainBinary() {
  std::error_code ec;
  fs::path build = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path().parent_path();
  if (const char* dir = std::getenv("PSTRAIN_BUILD_DIR")) build = dir;
  fs::path p = build / "launcher" / "pstrain";
  if (!fs::exists(p, ec)) FAIL("pstrain not built at " << p.string() << " (set PSTRAIN_BUILD_DIR)");
  return p.string();
}

std::string FindChromium() {
  if (const char* c = std::getenv("PSTRAIN_CHROMIUM")) return c;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      fs::path p = fs::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  FAIL(
      "headless Chromium is needed for this test and was not found on PATH (install the Debian package "
      "`chromium`, e.g. PSTRAIN_WITH_TEST_TOOLS=1 scripts/setup.sh, or set PSTRAIN_CHROMIUM)");
  return "";
}

struct Run {
  int status = -1;
  std::string output;
};

// Runs argv (or a shell command line when shell is set), up to `timeout`; output merged.
Run RunCommand(std::vector<std::string> argv, std::chrono::seconds timeout) {
  Run run;
  std::mutex mu;
  ps::launcher::SpawnOptions options;
  options.argv = std::move(argv);
  options.on_line = [&](const std::string& line) {
    std::lock_guard lock(mu);
    run.output += line + "\n";
  };
  auto child = ps::launcher::Subprocess::Spawn(std::move(options));
  REQUIRE(child.ok());
  auto status = (*child)->WaitFor(timeout);
  if (!status) {
    (*child)->Signal(SIGKILL);
    (*child)->Wait();
    FAIL("timed out after " << timeout.count() << " s: " << run.output);
  }
  run.status = *status;
  return run;
}

// Chromium with everything that could reach the network or a GPU turned off.
std::vector<std::string> ChromiumArgv(const std::string& chromium, const std::string& profile) {
  return {chromium,
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--disable-dev-shm-usage",
          "--hide-scrollbars",
          "--user-data-dir=" + profile};
}

std::string Join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += ShellQuote(a);
  }
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 3]));
}

// An 8-bit RGB or RGBA PNG (what Chromium's --screenshot writes), decoded to RGB rows.
struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height * width * 3]
  const uint8_t* At(uint32_t x, uint32_t y) const {
    return &rgb[(static_cast<size_t>(y) * width + x) * 3];
  }
};

Image DecodePng(const std::string& png) {
  REQUIRE(png.size() > 33);
  REQUIRE(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  Image img;
  int color_type = -1;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = BigEndian32(png, at);
    const std::string type = png.substr(at + 4, 4);
    REQUIRE(at + 12 + len <= png.size());
    if (type == "IHDR") {
      img.width = BigEndian32(png, at + 8);
      img.height = BigEndian32(png, at + 12);
      REQUIRE(static_cast<int>(png[at + 16]) == 8);  // bit depth
      color_type = static_cast<unsigned char>(png[at + 17]);
      REQUIRE(static_cast<int>(png[at + 20]) == 0);  // not interlaced
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  REQUIRE((color_type == 2 || color_type == 6));
  const size_t bpp = color_type == 6 ? 4 : 3;
  const size_t stride = img.width * bpp;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()),
                     idat.size()) == Z_OK);
  REQUIRE(raw_len == raw.size());
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          FAIL("PNG row filter " << int(filter));
      }
      cur[i] = static_cast<uint8_t>(in[i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x) {
      for (int k = 0; k < 3; ++k)
        img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + k] = cur[x * bpp + k];
    }
    std::swap(prev, cur);
  }
  return img;
}

// Pixels of a series color (saturated: not the grays of axes, grid, text and background)
// inside the data area (x 68..520, y 56..270, svg_plot.h) of the plot whose top-left
// corner is at (0, top).
int DataPixels(const Image& img, uint32_t top) {
  int n = 0;
  for (uint32_t y = top + 57; y < top + 270 && y < img.height; ++y) {
    for (uint32_t x = 69; x < 520 && x < img.width; ++x) {
      const uint8_t* p = img.At(x, y);
      const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
      if (hi - lo >= 60) ++n;
    }
  }
  return n;
}

// Every <svg class="plot">...</svg> of a page, in order.
std::vector<std::string> Plots(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg class=\"plot\""); at != std::string::npos;
       at = html.find("<svg class=\"plot\"", at + 1)) {
    const size_t end = html.find("</svg>", at);
    REQUIRE(end != std::string::npos);
    out.push_back(html.substr(at, end + 6 - at));
  }
  return out;
}

constexpr int kPlotPitch = 330;  // px between the plots stacked on the screenshot page

// A page with `plots` stacked at (0, i * kPlotPitch), screenshot by Chromium, decoded.
Image ScreenshotPlots(const std::string& chromium, const std::string& dir, const std::string& name,
                      const std::vector<std::string>& plots) {
  std::string page =
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0;background:#fafafa}"
      "div{position:absolute;left:0}</style></head><body>";
  for (size_t i = 0; i < plots.size(); ++i) {
    page += "<div style=\"top:" + std::to_string(i * kPlotPitch) + "px\">" + plots[i] + "</div>";
  }
  page += "</body></html>";
  WriteFile(dir + "/" + name + ".html", page);
  const std::string png = dir + "/" + name + ".png";
  std::vector<std::string> shot = ChromiumArgv(chromium, dir + "/profile-" + name);
  shot.push_back("--force-device-scale-factor=1");
  shot.push_back("--screenshot=" + png);
  shot.push_back("--window-size=560," + std::to_string(plots.size() * kPlotPitch));
  shot.push_back("file://" + dir + "/" + name + ".html");
  Run run = RunCommand(shot, std::chrono::seconds(180));
  INFO(run.output);
  REQUIRE(run.status == 0);
  Image img = DecodePng(ReadFile(png));
  REQUIRE(img.width == 560);
  REQUIRE(img.height == plots.size() * kPlotPitch);
  return img;
}

// Points in each <polyline class="series"> of the DOM, in document order.
std::vector<size_t> SeriesSizes(const std::string& dom) {
  std::vector<size_t> sizes;
  std::regex re("<polyline[^>]*class=\"series\"[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), re); it != std::sregex_iterator();
       ++it) {
    std::string pts = (*it)[1];
    sizes.push_back(pts.empty() ? 0 : static_cast<size_t>(Count(pts, ",")));
  }
  return sizes;
}

constexpr int kTrainLines = 20;

void WriteMetrics(const std::string& model_dir) {
  std::ostringstream train;
  for (int i = 1; i <= kTrainLines; ++i) {
    int step = 100 * i;
    double loss = 2.3 * std::exp(-0.15 * i) + 0.2;
    double acc = 0.95 - 0.8 * std::exp(-0.2 * i);
    double eps = 30000 + 4000 * std::sin(0.7 * i);
    train << "{\"step\":" << step << ",\"total_steps\":2000,\"loss\":" << loss
          << ",\"accuracy\":" << acc << ",\"examples_per_sec\":" << eps
          << ",\"elapsed_sec\":" << 0.5 * i << ",\"unix_time\":" << 1700000000 + i
          << ",\"workers\":[";
    for (int w = 0; w < 2; ++w) {
      const double pull = 0.2 + 0.05 * std::sin(0.3 * i + w);
      train << (w ? "," : "") << "{\"task\":\"worker:" << w
            << "\",\"state\":\"running\",\"steps\":" << 50 * i
            << ",\"step_ms\":" << 12 + w + 0.5 * std::cos(i)
            << ",\"data_frac\":0.05,\"pull_frac\":" << pull
            << ",\"compute_frac\":" << 0.55 - pull + 0.2 << ",\"push_frac\":0.2}";
    }
    train << "],\"ps\":[";
    for (int p = 0; p < 2; ++p) {
      // From step 1,500 on ps:0 takes 4x ps:1's requests: a hot-ps hint.
      const double req = (p == 0 && i >= 15 ? 4 : 1) * (800 + 50 * std::sin(0.5 * i));
      train << (p ? "," : "") << "{\"task\":\"ps:" << p
            << "\",\"address\":\"127.0.0.1:1\",\"state\":\"ok\","
            << "\"requests_per_s\":" << req << ",\"bytes_in_per_s\":" << req * 4000
            << ",\"bytes_out_per_s\":" << req * 4000 << ",\"max_queue_depth\":" << (i + p) % 3
            << "}";
    }
    train << "]}\n";
    if (i % 5 == 0) {
      train << "{\"checkpoint\":{\"step\":" << step
            << ",\"final\":" << (i == kTrainLines ? "true" : "false")
            << ",\"bytes\":1048576,\"seconds\":0.03}}\n";
    }
    if (i == 8) {
      train << "{\"event\":{\"kind\":\"ps_lost\",\"task\":\"ps:1\",\"step\":" << step
            << ",\"detail\":\"connection reset\"}}\n";
      train << "{\"event\":{\"kind\":\"ps_back\",\"task\":\"ps:1\",\"step\":" << step << "}}\n";
    }
  }
  train
      << "{\"final_eval\":{\"step\":2000,\"examples\":10000,\"accuracy\":0.9012,\"loss\":0.31,\"auc\":0.955}}\n";
  WriteFile(model_dir + "/train_metrics.jsonl", train.str());
  std::ostringstream eval;
  for (int i = 1; i <= 4; ++i) {
    eval << "{\"step\":" << 500 * i << ",\"accuracy\":" << 0.6 + 0.07 * i
         << ",\"loss\":" << 1.0 - 0.15 * i << ",\"auc\":" << 0.7 + 0.06 * i
         << ",\"examples\":10000}\n";
  }
  WriteFile(model_dir + "/eval/metrics.jsonl", eval.str());
}

}  // namespace

TEST_CASE("pstrain report renders in headless Chromium") {
  const std::string pstrain = PstrainBinary();
  const std::string chromium = FindChromium();
  TempDir tmp;
  const std::string model_dir = tmp / "model";
  WriteMetrics(model_dir);

  // The default output: MODEL_DIR/report.html, its path printed.
  Run report = RunCommand({pstrain, "report", model_dir}, std::chrono::seconds(60));
  INFO(report.output);
  REQUIRE(report.status == 0);
  const std::string page = model_dir + "/report.html";
  CHECK(report.output == page + "\n");
  REQUIRE(fs::exists(page));
  // --out elsewhere; a missing model dir is exit 1; no MODEL_DIR is a usage error.
  REQUIRE(RunCommand({pstrain, "report", model_dir, "--out", tmp / "other.html"},
                     std::chrono::seconds(60))
              .status == 0);
  CHECK(ReadFile(tmp / "other.html") == ReadFile(page));
  CHECK(RunCommand({pstrain, "report", tmp / "nope"}, std::chrono::seconds(60)).status == 1);
  CHECK(RunCommand({pstrain, "report"}, std::chrono::seconds(60)).status == 2);

  // The browser's DOM after parsing and layout.
  const std::string dom_file = tmp / "dom.html";
  std::vector<std::string> dump = ChromiumArgv(chromium, tmp / "profile-dom");
  dump.push_back("--dump-dom");
  dump.push_back("file://" + page);
  Run dom_run = RunCommand({"/bin/sh", "-c", Join(dump) + " > " + ShellQuote(dom_file)},
                           std::chrono::seconds(180));
  INFO(dom_run.output);
  REQUIRE(dom_run.status == 0);
  const std::string dom = ReadFile(dom_file);
  REQUIRE(!dom.empty());
  // The four metric plots, a step-time plot per worker, three ps plots.
  CHECK(Count(dom, "<svg") == 9);
  CHECK(Count(dom, "no data") == 0);
  CHECK(Count(dom, "skipped") == 0);  // our own checkpoint and event lines are read, not skipped
  // loss: train 20 + eval 4 (final at step 2000 is the evaluator's point);
  // train accuracy 20; evaluation: accuracy 4, AUC 4; throughput 20; then ps requests,
  // bytes and queue depth, 20 points for each of 2 ps.
  CHECK(SeriesSizes(dom) == std::vector<size_t>{kTrainLines, 4, kTrainLines, 4, 4, kTrainLines,
                                                kTrainLines, kTrainLines, kTrainLines, kTrainLines,
                                                kTrainLines, kTrainLines});
  CHECK(Count(dom, "class=\"area\"") == 8);  // 4 parts x 2 workers
  // Markers on each of the 9 plots: 4 checkpoints, ps:1 lost and back.
  CHECK(Count(dom, "class=\"marker\"") == 9 * 6);
  CHECK(Count(dom, "hint: ps:0 carries more load") == 1);
  CHECK(Count(dom, "<td>1,500</td><td>2,000</td><td>6</td>") ==
        1);  // fired at 1,500, last at 2,000
  CHECK(Count(dom, "Training loss") >= 1);
  CHECK(Count(dom, "Throughput") >= 1);

  // A screenshot: a PNG of the requested size with real content.
  const std::string png = tmp / "report.png";
  std::vector<std::string> shot = ChromiumArgv(chromium, tmp / "profile-shot");
  shot.push_back("--screenshot=" + png);
  shot.push_back("--window-size=1200,1600");
  shot.push_back("file://" + page);
  Run shot_run = RunCommand(shot, std::chrono::seconds(180));
  INFO(shot_run.output);
  REQUIRE(shot_run.status == 0);
  REQUIRE(fs::exists(png));
  const std::string bytes = ReadFile(png);
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(bytes.compare(12, 4, "IHDR") == 0);
  CHECK(BigEndian32(bytes, 16) == 1200);
  CHECK(BigEndian32(bytes, 20) == 1600);
  // A blank 1200x1600 page compresses to a few KB; four plots with text do not.
  CHECK(bytes.size() > 10 * 1024);

  // Every plot, drawn by the browser, has series pixels inside its data area (markers
  // aside); the
  // checker itself rejects a plot without data and one whose points fell off the area.
  // Markers are left out here: only data may count.
  std::vector<std::string> plots = Plots(ReadFile(page));
  REQUIRE(plots.size() == 9);
  for (auto& p : plots) p = std::regex_replace(p, std::regex("<g class=\"marker\".*?</g>"), "");
  std::vector<std::string> broken = {plots[0], plots[0]};
  // "no data": the same plot with its data left out.
  broken[0] =
      "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"540\" height=\"320\">"
      "<rect x=\"0\" y=\"0\" width=\"540\" height=\"320\" fill=\"#ffffff\"/>"
      "<rect x=\"68\" y=\"56\" width=\"452\" height=\"214\" fill=\"#f6f6f6\" stroke=\"#cccccc\"/>"
      "<text x=\"294\" y=\"163\">no data</text></svg>";
  // Broken coordinates: every point moved far outside the viewBox.
  broken[1] = std::regex_replace(plots[0], std::regex("points=\"[^\"]*\""),
                                 "points=\"9000,9000 9100,9100\"");
  broken[1] = std::regex_replace(broken[1], std::regex("<circle[^>]*>"), "");
  const Image good = ScreenshotPlots(chromium, tmp.path(), "plots", plots);
  for (size_t i = 0; i < plots.size(); ++i) {
    INFO("plot " << i << ": " << plots[i].substr(0, 80));
    CHECK(DataPixels(good, static_cast<uint32_t>(i * kPlotPitch)) >= 300);
  }
  const Image bad = ScreenshotPlots(chromium, tmp.path(), "broken", broken);
  CHECK(DataPixels(bad, 0) == 0);
  CHECK(DataPixels(bad, kPlotPitch) == 0);

  if (const char* keep = std::getenv("PSTRAIN_REPORT_KEEP")) {
    fs::create_directories(keep);
    fs::copy_file(page, fs::path(keep) / "report.html", fs::copy_options::overwrite_existing);
    fs::copy_file(png, fs::path(keep) / "report.png", fs::copy_options::overwrite_existing);
    fs::copy_file(tmp / "plots.png", fs::path(keep) / "plots.png",
                  fs::copy_options::overwrite_existing);
  }
}
