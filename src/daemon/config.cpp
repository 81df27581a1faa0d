#include "config.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>
#include <set>
#include <sstream>

namespace haltpolld {

using nlohmann::json;

ConfigError::ConfigError(std::string path, std::string reason)
    : std::runtime_error((path.empty() ? std::string("config") : "config " + path) + ": " + reason),
      path_(std::move(path)),
      reason_(std::move(reason)) {}

std::string_view to_string(Mode m) noexcept { return m == Mode::kernel ? "kernel" : "observe"; }

namespace {

// Walks one JSON object, remembering which keys were consumed so that unknown keys are refused.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) throw ConfigError(path_, "expected an object, got " + std::string(j_.type_name()));
  }
  ~ObjectReader() = default;
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  // Returns the member or nullptr when absent.
  const json* member(const char* key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string child(const char* key) const { return path_ + "/" + key; }

  void string(const char* key, std::string& out) {
    if (const json* v = member(key)) {
      if (!v->is_string()) throw ConfigError(child(key), "expected a string, got " + std::string(v->type_name()));
      out = v->get<std::string>();
    }
  }
  template <class F>
  void string_one_of(const char* key, F&& assign, std::initializer_list<const char*> allowed) {
    std::string s;
    bool present = j_.contains(key);
    string(key, s);
    if (!present) return;
    for (const char* a : allowed)
      if (s == a) return assign(s);
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw ConfigError(child(key), "\"" + s + "\" is not one of: " + list);
  }
  template <class F>
  void object(const char* key, F&& read) {
    if (const json* v = member(key)) {
      ObjectReader sub(*v, child(key));
      read(sub);
      sub.finish();
    }
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) throw ConfigError(path_ + "/" + it.key(), "unknown key");
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

unsigned parse_octal_mode(const std::string& s, const std::string& path) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
    throw ConfigError(path, "expected an octal file mode such as \"0660\", got \"" + s + "\"");
  return static_cast<unsigned>(std::stoul(s, nullptr, 8));
}

std::string format_octal_mode(unsigned m) {
  std::ostringstream o;
  o << '0' << std::oct << m;
  return o.str();
}

void validate_cpus(const std::string& s, const std::string& path) {
  if (s == "all") return;
  // "0-3,6": comma-separated CPU numbers or ranges a-b with a <= b.
  std::istringstream in(s);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    auto bad = [&] { throw ConfigError(path, "expected \"all\" or a CPU list such as \"0-3,6\", got \"" + s + "\""); };
    if (item.empty() || item.find_first_not_of("0123456789-") != std::string::npos) bad();
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      if (item.size() > 4) bad();
    } else {
      std::string a = item.substr(0, dash), b = item.substr(dash + 1);
      if (a.empty() || b.empty() || a.size() > 4 || b.size() > 4 || b.find('-') != std::string::npos) bad();
      if (std::stoul(a) > std::stoul(b)) bad();
    }
    any = true;
  }
  if (!any) throw ConfigError(path, "empty CPU list");
}

}  // namespace

Config parse_config(std::string_view text, const Config& base) {
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw ConfigError("", std::string("not valid JSON: ") + e.what());
  }
  Config c = base;
  ObjectReader root(j, "");
  root.string_one_of("mode", [&](const std::string& s) { c.mode = s == "kernel" ? Mode::kernel : Mode::observe; },
                     {"observe", "kernel"});
  root.string("cpus", c.cpus);
  validate_cpus(c.cpus, "/cpus");
  root.string("sysfs_root", c.sysfs_root);
  if (c.sysfs_root.empty() || c.sysfs_root.front() != '/')
    throw ConfigError("/sysfs_root", "expected an absolute path");
  root.object("socket", [&](ObjectReader& r) {
    r.string("path", c.socket.path);
    if (c.socket.path.empty()) throw ConfigError("/socket/path", "must not be empty");
    std::string mode = format_octal_mode(c.socket.mode);
    r.string("mode", mode);
    c.socket.mode = parse_octal_mode(mode, "/socket/mode");
    if (c.socket.mode > 0777) throw ConfigError("/socket/mode", "only permission bits (at most 0777) are allowed");
    r.string("admin_group", c.socket.admin_group);
  });
  root.object("log", [&](ObjectReader& r) {
    r.string_one_of("level", [&](const std::string& s) { c.log.level = s; },
                    {"trace", "debug", "info", "warn", "error", "critical", "off"});
  });
  root.finish();
  return c;
}

Config load_config_file(const std::string& file, const Config& base) {
  std::ifstream in(file);
  if (!in) throw ConfigError("", "cannot read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), base);
}

nlohmann::json to_json(const Config& c) {
  return json{{"mode", to_string(c.mode)},
              {"cpus", c.cpus},
              {"sysfs_root", c.sysfs_root},
              {"socket", {{"path", c.socket.path}, {"mode", format_octal_mode(c.socket.mode)}, {"admin_group", c.socket.admin_group}}},
              {"log", {{"level", c.log.level}}}};
}

}  // namespace haltpolld
