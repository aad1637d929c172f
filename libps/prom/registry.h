// Prometheus metrics of a daemon: instruments (counters, gauges, histograms) it records
// into on hot paths, collectors that read figures where they are already kept, and the
// text exposition format 0.0.4 that /metrics serves (libps/prom/endpoint.h).
//
// Hot paths: Counter::Add, Gauge::Set and Histogram::Observe are a few relaxed atomic
// operations, no lock and no allocation; keep a reference to the instrument (the
// registry owns it until it is destroyed). Getting an instrument and adding or removing
// a collector take the registry's lock: do it at set-up.
//
// Naming (https://prometheus.io/docs/practices/naming/): `pstrain_` prefix, base units
// (seconds, bytes), counters end in `_total`. Every sample carries the registry's
// constant labels (a daemon's: task_type and task_index) before its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps::prom {

// Label name → value pairs, in output order.
using Labels = std::vector<std::pair<std::string, std::string>>;

// [a-zA-Z_:][a-zA-Z0-9_:]* and [a-zA-Z_][a-zA-Z0-9_]* (no leading "__"), as Prometheus
// requires.
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);
// A label value inside double quotes: \ → \\, " → \", newline → \n.
std::string EscapeLabelValue(std::string_view value);
// A HELP text: \ → \\, newline → \n.
std::string EscapeHelp(std::string_view help);
// A sample value as Prometheus parses it: integers without exponent up to 2^53, else
// the shortest round-trip form; "+Inf", "-Inf", "NaN".
std::string FormatValue(double value);

// A monotonic count (events, bytes, seconds). Any thread.
class Counter {
 public:
  void Add(double n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down. Any thread.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double n) { value_.fetch_add(n, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Buckets of a histogram at one moment: cumulative[i] counts observations <= bounds[i];
// cumulative.back() (one more than bounds) is the +Inf bucket and equals count.
struct HistogramSnapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;
  double sum = 0;
  uint64_t count = 0;
};

// Request latencies and the like: 100 µs to 10 s, in seconds.
std::vector<double> LatencyBuckets();

// Observations counted into fixed buckets. Observe: any thread, lock-free.
class Histogram {
 public:
  // `bounds`: finite upper bounds, strictly ascending (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Not atomic as a whole: a concurrent Observe may be in the buckets but not yet in
  // sum. count always equals the +Inf bucket.
  HistogramSnapshot Snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], not cumulative
  std::atomic<double> sum_{0};
};

// Builds one exposition: families in the order first written, each with one HELP and
// one TYPE line and all its samples together (a family written from two places, e.g.
// an instrument and a collector, is still one group). Not thread-safe.
class Writer {
 public:
  explicit Writer(Labels constant_labels = {}) : constant_(std::move(constant_labels)) {}
  void Counter(std::string_view name, std::string_view help, double value,
               const Labels& labels = {});
  void Gauge(std::string_view name, std::string_view help, double value, const Labels& labels = {});
  // name_bucket{le=...} (cumulative, ending with le="+Inf"), name_sum, name_count.
  void Histogram(std::string_view name, std::string_view help, const HistogramSnapshot& h,
                 const Labels& labels = {});
  // The exposition text, every line ending in '\n'.
  std::string Text() const;

 private:
  struct Family {
    std::string name, help, type;
    std::string samples;  // complete lines
  };
  // The family `name`, created with `help` and `type`; null (the sample is dropped) when
  // it exists with another type or the name is not valid.
  Family* FamilyFor(std::string_view name, std::string_view help, std::string_view type);
  void Sample(Family& f, std::string_view suffix, const Labels& labels, const char* le,
              double value);

  Labels constant_;
  std::vector<Family> families_;
  std::unordered_map<std::string, size_t> index_;
};

// The metrics of one process. Thread-safe.
class Registry {
 public:
  explicit Registry(Labels constant_labels = {}) : constant_(std::move(constant_labels)) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The instrument `name` with `labels`: created on first use, the same one afterwards.
  // Valid until the registry is destroyed. Names and labels must be valid (asserted).
  prom::Counter& Counter(const std::string& name, const std::string& help,
                         const Labels& labels = {});
  prom::Gauge& Gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // `bounds` is used when the histogram is created.
  prom::Histogram& Histogram(const std::string& name, const std::string& help,
                             std::vector<double> bounds, const Labels& labels = {});

  // Removes its collector on destruction; when that returns, the collector is not
  // running and will not run again. Move-only.
  class Collection {
   public:
    Collection() = default;
    Collection(Registry* r, uint64_t id) : registry_(r), id_(id) {}
    Collection(Collection&& o) noexcept
        : registry_(std::exchange(o.registry_, nullptr)), id_(o.id_) {}
    Collection& operator=(Collection&& o) noexcept;
    ~Collection() { Reset(); }
    void Reset();
    // Keeps the collector for the life of the registry.
    void Release() { registry_ = nullptr; }

   private:
    Registry* registry_ = nullptr;
    uint64_t id_ = 0;
  };
  // `collect` writes figures kept elsewhere into each exposition, after the instruments,
  // in the order the collectors were added. It runs on the thread that renders (the
  // metrics server's), under the registry's lock: keep it short, take no lock a thread
  // holding it could wait on the registry with.
  [[nodiscard]] Collection AddCollector(std::function<void(Writer&)> collect);

  // The whole exposition.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Instrument {
    Kind kind;
    std::string name, help;
    Labels labels;
    std::unique_ptr<prom::Counter> counter;
    std::unique_ptr<prom::Gauge> gauge;
    std::unique_ptr<prom::Histogram> histogram;
  };
  // mu_ held: the instrument with this kind, name and labels, created if absent.
  Instrument& Find(Kind kind, const std::string& name, const std::string& help,
                   const Labels& labels);

  const Labels constant_;
  mutable std::mutex mu_;                                 // held by Render for the whole exposition
  std::vector<std::unique_ptr<Instrument>> instruments_;  // guarded by mu_
  std::map<uint64_t, std::function<void(Writer&)>> collectors_;  // guarded by mu_
  uint64_t next_id_ = 1;                                         // guarded by mu_
};

}  // namespace ps::prom
