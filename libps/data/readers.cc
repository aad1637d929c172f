#include "libps/data/readers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "libps/core/text.h"
#include "libps/data/byte_stream.h"
#include "libps/data/libsvm.h"
#include "libps/data/row.h"
#include "libps/data/text.h"

namespace ps::data {
namespace {

// Larger inflated contents are refused rather than exhausting memory.
constexpr uint64_t kMaxInflatedBytes = uint64_t{16} << 30;

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
    return InvalidArgument(path + ": offset 0: truncated: expected 4 bytes of magic, got " +
                           std::to_string(d.size()));
  }
  uint32_t magic = BigEndian32(d, 0);
  if (magic != want_magic) {
    return InvalidArgument(path + ": offset 0: bad magic " + Hex32(magic) + ", expected " +
                           Hex32(want_magic) + " (idx" + std::to_string(ndims) +
                           " unsigned bytes)");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (d.size() < header) {
    return InvalidArgument(path + ": offset 4: truncated: expected " + std::to_string(header - 4) +
                           " bytes of dimensions, got " + std::to_string(d.size() - 4));
  }
  IdxHeader h;
  h.data_offset = header;
  uint64_t total = 1;  // saturates: anything that large is truncated anyway
  for (int i = 0; i < ndims; ++i) {
    uint64_t dim = BigEndian32(d, 4 + 4 * static_cast<size_t>(i));
    if (dim == 0) {
      return InvalidArgument(path + ": offset " + std::to_string(4 + 4 * i) + ": dimension " +
                             std::to_string(i) + " is 0");
    }
    h.dims.push_back(dim);
    total = total > std::numeric_limits<uint64_t>::max() / dim
                ? std::numeric_limits<uint64_t>::max()
                : total * dim;
  }
  const uint64_t got = d.size() - header;
  if (total > got) {
    return InvalidArgument(path + ": offset " + std::to_string(header) + ": truncated: expected " +
                           std::to_string(total) + " bytes of " + what + ", got " +
                           std::to_string(got));
  }
  if (total < got) {
    return InvalidArgument(path + ": offset " + std::to_string(header + total) + ": " +
                           std::to_string(got - total) + " trailing bytes after the " + what);
  }
  return h;
}

// Maps raw integer labels to 0..classes-1 (see readers.h); where[i] locates label i
// ("file:line") for error messages.
Result<int> MapLabels(const std::vector<int64_t>& raw,
                      const std::function<std::string(size_t)>& where, int classes,
                      std::vector<float>* labels) {
  labels->resize(raw.size());
  bool has_minus_one = std::find(raw.begin(), raw.end(), -1) != raw.end();
  if (classes == 0) {
    if (has_minus_one) {
      classes = 2;
    } else {
      int64_t max = 0;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] < 0) {
          return InvalidArgument(where(i) + ": label " + std::to_string(raw[i]) + " is negative");
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
        return InvalidArgument(where(i) + ": label " + std::to_string(v) +
                               " in a file with -1 labels; expected -1 or +1");
      }
      (*labels)[i] = v == 1 ? 1.0f : 0.0f;
      continue;
    }
    if (v < 0 || v >= classes) {
      return InvalidArgument(where(i) + ": label " + std::to_string(v) + " is out of range for " +
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
  PS_ASSIGN_OR_RETURN(auto stream, ByteStream::Open(path));
  std::string out;
  for (;;) {
    PS_ASSIGN_OR_RETURN(std::string_view chunk, stream->Take(size_t{1} << 20));
    if (chunk.empty()) break;
    if (out.size() + chunk.size() > kMaxInflatedBytes) {
      return InvalidArgument(path + ": larger than " + std::to_string(kMaxInflatedBytes >> 30) +
                             " GiB: too large to load in memory (stream it with \"files\")");
    }
    out.append(chunk);
  }
  return out;
}

Result<ExampleTable> ReadIdx(const std::string& images_path, const std::string& labels_path,
                             int classes) {
  PS_ASSIGN_OR_RETURN(std::string images, ReadMaybeGzipFile(images_path));
  PS_ASSIGN_OR_RETURN(IdxHeader ih, ParseIdxHeader(images_path, images, 3, "pixels"));
  PS_ASSIGN_OR_RETURN(std::string labels, ReadMaybeGzipFile(labels_path));
  PS_ASSIGN_OR_RETURN(IdxHeader lh, ParseIdxHeader(labels_path, labels, 1, "labels"));
  if (ih.dims[0] != lh.dims[0]) {
    return InvalidArgument(
        labels_path + ": offset 4: count mismatch: " + std::to_string(lh.dims[0]) + " labels for " +
        std::to_string(ih.dims[0]) + " images in " + images_path);
  }
  ExampleTable t;
  const auto n = static_cast<int64_t>(ih.dims[0]);
  t.info.examples = n;
  t.info.dense_dim = static_cast<int64_t>(ih.dims[1] * ih.dims[2]);
  int max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    int v = static_cast<uint8_t>(labels[lh.data_offset + static_cast<size_t>(i)]);
    if (classes > 0 && v >= classes) {
      return InvalidArgument(labels_path + ": offset " + std::to_string(lh.data_offset + i) +
                             ": label " + std::to_string(v) + " is out of range for " +
                             std::to_string(classes) + " classes");
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
  PS_RETURN_IF_ERROR(CheckLibSvmOptions(options, path + ": "));
  auto raw_options = std::make_shared<LibSvmOptions>(options);
  raw_options->classes = 0;  // raw labels: mapped below, once all are known
  PS_ASSIGN_OR_RETURN(auto reader, OpenLibSvm(path, raw_options));
  ExampleTable t;
  t.info = LibSvmInfo(options);
  std::vector<int64_t> line_numbers;
  Row row;
  for (;;) {
    PS_ASSIGN_OR_RETURN(bool more, reader->Advance());
    if (!more) break;
    PS_RETURN_IF_ERROR(reader->Parse(&row));
    AppendRow(row, true, &t);
    line_numbers.push_back(reader->line_no());
  }
  if (t.sparse.empty()) {  // no examples: shape the empty columns
    t.sparse.resize(t.info.field_vocab_sizes.size());
    for (SparseColumn& c : t.sparse) c.offsets.push_back(0);
  }
  std::vector<int64_t> raw(t.labels.begin(), t.labels.end());
  PS_ASSIGN_OR_RETURN(
      t.info.classes,
      MapLabels(
          raw, [&](size_t i) { return path + ":" + std::to_string(line_numbers[i]); },
          options.classes, &t.labels));
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
                                 ": duplicate column " + QuoteInput(fields[i].text));
        }
      }
      auto find = [&](const std::string& name, size_t* out) -> Status {
        auto it = column_index.find(name);
        if (it == column_index.end()) {
          return InvalidArgument(at + ": no column " + QuoteInput(name) + " in the header");
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
        return InvalidArgument(lat + ": unknown label " + QuoteInput(lf.text) +
                               " (label vocabulary: " + CutText(known) + ")");
      }
      labels_from_vocab.push_back(static_cast<float>(id));
    } else {
      int64_t label;
      if (!ParseLabel(lf.text, &label)) {
        return InvalidArgument(lat + ": column '" + options.label + "': bad label " +
                               QuoteInput(lf.text));
      }
      raw_labels.push_back(label);
      where.push_back(lat);
    }
    for (size_t i = 0; i < dense_cols.size(); ++i) {
      const CsvField& f = fields[dense_cols[i]];
      double v;
      if (!ParseDouble(f.text, &v)) {
        return InvalidArgument(at + ":" + std::to_string(f.column) + ": column '" +
                               options.dense[i] + "': bad number " + QuoteInput(f.text));
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
    PS_ASSIGN_OR_RETURN(t.info.classes, MapLabels(
                                            raw_labels, [&](size_t i) { return where[i]; },
                                            options.classes, &t.labels));
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
