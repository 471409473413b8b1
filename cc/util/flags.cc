#include "cc/util/flags.h"

#include <cerrno>
#include <cstdlib>

namespace nfn {

Flags::Flags(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::value(const std::string& name, const std::string& help, const std::string& default_value) {
  names_.push_back(name);
  specs_[name] = Spec{help, default_value, false};
}

void Flags::toggle(const std::string& name, const std::string& help) {
  names_.push_back(name);
  specs_[name] = Spec{help, "", true};
}

bool Flags::parse(int argc, char** argv, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "' (flags start with --)";
      return false;
    }
    std::string name = arg.substr(2), val;
    bool has_inline = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      val = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      *error = "unknown flag --" + name + " (see --help)";
      return false;
    }
    if (it->second.is_toggle) {
      if (has_inline) {
        *error = "--" + name + " takes no value";
        return false;
      }
      val = "1";
    } else if (!has_inline) {
      if (i + 1 >= argc) {
        *error = "--" + name + " needs a value";
        return false;
      }
      val = argv[++i];
    }
    values_[name] = val;
    order_.push_back(name);
  }
  return true;
}

bool Flags::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Flags::get(const std::string& name) const {
  auto v = values_.find(name);
  if (v != values_.end()) return v->second;
  auto s = specs_.find(name);
  return s == specs_.end() ? "" : s->second.default_value;
}

bool Flags::get_int(const std::string& name, long long* out, std::string* error) const {
  std::string v = get(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) {
    *error = "--" + name + ": '" + v + "' is not an integer";
    return false;
  }
  *out = x;
  return true;
}

bool Flags::get_double(const std::string& name, double* out, std::string* error) const {
  std::string v = get(name);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') {
    *error = "--" + name + ": '" + v + "' is not a number";
    return false;
  }
  *out = x;
  return true;
}

std::string Flags::help() const {
  std::string out = "usage: " + program_ + " [flags]\n\n" + summary_ + "\n\nflags:\n";
  for (const auto& n : names_) {
    const Spec& s = specs_.at(n);
    std::string left = "  --" + n + (s.is_toggle ? "" : " V");
    if (left.size() < 28) left.resize(28, ' ');
    else left += "  ";
    out += left + s.help;
    if (!s.default_value.empty()) out += " (default: " + s.default_value + ")";
    out += "\n";
  }
  return out;
}

}  // namespace nfn
