// Command-line flags for the native binaries: --name VALUE or --name=VALUE, every flag
// declared up front with its help, unknown flags and bad values are one-line errors.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace nfn {

class Flags {
 public:
  Flags(std::string program, std::string summary);
  // Declares a flag taking a value (default "" means unset) or a boolean switch.
  void value(const std::string& name, const std::string& help, const std::string& default_value = "");
  void toggle(const std::string& name, const std::string& help);

  // Parses argv. Returns false with *error set ("unknown flag --x", "--x needs a value").
  bool parse(int argc, char** argv, std::string* error);

  bool has(const std::string& name) const;  // given on the command line (or toggled)
  std::string get(const std::string& name) const;
  // Typed reads; *error gets "--name: 'abc' is not an integer" style messages.
  bool get_int(const std::string& name, long long* out, std::string* error) const;
  bool get_double(const std::string& name, double* out, std::string* error) const;
  bool on(const std::string& name) const { return has(name); }

  std::string help() const;
  const std::vector<std::string>& given_order() const { return order_; }

 private:
  struct Spec {
    std::string help;
    std::string default_value;
    bool is_toggle = false;
  };
  std::string program_, summary_;
  std::vector<std::string> names_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> order_;
};

}  // namespace nfn
