// How attention=cudnn finds cuDNN (cuda/ops/attention_cudnn.cc), with no GPU: the reason it
// gives when libcudnn.so.9 cannot be opened, and, against cuDNN's real dispatcher
// (libcudnn.so.9 from the wheel, which tools/bootstrap.sh keeps beside the headers) without
// its engine libraries, a one-line reason where cuDNN itself would abort the process. The
// answer is computed once per process, so each case runs in a child.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/ops/attention_cudnn.h"
#include "tests/cc/child.h"
#include "tests/cc/expect.h"

namespace {

// The reason (or "usable: <path name>") from a child process with NFN_CUDNN_PATH=path;
// *exit_code is the child's status (non-zero when it died, as cuDNN's abort would).
std::string reason_with(const std::string& path, int* exit_code) {
  const nfn_test::ChildResult r = nfn_test::run_in_child([&] {
    setenv("NFN_CUDNN_PATH", path.c_str(), 1);
    const char* why = nfn::cuda::cudnn_unavailable_reason();
    std::fputs(why ? why : (std::string("usable: ") + nfn::cuda::cudnn_path_name()).c_str(), stderr);
  });
  *exit_code = r.signal ? 128 + r.signal : r.exit_code;
  return r.err;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
#ifndef NFN_HAVE_CUDNN  // built without the headers: that is the reason, whatever the path
  std::string why = reason_with("/nonexistent/libcudnn.so.9", &code);
  EXPECT(code == 0 && contains(why, "built without the cuDNN headers"), "no headers: '%s'", why.c_str());
  (void)argc, (void)argv;
  return nfn_test::finish("cudnn_loading_test");
#endif
  std::string why = reason_with("/nonexistent/libcudnn.so.9", &code);
  EXPECT(code == 0 && contains(why, "cannot open libcudnn.so.9 (tried /nonexistent/libcudnn.so.9, libcudnn.so.9") &&
             contains(why, "NFN_CUDNN_PATH"),
         "no cuDNN anywhere: exit %d, '%s'", code, why.c_str());
  const char* dispatcher = argc > 1 ? argv[1] : "";
  if (*dispatcher == '\0') {
    std::printf("cudnn_loading_test: no cuDNN dispatcher built in (no cuDNN headers): that case not run\n");
  } else {
    why = reason_with(dispatcher, &code);
    EXPECT(code == 0 && contains(why, "libcudnn.so.9 was found but its libcudnn_graph.so.9 was not"),
           "the dispatcher alone: exit %d, '%s'", code, why.c_str());
  }
  return nfn_test::finish("cudnn_loading_test");
}
