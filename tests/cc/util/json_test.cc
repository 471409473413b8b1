// Integers through nfn::Json exactly: written as their digits and read back as the same int64
// (a seed past 2^53 must not come back rounded, nor one past int64 be cast out of range); an
// object's members in the order written, a repeated key once with its last value.
#include "cc/util/json.h"

#include <cstdint>
#include <string>

#include "tests/cc/expect.h"

int main() {
  std::string error;
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{9007199254740993}, INT64_MAX, INT64_MIN}) {
    const std::string text = nfn::Json(v).dump();
    EXPECT(text == std::to_string(v), "dump %s", text.c_str());
    nfn::Json back;
    EXPECT(nfn::Json::parse("{\"seed\": " + text + "}", &back, &error) && back.find("seed")->is_integer() &&
               back.find("seed")->as_integer() == v,
           "%s reads back as itself: %s", text.c_str(), error.c_str());
  }
  EXPECT(nfn::Json(uint64_t{1} << 60).dump() == "1152921504606846976", "a uint64 within int64");
  nfn::Json j;
  // Numbers that are no int64: doubles, never cast out of range.
  for (const char* text : {"9223372036854775808", "-9223372036854775809", "18446744073709551616", "3.0", "1e3"}) {
    EXPECT(nfn::Json::parse(text, &j, &error) && j.is_number() && !j.is_integer(), "%s is a double", text);
  }
  EXPECT(nfn::Json::parse("18446744073709551616", &j, &error) && j.as_number() == 18446744073709551616.0, "its value");
  EXPECT(nfn::Json(1.5).dump() == "1.5" && nfn::Json(3.0).dump() == "3" && nfn::Json(0.1).dump() == "0.1",
         "doubles");
  EXPECT(nfn::Json::parse("{\"b\": [1], \"a\": 2, \"b\": [3, 4]}", &j, &error), "members: %s", error.c_str());
  const auto& members = j.members();
  EXPECT(members.size() == 2 && members[0].first == "b" && members[0].second.is_array() &&
             members[0].second.items().size() == 2 && members[1].first == "a" && !members[1].second.is_array(),
         "members in order, b once with its last value");
  return nfn_test::finish("json_test");
}
