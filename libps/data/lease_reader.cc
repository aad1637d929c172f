#include "libps/data/lease_reader.h"

#include <sys/stat.h>

#include <cerrno>

#include "libps/data/byte_stream.h"

namespace ps::data {

Result<bool> LeaseReader::Next(Row* row, bool parse, bool* parsed) {
  Open& o = *open_;
  *parsed = false;
  if (o.ended) return false;
  Result<bool> more = o.reader->Advance();
  if (!more.ok()) {
    PS_RETURN_IF_ERROR(policy_.Handle(more.status()));
    if (!o.reader->resumable()) {  // nothing after it can be framed: the shard ends here
      o.ended = true;
      return false;
    }
    o.record += 1;
    return true;
  }
  if (!*more) {
    o.ended = true;
    return false;
  }
  o.record += 1;
  if (!parse) return true;
  Status st = o.reader->Parse(row);
  if (!st.ok()) {
    PS_RETURN_IF_ERROR(policy_.Handle(std::move(st)));
    return true;
  }
  *parsed = true;
  return true;
}

Result<PackEnd> LeaseReader::Read(const LeaseSpec& spec, std::vector<Row>* rows) {
  const Lease& l = spec.lease;
  rows->clear();
  const bool reuse = open_ && open_->seq == l.seq && open_->generation == l.generation &&
                     open_->record <= l.start && open_->record >= l.base_record;
  if (!reuse) {
    open_.reset();
    struct stat st {};
    if (::stat(spec.file.c_str(), &st) != 0)
      return InputErrno(spec.file, "cannot stat file", errno);
    if (static_cast<uint64_t>(st.st_size) < l.base_byte && spec.shard.lines) {
      return InvalidArgument(spec.file + ": shrank to " + std::to_string(st.st_size) +
                             " bytes while leased (position at byte " +
                             std::to_string(l.base_byte) + ")");
    }
    ByteRange range{l.base_byte, spec.shard.end, spec.shard.lines};
    PS_ASSIGN_OR_RETURN(auto reader, format_->OpenRange(spec.file, range));
    open_ = Open{l.seq, l.generation, l.base_record, false, std::move(reader)};
  }
  Row row;
  bool parsed = false;
  while (open_->record < l.start) {
    PS_ASSIGN_OR_RETURN(bool more, Next(&row, false, &parsed));
    if (!more) break;
  }
  PackEnd end;
  while (!open_->ended && end.records < l.take) {
    PS_ASSIGN_OR_RETURN(bool more, Next(&row, true, &parsed));
    if (!more) break;
    end.records += 1;
    if (parsed) rows->push_back(std::move(row));
  }
  // The end is known only once the reader reached it: a lease that ends exactly at the
  // shard's end does not know it, the next lease of the shard finds no record.
  end.end_of_shard = open_->ended;
  if (end.end_of_shard) end.total = open_->record;
  end.end_byte = open_->reader->offset();
  return end;
}

}  // namespace ps::data
