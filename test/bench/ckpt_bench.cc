// Checkpoint save and restore throughput of ps tasks' stores, against a plain sequential
// write()+fsync and read() of the same bytes in the same directory, measured in the same
// run. Not a test: run by hand or by scripts/bench-ckpt.sh.
//
//   bench_ckpt [--gib 1.0] [--dir DIR] [--repeat 3] [--optimizer sgd] [--shards 16] [--ps 2]
//              [--restore-shards K] [--restore-ps P] [--delta-fraction 0.01]
//
// Model: one float32 variable "embedding" [shards * rows, 1024] split into --shards
// equal shards holding --gib GiB of values in all, placed round-robin on --ps stores as
// TF places partitions on ps tasks. With --optimizer adam (or another with slots) the
// slots are saved and restored too, so the bytes moved are (1 + slots) * --gib GiB.
//
// Timed, per repetition:
//   save     every store's ps::ckpt::SaveStore on its own thread (as ps tasks save in
//            parallel), then CommitCheckpoint with the MANIFEST: a checkpoint end to end.
//   restore  ps::ckpt::RestoreStore into fresh stores with the same shards (zero-filled,
//            so the check afterwards proves the data came from disk), one thread each;
//            with --restore-shards K [--restore-ps P], into K shards over P stores: a
//            resharding restore (each store reads the rows of its shards from every file).
//   delta    (--delta-fraction F, default 0.01; 0: skipped) a full checkpoint through the
//            ps's ShardCheckpointer, then a push of F of each shard's rows (random rows),
//            then a delta checkpoint (ckpt-<base>/delta-<step>) of them: its save+commit
//            time and bytes against the full one's; base + delta is then restored and
//            checked against the stores.
//   plain    write()+fsync of each store's bytes (taken from the store's memory) to one
//            file per store, one thread each; read() of those files back into a buffer.
// MB/s are payload bytes (floats * 4) / seconds / 1e6. Before each restore and each plain
// read the page cache is dropped when /proc/sys/vm/drop_caches is writable; otherwise
// the output says the reads came from the page cache. The order of ours and plain
// alternates between repetitions so that neither always follows the other's writeback;
// the summary gives the median of the per-repetition ratios.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/ckpt/shard_file.h"
#include "libps/ckpt/store_io.h"
#include "libps/cluster/placement.h"
#include "libps/core/files.h"
#include "libps/proto/messages.h"
#include "libps/server/store.h"
#include "test/bench/bench_util.h"

namespace {

using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;
using StorePtr = std::unique_ptr<ps::server::Store>;

constexpr int64_t kCols = 1024;
constexpr size_t kReadChunk = 16u << 20;

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

struct Options {
  double gib = 1.0;
  std::string dir;
  int repeat = 3;
  ps::server::OptimizerKind optimizer = ps::server::OptimizerKind::kSgd;
  int shards = 16;
  int num_ps = 2;
  // Restore into this many shards (over --restore-ps stores): a resharding restore.
  // 0: as saved.
  int restore_shards = 0;
  int restore_ps = 0;
  double delta_fraction = 0.01;  // of each shard's rows changed before a delta; 0: no delta run
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return FlagValue(argc, argv, &i); };
    if (a == "--gib") {
      o.gib = std::atof(next().c_str());
    } else if (a == "--dir") {
      o.dir = next();
    } else if (a == "--repeat") {
      o.repeat = std::atoi(next().c_str());
    } else if (a == "--shards") {
      o.shards = std::atoi(next().c_str());
    } else if (a == "--ps") {
      o.num_ps = std::atoi(next().c_str());
    } else if (a == "--restore-shards") {
      o.restore_shards = std::atoi(next().c_str());
    } else if (a == "--restore-ps") {
      o.restore_ps = std::atoi(next().c_str());
    } else if (a == "--delta-fraction") {
      o.delta_fraction = std::atof(next().c_str());
    } else if (a == "--optimizer") {
      std::string name = next();
      bool found = false;
      for (auto k : {ps::server::OptimizerKind::kSgd, ps::server::OptimizerKind::kAdagrad,
                     ps::server::OptimizerKind::kRmsprop, ps::server::OptimizerKind::kAdam,
                     ps::server::OptimizerKind::kFtrl}) {
        if (name == ps::server::OptimizerKindName(k)) {
          o.optimizer = k;
          found = true;
        }
      }
      if (!found) Die("--optimizer: one of sgd, adagrad, rmsprop, adam, ftrl");
    } else {
      Die("unknown flag " + a +
          " (flags: --gib --dir --repeat --optimizer --shards --ps --restore-shards --restore-ps --delta-fraction)");
    }
  }
  if (o.restore_shards == 0) o.restore_shards = o.shards;
  if (o.restore_ps == 0) o.restore_ps = o.num_ps;
  if (o.gib <= 0 || o.repeat < 1 || o.shards < 1 || o.num_ps < 1 || o.num_ps > o.shards ||
      o.restore_ps < 1 || o.restore_ps > o.restore_shards || o.delta_fraction < 0 ||
      o.delta_fraction > 1) {
    Die("bad flag value");
  }
  return o;
}

