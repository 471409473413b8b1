// A small JSON value with a writer and a strict reader: enough for reports, plans and
// manifests, and errors that say where the text went wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nfn {

class Json {
 public:
  Json() = default;
  Json(std::nullptr_t) {}  // null, where nullptr would otherwise reach Json(const char*)
  Json(bool b) : type_(Type::Bool), bool_(b) {}
  // Integers are kept exactly (written as their digits, read back as the same value); a
  // uint64 past INT64_MAX is a double, as is an integer literal outside int64's range.
  Json(int v) : type_(Type::Number), num_(v), int_(v), is_int_(true) {}
  Json(int64_t v) : type_(Type::Number), num_(static_cast<double>(v)), int_(v), is_int_(true) {}
  Json(uint64_t v)
      : type_(Type::Number), num_(static_cast<double>(v)), int_(static_cast<int64_t>(v)), is_int_(v <= INT64_MAX) {}
  Json(double v) : type_(Type::Number), num_(v) {}
  Json(const char* s) : type_(Type::String), str_(s) {}
  Json(std::string s) : type_(Type::String), str_(std::move(s)) {}

  static Json array() { Json j; j.type_ = Type::Array; return j; }
  static Json object() { Json j; j.type_ = Type::Object; return j; }

  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_string() const { return type_ == Type::String; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_array() const { return type_ == Type::Array; }
  bool as_bool() const { return bool_; }
  double as_number() const { return num_; }
  // A number written without fraction or exponent within int64's range, or made from an integer.
  bool is_integer() const { return type_ == Type::Number && is_int_; }
  int64_t as_integer() const { return int_; }  // exact, where is_integer()
  const std::string& as_string() const { return str_; }
  const std::vector<Json>& items() const { return items_; }
  // An object's members in order (a parsed key given twice holds its last value, once).
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  // Object access: set keeps insertion order (reports read top to bottom as written).
  Json& set(const std::string& key, Json value);
  const Json* find(const std::string& key) const;
  Json& push(Json value);

  std::string dump(int indent = -1) const;

  // Strict RFC 8259 parse. On failure returns false with "line L, column C: what".
  static bool parse(const std::string& text, Json* out, std::string* error);

 private:
  enum class Type { Null, Bool, Number, String, Array, Object };

  void dump_to(std::string* out, int indent, int depth) const;

  Type type_ = Type::Null;
  bool bool_ = false;
  double num_ = 0;
  int64_t int_ = 0;  // the exact value, where is_int_
  bool is_int_ = false;
  std::string str_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

}  // namespace nfn
