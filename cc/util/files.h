// File helpers with the project's rule built in: what is written is written whole
// (temp file, fsync, rename) or not at all.
#pragma once

#include <string>
#include <vector>

namespace nfn {

// Bytes to write: `size` bytes at `data`.
struct FilePiece {
  const void* data;
  size_t size;
};

// A file written whole or not at all: open() starts a temp file beside `path`, write()
// appends, commit() fsyncs it and renames it over `path`; one dropped before commit() is
// removed. Errors are "<path>: <why>".
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();
  bool open(const std::string& path, std::string* error);
  bool write(const void* data, size_t n, std::string* error);
  bool commit(std::string* error);

 private:
  void discard();
  int fd_ = -1;
  std::string path_, tmp_;
};

// Writes the pieces one after another to `path` atomically, so a large file needs no copy
// assembled in memory. false + "<path>: <why>" on failure.
bool write_file_atomic(const std::string& path, const std::vector<FilePiece>& pieces, std::string* error);
inline bool write_file_atomic(const std::string& path, const std::string& text, std::string* error) {
  return write_file_atomic(path, {{text.data(), text.size()}}, error);
}
bool read_file(const std::string& path, std::string* out, std::string* error);

// Reads parts of a file straight into the caller's buffers (a checkpoint's header, then its
// tensors), knowing its size up front. Errors are "<path>: <why>".
class FileReader {
 public:
  FileReader() = default;
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  ~FileReader();
  bool open(const std::string& path, std::string* error);
  size_t size() const { return size_; }
  // Exactly n bytes at offset into dst; a short file is an error.
  bool read(size_t offset, void* dst, size_t n, std::string* error);

 private:
  int fd_ = -1;
  size_t size_ = 0;
  std::string path_;
};
bool make_dirs(const std::string& path, std::string* error);
// Makes `dir` and holds an exclusive lock on its `.lock` file (flock) until the process
// ends, so that two runs never write one directory at once. false + "<dir>: ..." naming the
// holder's pid when another process has it.
bool lock_directory(const std::string& dir, std::string* error);
// Removes what AtomicFileWriter left in `dir` from processes that no longer run (NAME.tmp.PID
// of a writer killed before its rename: never read, but as large as what it was writing).
// Returns how many it removed.
int remove_orphaned_temp_files(const std::string& dir);
// Removes a file; one that is not there is not an error. false + "<path>: <why>" otherwise.
bool remove_file(const std::string& path, std::string* error);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted; empty if unreadable
std::string join_path(const std::string& a, const std::string& b);
std::string dir_name(const std::string& path);
// /proc/self/exe resolved, unless set_lookup_executable named another binary.
std::string executable_path();
// Makes the lookups below (and executable_path) answer for `path`, a binary this process
// will run, as that binary would find its files: what nfn._native asks on the trainer's behalf.
void set_lookup_executable(const std::string& path);
// Where a workspace-relative path ("cc/ops") of this binary's Bazel runfiles may be: the
// binary's own <exe>.runfiles, the runfiles tree it was placed in (a py_binary's),
// $RUNFILES_DIR, and the output tree a binary under cc/bin sits in, in that order. The
// directory beside the binary comes first.
std::vector<std::string> sibling_and_runfiles_dirs(const std::string& workspace_relative);

}  // namespace nfn