// Runs fn(i) for i in [0, n) on n threads and returns the wall time in seconds; dies
// naming the first error.
double Parallel(int n, const std::function<ps::Status(int)>& fn) {
  std::vector<ps::Status> results(static_cast<size_t>(n));
  auto t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = fn(i); });
  }
  auto t1 = Clock::now();
  for (const auto& st : results) Check(st, "a parallel save or restore");
  return Seconds(t0, t1);
}

// The stores of num_ps ps tasks holding `defs` (def i on store i % num_ps).
std::vector<StorePtr> BuildStores(const Options& opt, int num_ps,
                                  const std::vector<ps::server::ShardDef>& defs) {
  std::vector<StorePtr> stores;
  for (int p = 0; p < num_ps; ++p) {
    stores.push_back(std::make_unique<ps::server::Store>());
    Check(stores.back()->Configure(ps::server::DefaultOptimizer(opt.optimizer)), "Configure");
  }
  Parallel(num_ps, [&](int p) -> ps::Status {
    for (size_t i = static_cast<size_t>(p); i < defs.size(); i += static_cast<size_t>(num_ps)) {
      PS_RETURN_IF_ERROR(stores[static_cast<size_t>(p)]->Create(defs[i]));
    }
    return ps::Status::Ok();
  });
  return stores;
}

// Plain write()+fsync of the store's values and slots, shard by shard, to `path`.
ps::Status PlainWrite(const ps::server::Store& store, const std::string& path) {
  ps::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
  if (!fd.valid()) return ps::ErrnoStatus(path, "open", errno);
  ps::Status st;
  store.ForEachShard([&](const ps::server::ShardView& shard) {
    if (st.ok()) st = ps::WriteAll(fd.get(), shard.values.data(), shard.values.size_bytes(), path);
    for (const auto& [name, data] : shard.slots) {
      if (st.ok()) st = ps::WriteAll(fd.get(), data.data(), data.size_bytes(), path);
    }
  });
  PS_RETURN_IF_ERROR(st);
  PS_RETURN_IF_ERROR(ps::FsyncFd(fd.get(), path));
  return fd.Close(path);
}

// Plain sequential read() of `path` in kReadChunk pieces; checks it holds `bytes`.
ps::Status PlainRead(const std::string& path, uint64_t bytes) {
  ps::UniqueFd fd(::open(path.c_str(), O_RDONLY));
  if (!fd.valid()) return ps::ErrnoStatus(path, "open", errno);
  std::vector<char> buf(kReadChunk);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ps::ErrnoStatus(path, "read", errno);
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
  }
  if (total != bytes)
    return ps::DataLoss(path + ": read " + std::to_string(total) + " bytes, wrote " +
                        std::to_string(bytes));
  return ps::Status::Ok();
}

