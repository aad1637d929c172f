#include "launcher/run_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "libps/net/auth.h"

namespace ps::launcher {

namespace {

std::string UserRunRoot() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = runtime != nullptr && runtime[0] == '/' ? runtime : "/tmp";
  return base + "/pstrain-" + std::to_string(::getuid());
}

// mkdir with mode 0700, or an existing directory of this user that nobody else may enter.
Status PrivateDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("cannot create " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
    return FailedPrecondition(dir + " is not a directory of this user; remove it");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0 && ::chmod(dir.c_str(), 0700) != 0) {
    return IoError("cannot chmod 700 " + dir + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) out.append({kDigits[b >> 4], kDigits[b & 15]});
  return out;
}

}  // namespace

std::string LocalRunDir(uint16_t chief_port) {
  return UserRunRoot() + "/local-" + std::to_string(chief_port);
}

bool LooksLocal(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "0.0.0.0" || host == "::") return true;
  if (host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && host == name;
}

Result<LocalSecret> LocalSecret::Create(uint16_t chief_port) {
  PS_RETURN_IF_ERROR(PrivateDir(UserRunRoot()));
  const std::string dir = LocalRunDir(chief_port);
  PS_RETURN_IF_ERROR(PrivateDir(dir));
  const std::string path = dir + "/secret";
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("cannot create " + tmp + ": " + std::strerror(errno));
  // 256 bits from the same source as the handshake's nonces.
  std::string secret;
  for (int i = 0; i < 2; ++i) secret += Hex(net::RandomNonce());
  secret += '\n';
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return IoError("cannot write " + path + ": " + why);
  }
  return LocalSecret(path);
}

LocalSecret::LocalSecret(LocalSecret&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

LocalSecret::~LocalSecret() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  std::filesystem::remove(std::filesystem::path(path_).parent_path(), ec);  // only if empty
}

std::optional<std::string> FindLocalSecret(const cluster::HostPort& chief) {
  if (!LooksLocal(chief.host)) return std::nullopt;
  const std::string path = LocalRunDir(chief.port) + "/secret";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::getuid()) {
    return std::nullopt;
  }
  return path;
}

}  // namespace ps::launcher
