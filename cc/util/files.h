// File helpers with the project's rule built in: what is written is written whole
// (temp file, fsync, rename) or not at all.
#pragma once

#include <string>
#include <vector>

namespace nfn {

// Writes `bytes` to `path` atomically. false + "<path>: <why>" on failure.
bool write_file_atomic(const std::string& path, const void* bytes, size_t size, std::string* error);
inline bool write_file_atomic(const std::string& path, const std::string& text, std::string* error) {
  return write_file_atomic(path, text.data(), text.size(), error);
}
bool read_file(const std::string& path, std::string* out, std::string* error);
bool make_dirs(const std::string& path, std::string* error);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted; empty if unreadable
std::string join_path(const std::string& a, const std::string& b);
std::string dir_name(const std::string& path);
std::string executable_path();  // /proc/self/exe resolved
// Where a workspace-relative path ("cc/ops") of this binary's Bazel runfiles may be: the
// binary's own <exe>.runfiles, the runfiles tree it was placed in (a py_binary's), and
// $RUNFILES_DIR, in that order. The directory beside the binary comes first.
std::vector<std::string> sibling_and_runfiles_dirs(const std::string& workspace_relative);

}  // namespace nfn