// Every shard of `got` holds exactly the values and slots of the same shard in `want`.
// Whether the restored stores `got` hold exactly the rows (values and slots) of the saved
// ones, whose shard i of `src_rows` rows each is on store i % src.size(), whatever
// shards `got` splits the variable into.
bool SameVariable(const std::vector<StorePtr>& src, int64_t src_rows,
                  const std::vector<StorePtr>& got) {
  bool same = true;
  for (const auto& store : got) {
    store->ForEachShard([&](const ps::server::ShardView& g) {
      const ps::cluster::ShardLayout& l = g.def.layout;
      for (int64_t i = l.row_begin / src_rows; i * src_rows < l.row_begin + l.rows; ++i) {
        const ps::server::Store& from =
            *src[static_cast<size_t>(i % static_cast<int64_t>(src.size()))];
        Check(from.Read({l.var, static_cast<int>(i)},
                        [&](const ps::server::ShardView& w) {
                          const int64_t b = std::max(l.row_begin, i * src_rows);
                          const int64_t e = std::min(l.row_begin + l.rows, (i + 1) * src_rows);
                          auto eq = [&](std::span<const float> want, std::span<const float> have) {
                            return std::memcmp(
                                       want.data() + (b - i * src_rows) * kCols,
                                       have.data() + (b - l.row_begin) * kCols,
                                       static_cast<size_t>((e - b) * kCols) * sizeof(float)) == 0;
                          };
                          same = same && eq(w.values, g.values) && w.slots.size() == g.slots.size();
                          for (size_t k = 0; same && k < w.slots.size(); ++k) {
                            same = w.slots[k].first == g.slots[k].first &&
                                   eq(w.slots[k].second, g.slots[k].second);
                          }
                        }),
              "Read");
      }
    });
  }
  return same;
}

using ps::bench::Median;

struct Run {
  double save = 0, plain_write = 0, restore = 0, plain_read = 0;  // MB/s
};

