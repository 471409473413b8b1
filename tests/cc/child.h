// Runs a function in a forked child, for tests of what ends a process (a fault, an abort) or
// of state a process computes once: what the child wrote to stderr, and how it ended.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace nfn_test {

struct ChildResult {
  std::string err;    // the child's stderr
  int exit_code = 0;  // its exit status, when it exited
  int signal = 0;     // the signal that ended it, or 0
};

inline ChildResult run_in_child(const std::function<void()>& fn) {
  ChildResult r;
  int fds[2];
  if (pipe(fds) != 0) {
    r.err = "pipe failed";
    r.exit_code = -1;
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return r;
}

}  // namespace nfn_test
