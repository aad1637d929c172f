#include "libps/prom/registry.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ps::prom {

namespace {
bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool ValidName(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}
}  // namespace

bool ValidMetricName(std::string_view name) { return ValidName(name, true); }
bool ValidLabelName(std::string_view name) {
  return ValidName(name, false) && name.substr(0, 2) != "__";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[400];
  // Plain decimals where they are short ("0.0001", not "1e-04"), else the shortest form.
  const double a = std::fabs(v);
  auto r = a >= 1e-6 && a < 1e15 ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                                 : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

// ---------------------------------------------------------------- Histogram

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  assert(std::adjacent_find(bounds_.begin(), bounds_.end(), std::greater_equal<double>()) ==
         bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // The first bucket whose bound is >= value (le: "less than or equal"); past the end: +Inf.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---------------------------------------------------------------- Writer

Writer::Family* Writer::FamilyFor(std::string_view name, std::string_view help,
                                  std::string_view type) {
  auto it = index_.find(std::string(name));
  if (it != index_.end()) {
    Family& f = families_[it->second];
    return f.type == type ? &f : nullptr;
  }
  if (!ValidMetricName(name)) return nullptr;
  index_.emplace(std::string(name), families_.size());
  families_.push_back(Family{std::string(name), std::string(help), std::string(type), {}});
  return &families_.back();
}

void Writer::Sample(Family& f, std::string_view suffix, const Labels& labels, const char* le,
                    double value) {
  std::string& out = f.samples;
  out += f.name;
  out += suffix;
  bool first = true;
  auto label = [&](std::string_view name, std::string_view value) {
    out += first ? '{' : ',';
    first = false;
    out += name;
    out += "=\"";
    out += EscapeLabelValue(value);
    out += '"';
  };
  for (const auto& [k, v] : constant_) label(k, v);
  for (const auto& [k, v] : labels) label(k, v);
  if (le != nullptr) label("le", le);
  if (!first) out += '}';
  out += ' ';
  out += FormatValue(value);
  out += '\n';
}

void Writer::Counter(std::string_view name, std::string_view help, double value,
                     const Labels& labels) {
  if (Family* f = FamilyFor(name, help, "counter")) Sample(*f, "", labels, nullptr, value);
}

void Writer::Gauge(std::string_view name, std::string_view help, double value,
                   const Labels& labels) {
  if (Family* f = FamilyFor(name, help, "gauge")) Sample(*f, "", labels, nullptr, value);
}

void Writer::Histogram(std::string_view name, std::string_view help, const HistogramSnapshot& h,
                       const Labels& labels) {
  Family* f = FamilyFor(name, help, "histogram");
  if (f == nullptr) return;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    Sample(*f, "_bucket", labels, FormatValue(h.bounds[i]).c_str(),
           static_cast<double>(h.cumulative[i]));
  }
  Sample(*f, "_bucket", labels, "+Inf", static_cast<double>(h.count));
  Sample(*f, "_sum", labels, nullptr, h.sum);
  Sample(*f, "_count", labels, nullptr, static_cast<double>(h.count));
}

std::string Writer::Text() const {
  std::string out;
  for (const Family& f : families_) {
    out += "# HELP " + f.name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    out += f.samples;
  }
  return out;
}

// ---------------------------------------------------------------- Registry

Registry::Instrument& Registry::Find(Kind kind, const std::string& name, const std::string& help,
                                     const Labels& labels) {
  assert(ValidMetricName(name));
  assert(std::all_of(labels.begin(), labels.end(),
                     [](const auto& l) { return ValidLabelName(l.first); }));
  for (auto& i : instruments_) {
    if (i->name == name && i->labels == labels) {
      assert(i->kind == kind);
      return *i;
    }
  }
  instruments_.push_back(std::make_unique<Instrument>(
      Instrument{kind, name, help, labels, nullptr, nullptr, nullptr}));
  return *instruments_.back();
}

prom::Counter& Registry::Counter(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  std::lock_guard lock(mu_);
  Instrument& i = Find(Kind::kCounter, name, help, labels);
  if (!i.counter) i.counter = std::make_unique<prom::Counter>();
  return *i.counter;
}

prom::Gauge& Registry::Gauge(const std::string& name, const std::string& help,
                             const Labels& labels) {
  std::lock_guard lock(mu_);
  Instrument& i = Find(Kind::kGauge, name, help, labels);
  if (!i.gauge) i.gauge = std::make_unique<prom::Gauge>();
  return *i.gauge;
}

prom::Histogram& Registry::Histogram(const std::string& name, const std::string& help,
                                     std::vector<double> bounds, const Labels& labels) {
  std::lock_guard lock(mu_);
  Instrument& i = Find(Kind::kHistogram, name, help, labels);
  if (!i.histogram) i.histogram = std::make_unique<prom::Histogram>(std::move(bounds));
  return *i.histogram;
}

Registry::Collection& Registry::Collection::operator=(Collection&& o) noexcept {
  if (this != &o) {
    Reset();
    registry_ = std::exchange(o.registry_, nullptr);
    id_ = o.id_;
  }
  return *this;
}

void Registry::Collection::Reset() {
  if (registry_ == nullptr) return;
  std::lock_guard lock(registry_->mu_);
  registry_->collectors_.erase(id_);
  registry_ = nullptr;
}

Registry::Collection Registry::AddCollector(std::function<void(Writer&)> collect) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  collectors_.emplace(id, std::move(collect));
  return Collection(this, id);
}

std::string Registry::Render() const {
  std::lock_guard lock(mu_);
  Writer w(constant_);
  for (const auto& i : instruments_) {
    switch (i->kind) {
      case Kind::kCounter:
        w.Counter(i->name, i->help, i->counter->value(), i->labels);
        break;
      case Kind::kGauge:
        w.Gauge(i->name, i->help, i->gauge->value(), i->labels);
        break;
      case Kind::kHistogram:
        w.Histogram(i->name, i->help, i->histogram->Snapshot(), i->labels);
        break;
    }
  }
  for (const auto& [id, collect] : collectors_) collect(w);
  return w.Text();
}

}  // namespace ps::prom
