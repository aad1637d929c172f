// The run files of a cluster that `pstrain local` starts on this machine: a directory
// per chief port, private to the user, holding the cluster's throw-away secret, so that
// `pstrain stop` and `pstrain status` find it for that cluster without --secret-file.
//   ${XDG_RUNTIME_DIR:-/tmp}/pstrain-<uid>/local-<chief port>/secret   (dir 0700, file 0600)
// Keyed by port alone: one machine has one listener per port, whichever name reaches it.
#pragma once

#include <optional>
#include <string>

#include "libps/cluster/tf_config.h"
#include "libps/core/status.h"

namespace ps::launcher {

// The directory of the local cluster whose chief listens on `chief_port`.
std::string LocalRunDir(uint16_t chief_port);

// True for loopback names and addresses, the unspecified addresses and this host's name.
bool LooksLocal(const std::string& host);

// A fresh random secret written to LocalRunDir(port)/secret (created with mode 0600 in a
// 0700 directory; an older file there is replaced). Removes the file and the directory
// when destroyed. Not copyable.
class LocalSecret {
 public:
  static Result<LocalSecret> Create(uint16_t chief_port);
  LocalSecret(LocalSecret&& other) noexcept;
  LocalSecret& operator=(LocalSecret&&) = delete;
  LocalSecret(const LocalSecret&) = delete;
  LocalSecret& operator=(const LocalSecret&) = delete;
  ~LocalSecret();

  const std::string& path() const { return path_; }

 private:
  explicit LocalSecret(std::string path) : path_(std::move(path)) {}
  std::string path_;  // empty once moved from
};

// The secret file of a local cluster whose chief is `chief`, when `chief` is on this
// machine and such a file exists, owned by this user; nullopt otherwise.
std::optional<std::string> FindLocalSecret(const cluster::HostPort& chief);

}  // namespace ps::launcher
