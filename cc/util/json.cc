#include "cc/util/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace nfn {

Json& Json::set(const std::string& key, Json value) {
  type_ = Type::Object;
  for (auto& m : members_)
    if (m.first == key) return m.second = std::move(value);
  members_.emplace_back(key, std::move(value));
  return members_.back().second;
}

const Json* Json::find(const std::string& key) const {
  for (const auto& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

Json& Json::push(Json value) {
  type_ = Type::Array;
  items_.push_back(std::move(value));
  return items_.back();
}

namespace {

void dump_string(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void newline(std::string* out, int indent, int depth) {
  if (indent < 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent * depth), ' ');
}

}  // namespace

void Json::dump_to(std::string* out, int indent, int depth) const {
  switch (type_) {
    case Type::Null: *out += "null"; break;
    case Type::Bool: *out += bool_ ? "true" : "false"; break;
    case Type::Number: {
      if (is_int_) {
        *out += std::to_string(int_);
      } else if (!std::isfinite(num_)) {
        *out += "null";  // JSON has no NaN or infinity
      } else if (num_ == std::floor(num_) && std::fabs(num_) < 1e15) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", num_);
        *out += buf;
      } else {
        // The shortest form that reads back as the same double (0.1, not 0.1000000000000000056).
        char buf[32];
        for (int precision = 15; precision <= 17; ++precision) {
          std::snprintf(buf, sizeof buf, "%.*g", precision, num_);
          if (std::strtod(buf, nullptr) == num_) break;
        }
        *out += buf;
      }
      break;
    }
    case Type::String: dump_string(str_, out); break;
    case Type::Array: {
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out->push_back(',');
        newline(out, indent, depth + 1);
        items_[i].dump_to(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(out, indent, depth);
      out->push_back(']');
      break;
    }
    case Type::Object: {
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out->push_back(',');
        newline(out, indent, depth + 1);
        dump_string(members_[i].first, out);
        *out += indent >= 0 ? ": " : ":";
        members_[i].second.dump_to(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(out, indent, depth);
      out->push_back('}');
      break;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(&out, indent, 0);
  return out;
}

namespace {

struct Parser {
  const std::string& s;
  size_t i = 0;
  std::string error;

  bool fail(const std::string& what) {
    if (!error.empty()) return false;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i && k < s.size(); ++k) {
      if (s[k] == '\n') ++line, col = 1;
      else ++col;
    }
    error = "line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what;
    return false;
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  bool literal(const char* word, Json v, Json* out) {
    size_t n = std::char_traits<char>::length(word);
    if (s.compare(i, n, word) != 0) return fail("unexpected character");
    i += n;
    *out = std::move(v);
    return true;
  }
  bool hex4(unsigned* cp) {
    if (i + 4 > s.size()) return fail("truncated \\u escape");
    *cp = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i++];
      *cp <<= 4;
      if (c >= '0' && c <= '9') *cp |= c - '0';
      else if (c >= 'a' && c <= 'f') *cp |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') *cp |= c - 'A' + 10;
      else return fail("bad \\u escape");
    }
    return true;
  }
  static void utf8(unsigned cp, std::string* out) {
    if (cp < 0x80) out->push_back(static_cast<char>(cp));
    else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }
  bool string(std::string* out) {
    ++i;  // opening quote
    while (i < s.size() && s[i] != '"') {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c < 0x20) return fail("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++i;
        continue;
      }
      if (++i >= s.size()) break;
      char e = s[i++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          unsigned cp;
          if (!hex4(&cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            i += 2;
            unsigned lo;
            if (!hex4(&lo)) return false;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          utf8(cp, out);
          break;
        }
        default: return fail("bad escape");
      }
    }
    if (i >= s.size()) return fail("unterminated string");
    ++i;
    return true;
  }
  bool value(Json* out, int depth) {
    if (depth > 200) return fail("nested too deeply");
    ws();
    if (i >= s.size()) return fail("unexpected end of input");
    char c = s[i];
    if (c == 'n') return literal("null", Json(), out);
    if (c == 't') return literal("true", Json(true), out);
    if (c == 'f') return literal("false", Json(false), out);
    if (c == '"') {
      std::string str;
      if (!string(&str)) return false;
      *out = Json(std::move(str));
      return true;
    }
    if (c == '[') {
      ++i;
      *out = Json::array();
      ws();
      if (i < s.size() && s[i] == ']') return ++i, true;
      while (true) {
        Json item;
        if (!value(&item, depth + 1)) return false;
        out->push(std::move(item));
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == ']') return ++i, true;
        return fail("expected , or ]");
      }
    }
    if (c == '{') {
      ++i;
      *out = Json::object();
      ws();
      if (i < s.size() && s[i] == '}') return ++i, true;
      while (true) {
        ws();
        if (i >= s.size() || s[i] != '"') return fail("expected a string key");
        std::string key;
        if (!string(&key)) return false;
        ws();
        if (i >= s.size() || s[i] != ':') return fail("expected :");
        ++i;
        Json item;
        if (!value(&item, depth + 1)) return false;
        out->set(key, std::move(item));
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == '}') return ++i, true;
        return fail("expected , or }");
      }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = i;
      if (s[i] == '-') ++i;
      while (i < s.size() && (isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' ||
                              s[i] == 'E' || s[i] == '+' || s[i] == '-'))
        ++i;
      std::string num = s.substr(start, i - start);
      char* end = nullptr;
      double v = std::strtod(num.c_str(), &end);
      if (end == nullptr || *end != '\0') return i = start, fail("bad number");
      if (num.find_first_of(".eE") == std::string::npos) {  // an integer: exact where int64 holds it
        errno = 0;
        const long long exact = std::strtoll(num.c_str(), &end, 10);
        if (errno == 0 && *end == '\0') {
          *out = Json(static_cast<int64_t>(exact));
          return true;
        }
      }
      *out = Json(v);
      return true;
    }
    return fail("unexpected character");
  }
};

}  // namespace

bool Json::parse(const std::string& text, Json* out, std::string* error) {
  Parser p{text};
  if (!p.value(out, 0)) {
    *error = p.error;
    return false;
  }
  p.ws();
  if (p.i != text.size()) {
    p.fail("trailing characters");
    *error = p.error;
    return false;
  }
  return true;
}

}  // namespace nfn
