#include "libps/data/readers.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

namespace ps::data {
namespace {

// Larger inflated contents are refused rather than exhausting memory.
constexpr uint64_t kMaxInflatedBytes = uint64_t{16} << 30;

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return IoError(path + ": cannot determine file size");
  in.seekg(0, std::ios::beg);
  std::string data(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(data.data(), size)) return IoError(path + ": read failed");
  return data;
}

Result<std::string> Inflate(const std::string& path, const std::string& in) {
  std::string out;
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return Internal(path + ": gzip: inflateInit2 failed");
  size_t consumed = 0;  // compressed bytes handed to zlib so far
  const auto fail = [&](const std::string& what) {
    inflateEnd(&zs);
    uint64_t offset = consumed - zs.avail_in;
    return DataLoss(path + ": gzip: " + what + " at compressed offset " + std::to_string(offset));
  };
  for (;;) {
    if (zs.avail_in == 0 && consumed < in.size()) {
      size_t chunk = std::min<size_t>(in.size() - consumed, size_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
      zs.avail_in = static_cast<uInt>(chunk);
      consumed += chunk;
    }
    if (out.size() >= kMaxInflatedBytes) return fail("inflated size exceeds limit");
    size_t have = out.size();
    size_t room = std::max<size_t>(size_t{1} << 16, std::min<size_t>(have, size_t{1} << 28));
    out.resize(have + room);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(room);
    int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + room - zs.avail_out);
    if (rc == Z_STREAM_END) {
      uint64_t pos = consumed - zs.avail_in;
      if (pos == in.size()) break;
      // Another gzip member follows (as `cat a.gz b.gz` produces) or garbage.
      if (in.size() - pos >= 2 && static_cast<uint8_t>(in[pos]) == 0x1f &&
          static_cast<uint8_t>(in[pos + 1]) == 0x8b) {
        if (inflateReset(&zs) != Z_OK) return fail("inflateReset failed");
        continue;
      }
      return fail(std::to_string(in.size() - pos) + " trailing bytes after the gzip stream");
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && consumed == in.size()) {
      return fail("truncated stream");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return fail(zs.msg != nullptr ? std::string(zs.msg) : "inflate error " + std::to_string(rc));
    }
  }
  inflateEnd(&zs);
  return out;
}

uint32_t BigEndian32(const std::string& d, size_t offset) {
  const auto* p = reinterpret_cast<const uint8_t*>(d.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct IdxHeader {
  std::vector<uint64_t> dims;
  size_t data_offset = 0;
};

// Checks magic (unsigned byte data, `ndims` dimensions), reads dims and checks that the
// data after the header is exactly product(dims) bytes.
Result<IdxHeader> ParseIdxHeader(const std::string& path, const std::string& d, int ndims,
                                 const char* what) {
  const uint32_t want_magic = 0x00000800u | static_cast<uint32_t>(ndims);
  if (d.size() < 4) {
    return DataLoss(path + ": offset 0: truncated: expected 4 bytes of magic, got " +
                    std::to_string(d.size()));
  }
  uint32_t magic = BigEndian32(d, 0);
  if (magic != want_magic) {
    return DataLoss(path + ": offset 0: bad magic " + Hex32(magic) + ", expected " +
                    Hex32(want_magic) + " (idx" + std::to_string(ndims) + " unsigned bytes)");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (d.size() < header) {
    return DataLoss(path + ": offset 4: truncated: expected " + std::to_string(header - 4) +
                    " bytes of dimensions, got " + std::to_string(d.size() - 4));
  }
  IdxHeader h;
  h.data_offset = header;
  uint64_t total = 1;  // saturates: anything that large is truncated anyway
  for (int i = 0; i < ndims; ++i) {
    uint64_t dim = BigEndian32(d, 4 + 4 * static_cast<size_t>(i));
    if (dim == 0) {
      return DataLoss(path + ": offset " + std::to_string(4 + 4 * i) + ": dimension " +
                      std::to_string(i) + " is 0");
    }
    h.dims.push_back(dim);
    total = total > std::numeric_limits<uint64_t>::max() / dim
                ? std::numeric_limits<uint64_t>::max()
                : total * dim;
  }
  const uint64_t got = d.size() - header;
  if (total > got) {
    return DataLoss(path + ": offset " + std::to_string(header) + ": truncated: expected " +
                    std::to_string(total) + " bytes of " + what +
                    ", got " + std::to_string(got));
  }
  if (total < got) {
    return DataLoss(path + ": offset " + std::to_string(header + total) +
                    ": " + std::to_string(got - total) +
                    " trailing bytes after the " + what);
  }
  return h;
}

bool ParseDouble(std::string_view s, double* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// An integral label: "1", "+1", "-1", "1.0" are accepted.
bool ParseLabel(std::string_view s, int64_t* out) {
  if (ParseInt(s, out)) return true;
  double d;
  if (!ParseDouble(s, &d) || std::floor(d) != d || std::fabs(d) > 1e15) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

// Maps raw integer labels to 0..classes-1 (see readers.h); where[i] locates label i
// ("file:line") for error messages.
Result<int> MapLabels(const std::vector<int64_t>& raw, const std::vector<std::string>& where,
                      int classes, std::vector<float>* labels) {
  labels->resize(raw.size());
  bool has_minus_one = std::find(raw.begin(), raw.end(), -1) != raw.end();
  if (classes == 0) {
    if (has_minus_one) {
      classes = 2;
    } else {
      int64_t max = 0;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] < 0) {
          return InvalidArgument(where[i] + ": label " + std::to_string(raw[i]) +
                                 " is negative");
        }
        max = std::max(max, raw[i]);
      }
      if (max >= std::numeric_limits<int>::max()) {
        return InvalidArgument("label " + std::to_string(max) + " is too large");
      }
      classes = std::max<int>(2, static_cast<int>(max) + 1);
    }
  }
  for (size_t i = 0; i < raw.size(); ++i) {
    int64_t v = raw[i];
    if (has_minus_one && classes == 2) {
      if (v != -1 && v != 1 && v != 0) {
        return InvalidArgument(where[i] + ": label " + std::to_string(v) +
                               " in a file with -1 labels; expected -1 or +1");
      }
      (*labels)[i] = v == 1 ? 1.0f : 0.0f;
      continue;
    }
    if (v < 0 || v >= classes) {
      return InvalidArgument(where[i] + ": label " + std::to_string(v) + " is out of range for " +
                             std::to_string(classes) + " classes");
    }
    (*labels)[i] = static_cast<float>(v);
  }
  return classes;
}

// Splits text into lines; calls fn(line_number (1-based), line without '\n' / '\r').
template <typename Fn>
Status ForEachLine(const std::string& text, Fn fn) {
  size_t pos = 0;
  int64_t line_no = 0;
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 BOM
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    PS_RETURN_IF_ERROR(fn(++line_no, line));
    pos = end + 1;
  }
  return Status::Ok();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct CsvField {
  std::string text;
  int64_t column = 0;  // 1-based character column where the field starts
};

Status SplitCsvLine(std::string_view line, char delim, const std::string& where,
                    std::vector<CsvField>* fields) {
  fields->clear();
  size_t i = 0;
  for (;;) {
    CsvField f;
    f.column = static_cast<int64_t>(i) + 1;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            f.text.push_back('"');
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        f.text.push_back(line[i++]);
      }
      if (!closed) {
        return InvalidArgument(where + ":" + std::to_string(f.column) + ": unterminated quote");
      }
      if (i < line.size() && line[i] != delim) {
        return InvalidArgument(where + ":" + std::to_string(i + 1) +
                               ": unexpected character after closing quote");
      }
    } else {
      size_t end = line.find(delim, i);
      if (end == std::string_view::npos) end = line.size();
      f.text.assign(Trim(line.substr(i, end - i)));
      i = end;
    }
    fields->push_back(std::move(f));
    if (i >= line.size()) break;
    ++i;  // delimiter
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadMaybeGzipFile(const std::string& path) {
  Result<std::string> raw = ReadWholeFile(path);
  if (!raw.ok()) return raw.status();
  const std::string& bytes = raw.value();
  if (bytes.size() >= 2 && std::memcmp(bytes.data(), "\x1f\x8b", 2) == 0) {
    return Inflate(path, bytes);
  }
  return raw;
}

Result<ExampleTable> ReadIdx(const std::string& images_path, const std::string& labels_path,
                             int classes) {
  PS_ASSIGN_OR_RETURN(std::string images, ReadMaybeGzipFile(images_path));
  PS_ASSIGN_OR_RETURN(IdxHeader ih, ParseIdxHeader(images_path, images, 3, "pixels"));
  PS_ASSIGN_OR_RETURN(std::string labels, ReadMaybeGzipFile(labels_path));
  PS_ASSIGN_OR_RETURN(IdxHeader lh, ParseIdxHeader(labels_path, labels, 1, "labels"));
  if (ih.dims[0] != lh.dims[0]) {
    return DataLoss(labels_path + ": offset 4: count mismatch: " + std::to_string(lh.dims[0]) +
                    " labels for " + std::to_string(ih.dims[0]) + " images in " + images_path);
  }
  ExampleTable t;
  const auto n = static_cast<int64_t>(ih.dims[0]);
  t.info.examples = n;
  t.info.dense_dim = static_cast<int64_t>(ih.dims[1] * ih.dims[2]);
  int max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    int v = static_cast<uint8_t>(labels[lh.data_offset + static_cast<size_t>(i)]);
    if (classes > 0 && v >= classes) {
      return DataLoss(labels_path + ": offset " + std::to_string(lh.data_offset + i) + ": label " +
                      std::to_string(v) + " is out of range for " + std::to_string(classes) +
                      " classes");
    }
    max_label = std::max(max_label, v);
  }
  t.info.classes = classes > 0 ? classes : std::max(2, max_label + 1);
  t.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t.labels[static_cast<size_t>(i)] =
        static_cast<float>(static_cast<uint8_t>(labels[lh.data_offset + static_cast<size_t>(i)]));
  }
  t.dense_u8.assign(images.begin() + static_cast<ptrdiff_t>(ih.data_offset), images.end());
  PS_RETURN_IF_ERROR(t.Validate());
  return t;
}

Result<ExampleTable> ReadLibSvm(const std::string& path, const LibSvmOptions& options) {
  if (options.num_features <= 0) {
    return InvalidArgument(path + ": num_features must be positive, got " +
                           std::to_string(options.num_features));
  }
  const std::vector<int64_t>& fo = options.field_offsets;
  for (size_t i = 0; i < fo.size(); ++i) {
    if ((i == 0 && fo[0] != 0) || (i > 0 && fo[i] <= fo[i - 1]) || fo[i] >= options.num_features) {
      return InvalidArgument(path + ": field_offsets must start at 0, ascend strictly and stay "
                             "below num_features " + std::to_string(options.num_features) +
                             "; entry " + std::to_string(i) + " is " + std::to_string(fo[i]));
    }
  }
  PS_ASSIGN_OR_RETURN(std::string text, ReadMaybeGzipFile(path));
  ExampleTable t;
  SparseColumn col;
  col.offsets.push_back(0);
  std::vector<int64_t> raw_labels;
  std::vector<std::string> where;
  const int64_t shift = options.zero_based ? 0 : 1;
  PS_RETURN_IF_ERROR(ForEachLine(text, [&](int64_t line_no, std::string_view line) -> Status {
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::string at = path + ":" + std::to_string(line_no);
    size_t pos = 0;
    bool first = true;
    while (pos < line.size()) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
      if (pos >= line.size()) break;
      size_t end = pos;
      while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
      std::string_view tok = line.substr(pos, end - pos);
      pos = end;
      if (first) {
        first = false;
        int64_t label;
        if (!ParseLabel(tok, &label)) {
          return InvalidArgument(at + ": bad label '" + std::string(tok) + "'");
        }
        raw_labels.push_back(label);
        where.push_back(at);
        continue;
      }
      if (tok.starts_with("qid:")) continue;  // ranking group ids carry no feature
      size_t colon = tok.find(':');
      int64_t id;
      double value;
      if (colon == std::string_view::npos || !ParseInt(tok.substr(0, colon), &id) ||
          !ParseDouble(tok.substr(colon + 1), &value)) {
        return InvalidArgument(at + ": bad feature '" + std::string(tok) + "'");
      }
      if (id - shift < 0 || id - shift >= options.num_features) {
        return InvalidArgument(at + ": feature id " + std::to_string(id) +
                               " is out of range [" + std::to_string(shift) + ", " +
                               std::to_string(options.num_features - 1 + shift) + "]" +
                               (options.zero_based ? "" : " (ids are 1-based)"));
      }
      col.ids.push_back(id - shift);
      col.values.push_back(static_cast<float>(value));
    }
    if (!first) col.offsets.push_back(static_cast<int64_t>(col.ids.size()));
    return Status::Ok();
  }));
  PS_ASSIGN_OR_RETURN(t.info.classes, MapLabels(raw_labels, where, options.classes, &t.labels));
  t.info.examples = static_cast<int64_t>(raw_labels.size());
  if (options.field_offsets.empty()) {
    t.info.field_names = {"features"};
    t.info.field_vocab_sizes = {options.num_features};
    t.sparse.push_back(std::move(col));
  } else {
    const std::vector<int64_t>& fo = options.field_offsets;
    const size_t k = fo.size();
    for (size_t f = 0; f < k; ++f) {
      t.info.field_names.push_back("field_" + std::to_string(f));
      t.info.field_vocab_sizes.push_back((f + 1 < k ? fo[f + 1] : options.num_features) - fo[f]);
    }
    t.sparse.resize(k);
    for (SparseColumn& c : t.sparse) {
      c.offsets.reserve(col.offsets.size());
      c.offsets.push_back(0);
    }
    for (size_t e = 0; e + 1 < col.offsets.size(); ++e) {
      for (auto i = static_cast<size_t>(col.offsets[e]); i < static_cast<size_t>(col.offsets[e + 1]);
           ++i) {
        const int64_t id = col.ids[i];
        const auto f = static_cast<size_t>(std::upper_bound(fo.begin(), fo.end(), id) - fo.begin() - 1);
        t.sparse[f].ids.push_back(id - fo[f]);
        t.sparse[f].values.push_back(col.values[i]);
      }
      for (SparseColumn& c : t.sparse) c.offsets.push_back(static_cast<int64_t>(c.ids.size()));
    }
  }
  PS_RETURN_IF_ERROR(t.Validate());
  return t;
}