// Every store saves through its ShardCheckpointer (a delta of `parent` on `base` when
// base >= 0), in parallel; the chief's MANIFEST is committed. Returns seconds and adds
// the files' bytes to *bytes.
double SaveAll(std::vector<std::unique_ptr<ps::ckpt::ShardCheckpointer>>& cks,
               const std::string& model_dir, int64_t step, int64_t base, int64_t parent,
               uint64_t* bytes) {
  std::vector<ps::ckpt::ShardFileInfo> infos(cks.size());
  auto t0 = Clock::now();
  Parallel(static_cast<int>(cks.size()), [&](int p) -> ps::Status {
    PS_ASSIGN_OR_RETURN(auto reply,
                        cks[static_cast<size_t>(p)]->Save({model_dir, step, base, parent}));
    infos[static_cast<size_t>(p)] = {reply.file, reply.bytes, reply.digest};
    return ps::Status::Ok();
  });
  ps::ckpt::Manifest m;
  m.global_step = step;
  m.unix_time = static_cast<double>(std::time(nullptr));
  m.num_ps = static_cast<int>(cks.size());
  m.shards = infos;
  if (base >= 0) {
    m.base = base;
    m.parent = parent;
  }
  Check(ps::ckpt::CommitCheckpoint(model_dir, m), "CommitCheckpoint");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  *bytes = 0;
  for (const auto& info : infos) *bytes += info.bytes;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  std::string dir = opt.dir;
  bool own_dir = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bench-ckpt-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
    dir = tmpl;
    own_dir = true;
  }
  std::filesystem::create_directories(dir);
  const std::string model_dir = dir + "/model";

  // The model: "embedding" [shards * rows, kCols], shard i on ps i % num_ps.
  const int64_t rows = std::max<int64_t>(
      1,
      static_cast<int64_t>(opt.gib * static_cast<double>(1ull << 30) / (opt.shards * kCols * 4.0)));
  const ps::server::OptimizerSpec spec = ps::server::DefaultOptimizer(opt.optimizer);
  const int nslots = static_cast<int>(ps::server::SlotDefs(spec).size());
  std::vector<ps::server::ShardDef> defs, zero_defs;
  std::vector<uint64_t> ps_bytes(static_cast<size_t>(opt.num_ps), 0);
  for (int i = 0; i < opt.shards; ++i) {
    ps::server::ShardDef d{.layout = {.var = "embedding",
                                      .shard = i,
                                      .num_shards = opt.shards,
                                      .row_begin = i * rows,
                                      .rows = rows,
                                      .cols = kCols,
                                      .full_shape = {opt.shards * rows, kCols},
                                      .lazy = false},
                           .init = {ps::model::InitKind::kUniform, -0.05, 0.05},
                           .seed = 7};
    defs.push_back(d);
    ps_bytes[static_cast<size_t>(i % opt.num_ps)] +=
        static_cast<uint64_t>(rows * kCols * 4 * (1 + nslots));
  }
  // Where the restore goes: zero-filled, so the check afterwards proves the data came
  // from disk; --restore-shards splits the variable anew (TF's row split).
  const std::vector<int64_t> split = ps::cluster::SplitRows(opt.shards * rows, opt.restore_shards);
  for (int i = 0; i < opt.restore_shards; ++i) {
    ps::server::ShardDef d = defs[0];
    d.layout.shard = i;
    d.layout.num_shards = opt.restore_shards;
    d.layout.row_begin = ps::cluster::ShardRowBegin(opt.shards * rows, opt.restore_shards, i);
    d.layout.rows = split[static_cast<size_t>(i)];
    d.init = {ps::model::InitKind::kZeros, 0, 0};
    zero_defs.push_back(d);
  }
  const bool resharding = opt.restore_shards != opt.shards || opt.restore_ps != opt.num_ps;
  uint64_t total_bytes = 0;
  for (uint64_t b : ps_bytes) total_bytes += b;

  std::printf(
      "dir %s\nmodel: %d shards x %lld x %lld float32 over %d ps, optimizer %s (%d slot%s): "
      "%.1f MiB to save\n",
      dir.c_str(), opt.shards, static_cast<long long>(rows), static_cast<long long>(kCols),
      opt.num_ps, ps::server::OptimizerKindName(opt.optimizer), nslots, nslots == 1 ? "" : "s",
      static_cast<double>(total_bytes) / 1048576.0);
  std::printf("restore into %d shards over %d stores%s\n", opt.restore_shards, opt.restore_ps,
              resharding ? " (resharding)" : " (as saved)");
  std::fflush(stdout);

  // The stores to save; one dense push makes values and slots non-trivial.
  std::vector<StorePtr> src = BuildStores(opt, opt.num_ps, defs);
  {
    std::vector<float> grad(static_cast<size_t>(rows * kCols));
    for (size_t k = 0; k < grad.size(); ++k) grad[k] = static_cast<float>(k % 97) * 1e-3f - 0.05f;
    for (int i = 0; i < opt.shards; ++i) {
      Check(src[static_cast<size_t>(i % opt.num_ps)]->Push(defs[static_cast<size_t>(i)].key(), grad,
                                                           0),
            "Push");
    }
  }

  bool dropped = true;
  std::vector<Run> runs;
  uint64_t file_bytes = 0;
  for (int rep = 0; rep < opt.repeat; ++rep) {
    const int64_t step = rep + 1;
    std::vector<StorePtr> dst = BuildStores(opt, opt.restore_ps, zero_defs);
    auto plain_path = [&](int p) { return dir + "/plain-" + std::to_string(p) + ".bin"; };
    Run run;

    auto save = [&] {
      ::sync();
      std::vector<ps::ckpt::ShardFileInfo> infos(static_cast<size_t>(opt.num_ps));
      auto t0 = Clock::now();
      Parallel(opt.num_ps, [&](int p) -> ps::Status {
        PS_ASSIGN_OR_RETURN(infos[static_cast<size_t>(p)],
                            ps::ckpt::SaveStore(*src[static_cast<size_t>(p)], model_dir, p, step));
        return ps::Status::Ok();
      });
      ps::ckpt::Manifest m;
      m.global_step = step;
      m.unix_time = static_cast<double>(std::time(nullptr));
      m.num_ps = opt.num_ps;
      m.shards = infos;
      // The placement as the chief records it: each ps then opens only its own file.
      ps::Json shards = ps::Json::array();
      for (const auto& d : defs) {
        shards.push_back({{"shard", d.layout.shard},
                          {"ps", d.layout.shard % opt.num_ps},
                          {"row_begin", d.layout.row_begin},
                          {"rows", d.layout.rows}});
      }
      m.extra = {{"variables", ps::Json::array({{{"name", "embedding"},
                                                 {"shape", defs[0].layout.full_shape},
                                                 {"sparse", false},
                                                 {"shards", shards}}})}};
      Check(ps::ckpt::CommitCheckpoint(model_dir, m), "CommitCheckpoint");
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      run.save = static_cast<double>(total_bytes) / s / 1e6;
      file_bytes = 0;
      for (const auto& info : infos) file_bytes += info.bytes;
    };
    auto plain_write = [&] {
      ::sync();
      double s = Parallel(opt.num_ps, [&](int p) {
        return PlainWrite(*src[static_cast<size_t>(p)], plain_path(p));
      });
      run.plain_write = static_cast<double>(total_bytes) / s / 1e6;
    };
    auto restore = [&] {
      dropped = DropCaches() && dropped;
      std::vector<ps::ckpt::RestoreStats> restored(static_cast<size_t>(opt.restore_ps));
      const std::string ckpt = ps::ckpt::CheckpointPath(model_dir, step);
      double s = Parallel(opt.restore_ps, [&](int p) -> ps::Status {
        // Each ps reads the MANIFEST, as ShardCheckpointer::Restore does.
        PS_ASSIGN_OR_RETURN(ps::ckpt::Manifest m, ps::ckpt::ReadManifest(ckpt));
        return ps::ckpt::RestoreStore(dst[static_cast<size_t>(p)].get(),
                                      {step, ckpt, std::move(m), {}},
                                      &restored[static_cast<size_t>(p)]);
      });
      run.restore = static_cast<double>(total_bytes) / s / 1e6;
      for (int p = 0; p < opt.restore_ps; ++p) {
        if (static_cast<size_t>(restored[static_cast<size_t>(p)].shards) !=
            dst[static_cast<size_t>(p)]->Keys().size()) {
          Die("ps " + std::to_string(p) + ": not every shard was restored");
        }
      }
    };
    auto plain_read = [&] {
      dropped = DropCaches() && dropped;
      double s = Parallel(opt.num_ps, [&](int p) {
        return PlainRead(plain_path(p), ps_bytes[static_cast<size_t>(p)]);
      });
      run.plain_read = static_cast<double>(total_bytes) / s / 1e6;
    };

    const bool ours_first = rep % 2 == 0;
    if (ours_first) {
      save();
      plain_write();
      restore();
      plain_read();
    } else {
      plain_write();
      save();
      plain_read();
      restore();
    }
    if (!SameVariable(src, rows, dst)) Die("the restored variable differs from the saved one");
    std::printf(
        "run %d (%s first): save %5.0f MB/s, plain write %5.0f MB/s, ratio %.2f | "
        "restore %5.0f MB/s, plain read %5.0f MB/s, ratio %.2f\n",
        rep + 1, ours_first ? "ours" : "plain", run.save, run.plain_write,
        run.save / run.plain_write, run.restore, run.plain_read, run.restore / run.plain_read);
    std::fflush(stdout);
    runs.push_back(run);

    std::filesystem::remove_all(ps::ckpt::CheckpointPath(model_dir, step));
    for (int p = 0; p < opt.num_ps; ++p) std::filesystem::remove(plain_path(p));
  }

  // Delta checkpoints: full, then F of the rows pushed, then a delta of them.
  std::vector<double> delta_time_ratio, delta_byte_ratio;
  double full_s_med = 0, delta_s_med = 0;
  uint64_t full_bytes = 0, delta_bytes = 0;
  if (opt.delta_fraction > 0) {
    std::vector<std::unique_ptr<ps::ckpt::ShardCheckpointer>> cks;
    for (int p = 0; p < opt.num_ps; ++p) {
      cks.push_back(
          std::make_unique<ps::ckpt::ShardCheckpointer>(src[static_cast<size_t>(p)].get(), p));
    }
    const auto changed =
        std::max<int64_t>(1, static_cast<int64_t>(opt.delta_fraction * static_cast<double>(rows)));
    std::vector<double> full_s, delta_s;
    uint64_t seed = 12345;
    for (int rep = 0; rep < opt.repeat; ++rep) {
      const int64_t base = 1000 + 10 * rep;
      ::sync();
      full_s.push_back(SaveAll(cks, model_dir, base, -1, -1, &full_bytes));
      // `changed` random distinct rows of every shard, one PushRows each.
      std::vector<int64_t> picked;
      for (int64_t r = 0; r < rows; ++r) picked.push_back(r);
      std::vector<float> grad(static_cast<size_t>(changed * kCols), 1e-3f);
      for (int i = 0; i < opt.shards; ++i) {
        for (int64_t k = 0; k < changed; ++k) {  // a partial Fisher-Yates shuffle
          seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
          const int64_t j =
              k + static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(rows - k));
          std::swap(picked[static_cast<size_t>(k)], picked[static_cast<size_t>(j)]);
        }
        std::vector<int64_t> ids(picked.begin(), picked.begin() + changed);
        std::sort(ids.begin(), ids.end());
        Check(src[static_cast<size_t>(i % opt.num_ps)]->PushRows(defs[static_cast<size_t>(i)].key(),
                                                                 ids, grad, 0),
              "PushRows");
      }
      ::sync();
      delta_s.push_back(SaveAll(cks, model_dir, base + 1, base, base, &delta_bytes));
      delta_time_ratio.push_back(delta_s.back() / full_s.back());
      delta_byte_ratio.push_back(static_cast<double>(delta_bytes) /
                                 static_cast<double>(full_bytes));
      std::printf(
          "delta run %d: full %.3f s %.1f MiB | delta (%.2f%% of rows changed) %.4f s %.2f MiB | "
          "time %.4f, bytes %.4f of full\n",
          rep + 1, full_s.back(), static_cast<double>(full_bytes) / 1048576.0,
          100.0 * opt.delta_fraction, delta_s.back(), static_cast<double>(delta_bytes) / 1048576.0,
          delta_time_ratio.back(), delta_byte_ratio.back());
      std::fflush(stdout);
      // Base + delta restores to exactly the stores' state (checked as saved only).
      auto chain = ps::ckpt::LoadCheckpointAt(model_dir, base + 1);
      Check(chain.status(), "LoadCheckpointAt");
      if (chain->deltas.size() != 1) Die("the delta is not in the chain");
      if (!resharding) {
        std::vector<StorePtr> dst = BuildStores(opt, opt.num_ps, zero_defs);
        Parallel(opt.num_ps, [&](int p) {
          return ps::ckpt::RestoreStore(dst[static_cast<size_t>(p)].get(), *chain);
        });
        if (!SameVariable(src, rows, dst))
          Die("base + delta restored a variable that differs from the saved one");
      }
      std::filesystem::remove_all(ps::ckpt::CheckpointPath(model_dir, base));
    }
    full_s_med = Median(full_s);
    delta_s_med = Median(delta_s);
  }

  auto median = [&](auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return Median(v);
  };
  std::printf("\ncheckpoint files %.1f MiB for %.1f MiB of floats (%.4f%% overhead)\n",
              static_cast<double>(file_bytes) / 1048576.0,
              static_cast<double>(total_bytes) / 1048576.0,
              100.0 * (static_cast<double>(file_bytes) - static_cast<double>(total_bytes)) /
                  static_cast<double>(total_bytes));
  std::printf("median of %d run%s%s:\n", opt.repeat, opt.repeat == 1 ? "" : "s",
              dropped ? " (page cache dropped before every read)"
                      : " (READS FROM PAGE CACHE: /proc/sys/vm/drop_caches not writable)");
  auto row = [&](const char* what, double (*ours)(const Run&), double (*plain)(const Run&)) {
    std::vector<double> ratios;
    for (const Run& r : runs) ratios.push_back(ours(r) / plain(r));
    std::printf("  %-28s %8.0f %8.0f %8.2f   %.2f-%.2f\n", what, median(ours), median(plain),
                Median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()));
  };
  std::printf("  %-28s %8s %8s %8s   %s\n", "", "ours", "plain", "ratio", "ratio range");
  row(
      "save+commit vs write+fsync", [](const Run& r) { return r.save; },
      [](const Run& r) { return r.plain_write; });
  row(
      "restore vs read", [](const Run& r) { return r.restore; },
      [](const Run& r) { return r.plain_read; });
  std::printf("  (MB/s = 1e6 bytes of floats per second; ratio = median of per-run ratios)\n");
  if (opt.delta_fraction > 0) {
    std::printf(
        "delta checkpoint, %.2f%% of rows changed (median of %d): full %.3f s %.1f MiB, delta %.4f s %.2f MiB: "
        "time %.4f (%.4f-%.4f), bytes %.4f of the full one's\n",
        100.0 * opt.delta_fraction, opt.repeat, full_s_med,
        static_cast<double>(full_bytes) / 1048576.0, delta_s_med,
        static_cast<double>(delta_bytes) / 1048576.0, Median(delta_time_ratio),
        *std::min_element(delta_time_ratio.begin(), delta_time_ratio.end()),
        *std::max_element(delta_time_ratio.begin(), delta_time_ratio.end()),
        Median(delta_byte_ratio));
  }

  std::filesystem::remove(model_dir + "/" + ps::ckpt::kPointerFile);
  std::filesystem::remove(model_dir);
  if (own_dir) std::filesystem::remove(dir);
  return 0;
}
