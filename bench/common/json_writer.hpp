// The one JSON writer of the benchmarks and tools: every benchmark prints one JSON object on
// stdout, which scripts compare. Header-only and dependency-free so that the library's
// benchmarks build without the daemon's packages. Builds one object (or array) as a string; no
// shared state, no threads.
//
// Numbers: whole values up to 1e15 print without a fraction, others with 6 significant digits,
// non-finite ones as null (JSON has no NaN). Strings are escaped.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace benchutil {

inline std::string json_number(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (std::isfinite(v))
    std::snprintf(buf, sizeof buf, "%.6g", v);
  else
    std::snprintf(buf, sizeof buf, "null");
  return buf;
}

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// An object: add members in order, then done() (or print()).
class JsonObject {
 public:
  JsonObject& num(std::string_view key, double v) { return raw(key, json_number(v)); }
  JsonObject& integer(std::string_view key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& str(std::string_view key, std::string_view v) { return raw(key, json_string(v)); }
  JsonObject& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  // `json` must already be JSON (a nested object's or array's done()).
  JsonObject& raw(std::string_view key, std::string_view json) {
    body_ += body_.empty() ? "{" : ",";
    body_ += json_string(key);
    body_ += ':';
    body_ += json;
    return *this;
  }
  std::string done() const { return body_.empty() ? "{}" : body_ + "}"; }
  // The benchmark's result: one line on stdout.
  void print() const { std::printf("%s\n", done().c_str()); }

 private:
  std::string body_;
};

// An array of JSON values (objects' done(), numbers, strings).
class JsonArray {
 public:
  JsonArray& raw(std::string_view json) {
    body_ += body_.empty() ? "[" : ",";
    body_ += json;
    return *this;
  }
  JsonArray& add(const JsonObject& o) { return raw(o.done()); }
  std::string done() const { return body_.empty() ? "[]" : body_ + "]"; }

 private:
  std::string body_;
};

}  // namespace benchutil