Result<ExampleTable> ReadCsv(const std::string& path, const CsvOptions& options) {
  PS_ASSIGN_OR_RETURN(std::string text, ReadMaybeGzipFile(path));
  std::map<std::string, size_t, std::less<>> column_index;
  size_t num_columns = 0;
  size_t label_col = 0;
  std::vector<size_t> dense_cols;
  std::vector<size_t> cat_cols;
  std::vector<std::vector<std::string>> cat_values(options.categorical.size());
  std::vector<int64_t> raw_labels;
  std::vector<std::string> where;
  std::vector<float> dense;
  std::vector<float> labels_from_vocab;
  std::optional<Vocabulary> label_vocab;
  if (options.label_vocabulary) {
    auto v = Vocabulary::Create(*options.label_vocabulary, 0);
    if (!v.ok()) return v.status().WithContext(path + ": label vocabulary");
    label_vocab = std::move(*v);
  }
  bool header_done = false;
  std::vector<CsvField> fields;
  PS_RETURN_IF_ERROR(ForEachLine(text, [&](int64_t line_no, std::string_view line) -> Status {
    const std::string at = path + ":" + std::to_string(line_no);
    if (!header_done) {
      header_done = true;
      PS_RETURN_IF_ERROR(SplitCsvLine(line, options.delimiter, at, &fields));
      num_columns = fields.size();
      for (size_t i = 0; i < fields.size(); ++i) {
        if (!column_index.emplace(fields[i].text, i).second) {
          return InvalidArgument(at + ":" + std::to_string(fields[i].column) +
                                 ": duplicate column '" + fields[i].text + "'");
        }
      }
      auto find = [&](const std::string& name, size_t* out) -> Status {
        auto it = column_index.find(name);
        if (it == column_index.end()) {
          return InvalidArgument(at + ": no column '" + name + "' in the header");
        }
        *out = it->second;
        return Status::Ok();
      };
      PS_RETURN_IF_ERROR(find(options.label, &label_col));
      dense_cols.resize(options.dense.size());
      for (size_t i = 0; i < options.dense.size(); ++i) {
        PS_RETURN_IF_ERROR(find(options.dense[i], &dense_cols[i]));
      }
      cat_cols.resize(options.categorical.size());
      for (size_t i = 0; i < options.categorical.size(); ++i) {
        PS_RETURN_IF_ERROR(find(options.categorical[i].column, &cat_cols[i]));
      }
      return Status::Ok();
    }
    if (Trim(line).empty()) return Status::Ok();
    PS_RETURN_IF_ERROR(SplitCsvLine(line, options.delimiter, at, &fields));
    if (fields.size() != num_columns) {
      return InvalidArgument(at + ": expected " + std::to_string(num_columns) + " fields, got " +
                             std::to_string(fields.size()));
    }
    const CsvField& lf = fields[label_col];
    const std::string lat = at + ":" + std::to_string(lf.column);
    if (label_vocab) {
      int64_t id = label_vocab->Lookup(lf.text);
      if (id == Vocabulary::kUnknown) {
        std::string known;
        for (const auto& t : label_vocab->tokens()) known += (known.empty() ? "" : ", ") + t;
        return InvalidArgument(lat + ": unknown label '" + lf.text + "' (label vocabulary: " +
                               known + ")");
      }
      labels_from_vocab.push_back(static_cast<float>(id));
    } else {
      int64_t label;
      if (!ParseLabel(lf.text, &label)) {
        return InvalidArgument(lat + ": column '" + options.label + "': bad label '" + lf.text +
                               "'");
      }
      raw_labels.push_back(label);
      where.push_back(lat);
    }
    for (size_t i = 0; i < dense_cols.size(); ++i) {
      const CsvField& f = fields[dense_cols[i]];
      double v;
      if (!ParseDouble(f.text, &v)) {
        return InvalidArgument(at + ":" + std::to_string(f.column) + ": column '" +
                               options.dense[i] + "': bad number '" + f.text + "'");
      }
      dense.push_back(static_cast<float>(v));
    }
    for (size_t i = 0; i < cat_cols.size(); ++i) cat_values[i].push_back(fields[cat_cols[i]].text);
    return Status::Ok();
  }));
  if (!header_done) return InvalidArgument(path + ": empty file, expected a header line");

  ExampleTable t;
  if (label_vocab) {
    t.labels = std::move(labels_from_vocab);
    t.info.label_names = label_vocab->tokens();
    t.info.classes = std::max<int>(2, static_cast<int>(label_vocab->size()));
    if (options.classes != 0 && options.classes != t.info.classes) {
      return InvalidArgument(path + ": classes = " + std::to_string(options.classes) +
                             " but the label vocabulary has " +
                             std::to_string(label_vocab->size()) + " labels");
    }
  } else {
    PS_ASSIGN_OR_RETURN(t.info.classes, MapLabels(raw_labels, where, options.classes, &t.labels));
  }
  const auto n = static_cast<int64_t>(t.labels.size());
  t.info.examples = n;
  t.info.dense_dim = static_cast<int64_t>(dense_cols.size());
  t.dense_f32 = std::move(dense);
  for (size_t i = 0; i < cat_cols.size(); ++i) {
    const CsvCategorical& c = options.categorical[i];
    std::vector<std::string> tokens = c.vocabulary ? *c.vocabulary : AdaptVocabulary(cat_values[i]);
    auto vocab = Vocabulary::Create(std::move(tokens), 1);
    if (!vocab.ok()) return vocab.status().WithContext(path + ": column '" + c.column + "'");
    SparseColumn col;
    col.offsets.reserve(static_cast<size_t>(n) + 1);
    col.offsets.push_back(0);
    for (const std::string& v : cat_values[i]) {
      col.ids.push_back(vocab->Lookup(v));
      col.offsets.push_back(static_cast<int64_t>(col.ids.size()));
    }
    t.sparse.push_back(std::move(col));
    t.info.field_names.push_back(c.column);
    t.info.field_vocab_sizes.push_back(vocab->size());
  }
  PS_RETURN_IF_ERROR(t.Validate());
  return t;
}

}  // namespace ps::data
