#include "cc/util/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace nfn {

namespace {

std::vector<std::string> words(const char* text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool parse_int(const std::string& v, long long* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(v.c_str(), &end, 10);
  return !v.empty() && *end == '\0' && errno == 0;
}

bool parse_double(const std::string& v, double* out) {
  char* end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0';
}

// A bound as the user reads it: 1, not 1.000000.
std::string number(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

const char* type_name(FlagType t) {
  switch (t) {
    case FlagType::kInt: return "int";
    case FlagType::kFloat: return "float";
    case FlagType::kChoice: return "choice";
    case FlagType::kToggle: return "toggle";
    default: return "text";
  }
}

}  // namespace

Flags::Flags(std::string program, std::string summary, std::vector<FlagSpec> specs)
    : program_(std::move(program)), summary_(std::move(summary)), specs_(std::move(specs)) {}

const FlagSpec* Flags::find(const std::string& spelling) const {
  for (const FlagSpec& s : specs_) {
    if (spelling == s.name) return &s;
    for (const std::string& a : words(s.aliases))
      if (spelling == a) return &s;
  }
  return nullptr;
}

bool Flags::check_value(const FlagSpec& spec, const std::string& spelled, std::string* value,
                        std::string* error) const {
  const std::string flag = "--" + spelled;
  switch (spec.type) {
    case FlagType::kInt: {
      long long x;
      if (!parse_int(*value, &x)) {
        *error = flag + ": '" + *value + "' is not an integer";
        return false;
      }
      if (x < spec.min || x > spec.max) {
        const bool bounded = spec.max < kIntFlagMax;  // else int's own bound, not worth naming
        *error = flag + ": " + *value + " is out of range (" +
                 (bounded ? number(spec.min) + " to " + number(spec.max) : "at least " + number(spec.min)) + ")";
        return false;
      }
      return true;
    }
    case FlagType::kFloat: {
      double x;
      if (!parse_double(*value, &x)) {
        *error = flag + ": '" + *value + "' is not a number";
        return false;
      }
      if (!std::isfinite(x)) {
        *error = flag + ": " + *value + " is not a finite number";
        return false;
      }
      if (x < spec.min) {
        *error = flag + ": " + (spec.min == 0 ? "must not be negative" : *value + " is below " + number(spec.min));
        return false;
      }
      if (x > spec.max) {
        *error = flag + " " + *value + ": must be at most " + number(spec.max);
        return false;
      }
      return true;
    }
    case FlagType::kChoice: {
      for (const std::string& m : words(spec.value_aliases)) {
        const size_t eq = m.find('=');
        if (m.substr(0, eq) == *value) *value = m.substr(eq + 1);
      }
      std::string all;
      for (const std::string& c : words(spec.choices)) {
        if (c == *value) return true;
        all += (all.empty() ? "" : ", ") + c;
      }
      *error = flag + " " + *value + ": expected one of " + all;
      return false;
    }
    default:
      return true;
  }
}

bool Flags::parse(int argc, char** argv, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "' (flags start with --)";
      return false;
    }
    std::string spelled = arg.substr(2), val;
    const size_t eq = spelled.find('=');
    const bool has_inline = eq != std::string::npos;
    if (has_inline) {
      val = spelled.substr(eq + 1);
      spelled = spelled.substr(0, eq);
    }
    const FlagSpec* spec = find(spelled);
    if (spec == nullptr) {
      *error = "unknown flag --" + spelled + " (see --help)";
      return false;
    }
    if (spec->type == FlagType::kToggle) {
      if (has_inline) {
        *error = "--" + spelled + " takes no value";
        return false;
      }
      val = "1";
    } else if (!has_inline) {
      if (i + 1 >= argc) {
        *error = "--" + spelled + " needs a value";
        return false;
      }
      val = argv[++i];
    }
    if (!check_value(*spec, spelled, &val, error)) return false;
    // The same flag again under its own spelling: the last wins, as usual. Under another
    // spelling with another value, which was meant is unknown.
    auto given = values_.find(spec->name);
    if (given != values_.end() && spelled_[spec->name] != spelled && given->second != val) {
      *error = "--" + spelled + " " + val + " contradicts --" + spelled_[spec->name] + " " + given->second +
               " (two spellings of one flag); give one";
      return false;
    }
    values_[spec->name] = val;
    spelled_[spec->name] = spelled;
  }
  return true;
}

bool Flags::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Flags::get(const std::string& name) const {
  auto v = values_.find(name);
  if (v != values_.end()) return v->second;
  const FlagSpec* s = find(name);
  return s == nullptr ? "" : s->default_value;
}

long long Flags::get_int(const std::string& name) const {
  long long x = 0;
  return parse_int(get(name), &x) ? x : 0;
}

double Flags::get_double(const std::string& name) const {
  double x = 0;
  return parse_double(get(name), &x) ? x : 0;
}

std::string Flags::help() const {
  std::string out = "usage: " + program_ + " [flags]\n\n" + summary_ + "\n";
  std::string group;
  for (const FlagSpec& s : specs_) {
    if (s.group != group) out += "\n" + std::string(s.group) + " flags:\n";
    group = s.group;
    std::string left = "  --" + std::string(s.name) + (s.type == FlagType::kToggle ? "" : " V");
    if (left.size() < 28) left.resize(28, ' ');
    else left += "  ";
    out += left + s.help;
    if (*s.choices) out += " {" + std::string(s.choices) + "}";
    if (*s.default_value) out += " (default: " + std::string(s.default_value) + ")";
    std::string also;
    for (const std::string& a : words(s.aliases)) also += (also.empty() ? " (also --" : ", --") + a;
    if (!also.empty()) out += also + ")";
    out += "\n";
  }
  return out;
}

Json Flags::describe() const {
  Json flags = Json::array();
  for (const FlagSpec& s : specs_) {
    Json f = Json::object();
    f.set("name", s.name);
    f.set("group", s.group);
    f.set("type", type_name(s.type));
    f.set("help", s.help);
    f.set("default", *s.default_value ? Json(s.default_value) : Json());
    Json choices = Json::array(), aliases = Json::array(), value_aliases = Json::object();
    for (const std::string& c : words(s.choices)) choices.push(c);
    for (const std::string& a : words(s.aliases)) aliases.push(a);
    for (const std::string& m : words(s.value_aliases)) value_aliases.set(m.substr(0, m.find('=')), m.substr(m.find('=') + 1));
    f.set("choices", choices);
    f.set("min", s.min > -1e300 ? Json(s.min) : Json());
    f.set("max", s.max < 1e300 ? Json(s.max) : Json());
    f.set("aliases", aliases);
    f.set("value_aliases", value_aliases);
    flags.push(f);
  }
  Json out = Json::object();
  out.set("program", program_);
  out.set("flags", flags);
  return out;
}

}  // namespace nfn
