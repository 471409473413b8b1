// Command-line flags for the native binaries, declared once as a table of FlagSpec: --name
// VALUE or --name=VALUE, other spellings (aliases) of a flag, typed values checked on parse
// (integers, finite numbers, ranges, choices), a generated --help, and the same table as JSON
// (describe) for the Python command line, which builds its parser from it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cc/util/json.h"

namespace nfn {

enum class FlagType { kInt, kFloat, kText, kChoice, kToggle };

struct FlagSpec {
  const char* name;
  const char* group;  // a help heading; kInternalGroup: set by nfn train itself, not a user's
  FlagType type;
  const char* help;
  const char* default_value = "";  // "" means unset
  const char* choices = "";        // kChoice: space-separated values
  double min = -1e300, max = 1e300;  // kInt and kFloat: the accepted range
  const char* aliases = "";        // other spellings, space-separated
  const char* value_aliases = "";  // other spellings of choices, "old=new" space-separated
};

constexpr const char* kInternalGroup = "internal";
// The largest value of an int flag that a C int holds (its spec's max).
constexpr double kIntFlagMax = 2147483647;

class Flags {
 public:
  Flags(std::string program, std::string summary, std::vector<FlagSpec> specs);

  // Parses argv, checking each value against its spec. false with one line in *error: an
  // unknown flag, a missing value, a value of the wrong type, range or choice, or a flag
  // given under two spellings with different values.
  bool parse(int argc, char** argv, std::string* error);

  bool has(const std::string& name) const;  // given on the command line (or toggled)
  // The value given, else the default ("" for none).
  std::string get(const std::string& name) const;
  // Typed reads of a value parse has checked; the default where not given (0 when none).
  long long get_int(const std::string& name) const;
  double get_double(const std::string& name) const;

  std::string help() const;
  // The table as JSON: {"program", "flags": [{name, group, type, help, default, choices,
  // min, max, aliases, value_aliases}]}.
  Json describe() const;

 private:
  const FlagSpec* find(const std::string& spelling) const;
  bool check_value(const FlagSpec& spec, const std::string& spelled, std::string* value, std::string* error) const;

  std::string program_, summary_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;   // canonical name -> value
  std::map<std::string, std::string> spelled_;  // canonical name -> how it was given
};

}  // namespace nfn
