#include "cc/util/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace nfn {

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
  fd_ = -1;
}

bool AtomicFileWriter::open(const std::string& path, std::string* error) {
  discard();
  path_ = path;
  tmp_ = path + ".tmp." + std::to_string(getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ >= 0) return true;
  *error = path + ": cannot write: " + std::strerror(errno);
  return false;
}

bool AtomicFileWriter::write(const void* data, size_t n, std::string* error) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t done = ::write(fd_, p, n);
    if (done < 0) {
      if (errno == EINTR) continue;
      *error = path_ + ": write failed: " + std::strerror(errno);
      discard();
      return false;
    }
    p += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}

bool AtomicFileWriter::commit(std::string* error) {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    *error = path_ + ": flush failed: " + std::strerror(errno);
    ::unlink(tmp_.c_str());
    return false;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    *error = path_ + ": rename failed: " + std::strerror(errno);
    ::unlink(tmp_.c_str());
    return false;
  }
  return true;
}

bool write_file_atomic(const std::string& path, const std::vector<FilePiece>& pieces, std::string* error) {
  AtomicFileWriter file;
  if (!file.open(path, error)) return false;
  for (const FilePiece& piece : pieces)
    if (!file.write(piece.data, piece.size, error)) return false;
  return file.commit(error);
}

bool read_file(const std::string& path, std::string* out, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  out->clear();
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = path + ": read failed: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool FileReader::open(const std::string& path, std::string* error) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY);
  struct stat st;
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  size_ = static_cast<size_t>(st.st_size);
  return true;
}

bool FileReader::read(size_t offset, void* dst, size_t n, std::string* error) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *error = path_ + (got < 0 ? ": read failed: " + std::string(std::strerror(errno))
                                : ": truncated at byte " + std::to_string(offset));
      return false;
    }
    p += got;
    offset += static_cast<size_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool make_dirs(const std::string& path, std::string* error) {
  if (path.empty() || is_directory(path)) return true;
  std::string parent = dir_name(path);
  if (parent != path && !make_dirs(parent, error)) return false;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = path + ": cannot create directory: " + std::strerror(errno);
    return false;
  }
  return true;
}

bool lock_directory(const std::string& dir, std::string* error) {
  if (!make_dirs(dir, error)) return false;
  const std::string path = join_path(dir, ".lock");
  // Never through a link: the pid written below would land in whatever it points at.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = path + ": " + (fd < 0 && errno == ELOOP ? std::string("a symbolic link, not the run's lock file")
                                                     : fd < 0 ? std::strerror(errno) : "not a regular file");
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char pid[32] = {0};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (why != EWOULDBLOCK) {
      *error = path + ": cannot lock: " + std::strerror(why);
      return false;
    }
    std::string holder(pid, n > 0 ? static_cast<size_t>(n) : 0);
    holder.erase(holder.find_last_not_of(" \n") + 1);
    *error = dir + ": another run" + (holder.empty() ? "" : " (pid " + holder + ")") +
             " is writing here; wait for it to end or give this one another --output-dir";
    return false;
  }
  // The pid is only for another run's message above; the flock is the lock.
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return true;  // fd stays open: the lock lasts as long as the process
}

int remove_orphaned_temp_files(const std::string& dir) {
  int removed = 0;
  for (const std::string& name : list_dir(dir)) {
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= name.size()) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    // A writer still running (this process, or another run in the same directory) keeps its
    // own; one killed and not yet reaped (a zombie, state Z) does not.
    if (std::stol(pid) == static_cast<long>(::getpid())) continue;
    std::string stat, unreadable;
    if (read_file("/proc/" + pid + "/stat", &stat, &unreadable)) {
      const size_t close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z') continue;
    }
    removed += ::unlink(join_path(dir, name).c_str()) == 0;
  }
  return removed;
}

bool remove_file(const std::string& path, std::string* error) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  *error = path + ": cannot remove: " + std::strerror(errno);
  return false;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (!b.empty() && b[0] == '/') return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string dir_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::vector<std::string> sibling_and_runfiles_dirs(const std::string& rel) {
  const std::string exe = executable_path(), sub = join_path("nfn", rel);
  std::vector<std::string> dirs = {dir_name(exe), join_path(exe + ".runfiles", sub)};
  size_t pos = exe.find(".runfiles/");
  if (pos != std::string::npos) dirs.push_back(join_path(exe.substr(0, pos + 9), sub));
  if (const char* env = std::getenv("RUNFILES_DIR")) dirs.push_back(join_path(env, sub));
  // A binary of Bazel's output tree run as itself (bazel-bin/cc/bin/X, its own runfiles tree
  // not made because it was built only as another target's data): the tree's `rel`.
  const size_t bin = exe.rfind("/cc/bin/");
  if (bin != std::string::npos) dirs.push_back(join_path(exe.substr(0, bin), rel));
  return dirs;
}

namespace {
std::string& lookup_executable() {
  static std::string path;
  return path;
}
}  // namespace

void set_lookup_executable(const std::string& path) { lookup_executable() = path; }

std::string executable_path() {
  if (!lookup_executable().empty()) return lookup_executable();
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

}  // namespace nfn
