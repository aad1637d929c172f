#include "libps/data/record_format.h"

namespace ps::data {

Result<bool> TextRecordReader::Advance() {
  for (;;) {
    resumable_ = false;
    PS_ASSIGN_OR_RETURN(bool more, stream_->NextLine(&line_));
    resumable_ = true;
    if (!more) return false;
    if (++line_no_ == 1 && line_.starts_with("\xEF\xBB\xBF")) line_.remove_prefix(3);
    if (comment_ != '\0') {
      if (size_t c = line_.find(comment_); c != std::string_view::npos) line_ = line_.substr(0, c);
    }
    if (line_.find_first_not_of(" \t") != std::string_view::npos) return true;
  }
}

std::string TextRecordReader::Where() const {
  return stream_->path() + ":" + std::to_string(line_no_);
}

Result<std::unique_ptr<RecordFormat>> MakeRecordFormat(const std::string& format, JsonReader& r) {
  if (format == "tfrecord") return MakeTfExampleFormat(r);
  if (format == "criteo_tsv") return MakeCriteoFormat(r);
  if (format == "libsvm") return MakeLibSvmFormat(r);
  return std::unique_ptr<RecordFormat>();
}

}  // namespace ps::data
