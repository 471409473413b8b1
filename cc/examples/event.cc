// Category: event
// Shows: event_create, event_record, event_wait, event_query, event_elapsed, event_free: a
// copy into alloc_host memory is read once the event recorded after it is done, and the time
// from an event before the work to that one (both made with NFN_EVENT_TIMING)
#include <cstring>

#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const size_t n = 4;
  void *x = nullptr, *host = nullptr;
  example::check(s, o.alloc(s.ctx, n * 4, &x), "alloc");
  example::check(s, o.alloc_host(s.ctx, n * 4, &host), "alloc_host");
  nfn_event *start_event = nullptr, *done_event = nullptr;
  example::check(s, o.event_create(s.ctx, NFN_EVENT_TIMING, &start_event), "event_create");
  example::check(s, o.event_create(s.ctx, NFN_EVENT_TIMING, &done_event), "event_create");
  example::check(s, o.event_record(s.ctx, start_event), "event_record");
  example::check(s, o.fill(s.ctx, x, NFN_F32, 2.5f, n), "fill");
  example::check(s, o.copy(s.ctx, host, x, n * 4, NFN_DEVICE_TO_HOST), "copy");
  example::check(s, o.event_record(s.ctx, done_event), "event_record");
  example::check(s, o.event_wait(s.ctx, done_event), "event_wait");  // the copy has landed
  int done = 0;
  example::check(s, o.event_query(s.ctx, done_event, &done), "event_query");
  float ms = -1;
  example::check(s, o.event_elapsed(s.ctx, start_event, done_event, &ms), "event_elapsed");
  std::vector<float> values(n);
  std::memcpy(values.data(), host, n * 4);
  std::printf("# fill x with 2.5, copy it into host memory, record an event, wait for it, read;\n");
  std::printf("# timed: 1 where event_elapsed gave the stream's time from the first event (it varies)\n");
  example::print("done", std::vector<int32_t>{done});
  example::print("timed", std::vector<int32_t>{ms >= 0});
  example::print("host", values);
  example::check(s, o.event_free(s.ctx, start_event), "event_free");
  example::check(s, o.event_free(s.ctx, done_event), "event_free");
  example::check(s, o.free_host(s.ctx, host), "free_host");
  example::free_all(s, {x});
  example::close(&s);
  return 0;
}
